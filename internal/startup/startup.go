// Package startup waits, before relay takes its job, for the services it depends on: MySQL, a
// Galera node in the primary component, Kafka and its topics, and the schema registry of a
// registry input format.
//
// Invariant: a dependency that does not serve yet (fault.Unavailable, the one classifier) is
// waited for, backing off with jitter up to a bound, until it serves, the context ends (SIGTERM,
// or the operator's startup_wait_timeout) or it fails in a way no wait cures, which ends the start
// at once. Every attempt that waits is logged and counted by dependency, and while it waits
// Ready says what for, for /readyz.
package startup

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/metrics"
)

// policy spaces the attempts: a dependency that comes up is noticed within about 5 s, and a
// fleet of relays waiting for one server does not knock in lockstep.
var policy = fault.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second}

// Dependencies of a start, the values of relay_startup_waits_total's label (metrics.Dependencies).
const (
	MySQL  = "mysql"
	Galera = "galera"
	Kafka  = "kafka"
	// Registry is the schema registry, asked for the subjects' schemas (input.format avro, json_schema).
	Registry = "schema_registry"
)

// Gate is one start's waiting: its log, its metric and what /readyz says meanwhile.
type Gate struct {
	log     *zap.Logger
	m       *metrics.Metrics
	policy  fault.Policy
	attempt time.Duration // the deadline of one attempt
	reason  atomic.Pointer[string]
}

// New returns a gate that gives each attempt at most attempt (a dial or a query to a host that
// does not answer at all fails then, and is waited out like a refusal).
func New(log *zap.Logger, m *metrics.Metrics, attempt time.Duration) *Gate {
	g := &Gate{log: log, m: m, policy: policy, attempt: attempt}
	g.set("starting")
	return g
}

func (g *Gate) set(reason string) { g.reason.Store(&reason) }

// Ready is never ready: the job has not started while only the gate answers; the reason says what
// the start waits for, or "starting" when it waits for nothing (a query in flight).
func (g *Gate) Ready() (bool, string) { return false, *g.reason.Load() }

// Wait runs fn until it succeeds, waiting out a dependency (dep, or galera when the MySQL node is
// outside the primary component) that does not serve yet. It returns nil, fn's error when no wait
// can cure it, or, when ctx ends, the last error joined with ctx's.
func (g *Gate) Wait(ctx context.Context, dep string, fn func(ctx context.Context) error) error {
	start := time.Now()
	attempts := 0
	err := fault.Await(ctx, g.policy, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, g.attempt)
		defer cancel()
		attempts++
		return fn(actx)
	}, func(attempt int, err error, wait time.Duration) {
		class := Class(dep, err)
		g.set(Reason(class, err))
		g.m.StartupWaits.WithLabelValues(class).Inc()
		g.log.Warn(Message(class), zap.String("dependency", class), zap.Int("attempt", attempt),
			zap.Duration("waited", time.Since(start).Round(time.Millisecond)), zap.Duration("backoff", wait), zap.Error(err))
	})
	g.set("starting")
	if err == nil && attempts > 1 {
		g.log.Info(dep+" answers", zap.String("dependency", dep), zap.Int("attempts", attempts),
			zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
	}
	return err
}

// Class is the dependency an error of dep's attempt waits for: galera when MySQL answered from
// a node outside the primary component.
func Class(dep string, err error) string {
	if dep == MySQL && fault.NotPrimary(err) {
		return Galera
	}
	return dep
}

// Message is the log message of an attempt that waits for class.
func Message(class string) string {
	if class == Galera {
		return "waiting for a primary Galera component"
	}
	return "waiting for " + class
}

// Reason is what /readyz answers while the start waits for class after err, cut to 200 bytes.
func Reason(class string, err error) string {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return fmt.Sprintf("%s: %s", Message(class), msg)
}
