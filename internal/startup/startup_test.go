package startup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/metrics"
)

func newGate(t *testing.T) (*Gate, *metrics.Metrics, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	m := metrics.New("x")
	g := New(zap.New(core), m, time.Second)
	g.policy.Sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	return g, m, logs
}

// count reads relay_startup_waits_total{dependency=dep}.
func count(t *testing.T, m *metrics.Metrics, dep string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.StartupWaits.WithLabelValues(dep).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// A MySQL that refuses connections, then a Galera node outside the primary component, are waited
// out: each attempt is logged and counted under its class, and /readyz says what the start waits
// for until it no longer does.
func TestWaitClasses(t *testing.T) {
	g, m, logs := newGate(t)
	if ok, why := g.Ready(); ok || why != "starting" {
		t.Fatalf("before any attempt: Ready() = %v, %q", ok, why)
	}
	answers := []error{
		fmt.Errorf("connect sink: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("connect sink: %w", context.DeadlineExceeded),
		&mysql.MySQLError{Number: fault.ErUnknownCom, Message: "WSREP has not yet prepared node for application use"},
		fmt.Errorf("connect sink: %w", fmt.Errorf("%w: Galera node (non-Primary)", fault.ErrNotPrimary)),
	}
	var reasons []string
	tries := 0
	err := g.Wait(context.Background(), MySQL, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Fatal("an attempt runs without a deadline")
		}
		if tries > 0 {
			_, why := g.Ready()
			reasons = append(reasons, why)
		}
		if tries++; tries <= len(answers) {
			return answers[tries-1]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"waiting for mysql: connect sink: unexpected EOF", "waiting for mysql: connect sink: context deadline exceeded",
		"waiting for a primary Galera component: Error 1047", "waiting for a primary Galera component: connect sink: Galera node outside"}
	for i, w := range want {
		if !strings.HasPrefix(reasons[i], w) {
			t.Errorf("/readyz after attempt %d: %q, want it to start with %q", i+1, reasons[i], w)
		}
	}
	if ok, why := g.Ready(); ok || why != "starting" {
		t.Errorf("after the wait: Ready() = %v, %q", ok, why)
	}
	for dep, n := range map[string]float64{MySQL: 2, Galera: 2, Kafka: 0} {
		if got := count(t, m, dep); got != n {
			t.Errorf("relay_startup_waits_total{dependency=%q} = %v, want %v", dep, got, n)
		}
	}
	if n := logs.FilterMessage("waiting for mysql").Len(); n != 2 {
		t.Errorf("%d 'waiting for mysql' lines, want 2", n)
	}
	if n := logs.FilterMessage("waiting for a primary Galera component").Len(); n != 2 {
		t.Errorf("%d 'waiting for a primary Galera component' lines, want 2", n)
	}
	if n := logs.FilterMessage("mysql answers").Len(); n != 1 {
		t.Errorf("%d 'mysql answers' lines, want 1", n)
	}
}

// What no wait cures ends the wait at once; so does the context (SIGTERM, startup_wait_timeout),
// with the last error for the message.
func TestWaitEnds(t *testing.T) {
	g, m, _ := newGate(t)
	denied := &mysql.MySQLError{Number: 1045, Message: "Access denied for user 'relay'"}
	tries := 0
	if err := g.Wait(context.Background(), MySQL, func(context.Context) error { tries++; return denied }); !errors.Is(err, denied) || tries != 1 {
		t.Fatalf("access denied: %v after %d tries, want it after 1", err, tries)
	}
	ctx, cancel := context.WithCancel(context.Background())
	topic := fault.Transient(errors.New("topic orders does not exist (relay never creates topics)"))
	tries = 0
	err := g.Wait(ctx, Kafka, func(context.Context) error {
		if tries++; tries == 5 {
			cancel()
		}
		return topic
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "topic orders does not exist") || tries != 5 {
		t.Fatalf("cancelled: %v after %d tries", err, tries)
	}
	if got := count(t, m, Kafka); got != 4 {
		t.Errorf("relay_startup_waits_total{dependency=kafka} = %v, want 4", got)
	}
}
