// Package pipeline runs one relay job: the consume loop, which folds the records a reader
// goroutine reads from Kafka and decodes, and hands each epoch to the commit protocol
// (internal/commit: the coordinator, the sink writers, recovery and the resolver).
//
// Layout: pipeline.go is the lifecycle (states, the restart policy, the fence); session.go one
// session between two recoveries; loop.go its consume loop (the fold, the cut); poll.go the
// goroutine that reads and decodes for it;
// decode.go the helpers that decode for the poll (input.decoders);
// group.go partitions moving in and out of a running session, for a consumer group's member;
// registry.go the poll's wait for a schema registry that does not answer.
//
// Invariants:
//   - The poll goroutine reads batches and decodes their records, and only that: decoding is pure
//     but for waiting out a schema registry that does not answer (registry.go). With
//     input.decoders above 1 helpers decode whole batches (decode.go) and the poll hands each over
//     once it is decoded, in the order read, all of them before it parks.
//     One goroutine (the loop) folds them, deciding where each record goes and what a bad one
//     does, and alone cuts epochs, between two whole batches, so the offsets recorded for
//     checkpoint c are exactly the records folded into c.
//   - At most one checkpoint is in flight; records after its barrier go to epoch c+1 meanwhile.
//   - Data becomes visible only with the offsets it covers, decided only before the fence's lease
//     deadline; how is the mode's (internal/commit). XA mode writes the ledger row only after every
//     participating branch prepared, and issues XA COMMIT only after that row is durable. Held
//     mode commits each subtask's rows with its own partitions' offsets in one local transaction,
//     under the session's owner epoch.
//   - Any failure aborts the session: its connections are discarded (and their server sessions
//     ended, should the network have kept them alive), recovery (the same code as at start-up)
//     settles what it left, and the consumer rewinds to the ledger's offsets. XA mode's recovery
//     rolls back what was not decided and commits what was; in held mode nothing is in doubt (the
//     server rolled back every open transaction with its connection), and the next session takes
//     a new owner epoch.
//   - The process leaves Run only for what no restart can cure: another live owner (ErrFenced),
//     bad input under policy fail, data Kafka no longer has, a checkpoint's data MySQL refused
//     (ErrDataRefused), a fatal error of the consumer group client, or failures past the bound.
//   - Every statement of the protocol runs under a deadline, so a connection the network
//     blackholed fails the session in bounded time instead of freezing it.
package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/membership"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
)

// State is the pipeline's lifecycle state.
type State int32

const (
	Starting   State = iota // connecting, taking the fence
	Recovering              // resolving in-doubt branches, seeking offsets
	Running                 // consuming and checkpointing
	Draining                // SIGTERM: final checkpoint
	Stopped                 // exited cleanly
	Failed                  // exited with an error
	Restarting              // a session failed: waiting out the back-off before the next one
)

func (s State) String() string {
	switch s {
	case Starting:
		return "starting"
	case Recovering:
		return "recovering"
	case Running:
		return "running"
	case Draining:
		return "draining"
	case Stopped:
		return "stopped"
	case Failed:
		return "failed"
	case Restarting:
		return "restarting"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ErrBadInput stops the pipeline under bad_input_policy=fail.
var ErrBadInput = fault.Fatal("bad input")

// ErrDataRefused ends the process when MySQL refused a checkpoint's rows for their values
// (fault.DataRefused) refusedAttempts times in a row: the same records give the same rows, so no
// restart can get past them, and each would only fail again with nobody told. relay validates
// every value it writes, so this is a relay bug (or a table changed behind relay's back): the
// error names the records not committed and the row refused, for the operator (docs/RUNBOOK.md).
var ErrDataRefused = errors.New("MySQL refused a checkpoint's data (a relay bug: see docs/RUNBOOK.md#mysql-refused-a-row)")

// refusedAttempts is how many sessions in a row may fail on refused data before the process ends:
// more than one, in case what refused it was passing (a trigger or a column being changed).
const refusedAttempts = 3

// Deps are the opened resources a pipeline runs on.
type Deps struct {
	Config config.Config
	// Plan is the configuration's pipeline spec, compiled (config.Config.Plan): what a record
	// holds and which aggregate tables it folds into.
	Plan *spec.Plan
	// Decoders read Plan's records in its input format (format.New): the first is the poll
	// goroutine's, and each other a helper goroutine's (decode.go, input.decoders); then the poll's
	// decodes only what a helper left at a record the registry could not judge. At least one.
	Decoders []format.Decoder
	Log      *zap.Logger
	Metrics  *metrics.Metrics
	Sink     *sql.DB
	Ledger   *ledger.Ledger
	// Fence says how to take the job's fence; the pipeline takes it before its first session and
	// again whenever its lock session is lost.
	Fence ledger.FenceConfig
	// Fenced runs each time the fence is taken, before a session (nil: nothing): relay run
	// records the spec's table meanings there, where no other process of this instance can
	// start or commit. Its error ends the attempt like the fence's own.
	Fenced func(ctx context.Context) error
	// NewConsumer opens a consumer for a session (tests may wrap it).
	NewConsumer func() (*consumer.Consumer, error)
	// Member is this process in the job's consumer group (membership group; nil for instances):
	// it says which partitions each session takes; a change of them moves partitions in and out of
	// the running session (group.go).
	Member *membership.Member
}

// Pipeline is one job's runtime.
type Pipeline struct {
	Deps
	state     atomic.Int32
	lastOK    atomic.Int64 // unix nanos of the last committed (or idle) checkpoint
	recovered atomic.Bool
	// sessionFirstID is the first checkpoint id of the live session; the resolver leaves ids at or
	// above it alone.
	sessionFirstID atomic.Int64
	fence          atomic.Pointer[ledger.Fence] // the fence held now (nil between two), for the resolver's epoch
	schema         sink.Schema
	registryPolicy fault.Policy    // the back-off while a record waits for the schema registry
	proto          commit.Protocol // XA or held, chosen once in New
	// reported holds the (reason, field) pairs of bad input already logged: the dead-letter row
	// carries only the reason (VARCHAR(32)), so the field a spec's reason is about is logged once.
	reported map[badField]bool
}

type badField struct {
	reason spec.Reason
	field  string
}

// New prepares a pipeline; Run starts it.
func New(d Deps) *Pipeline {
	c := d.Config
	p := &Pipeline{Deps: d, schema: d.Plan.Schema(c.MySQL.DLQTable, c.MySQL.DetailTable),
		registryPolicy: registryPolicy, proto: commit.New(c.Mode, d.commit()), reported: map[badField]bool{}}
	var reasons []string
	for _, r := range d.Plan.Reasons() {
		reasons = append(reasons, r.String())
	}
	metrics.Zero(d.Metrics.BadRecords, reasons)
	metrics.Zero(d.Metrics.Restarts, fault.Causes)
	metrics.Zero(d.Metrics.UpsertedRows, d.Plan.Tables())
	return p
}

// commit is what the commit protocol runs on.
func (d Deps) commit() commit.Deps {
	return commit.Deps{Ledger: d.Ledger, Sink: d.Sink, Log: d.Log, Metrics: d.Metrics}
}

// ResolveLoop runs the commit protocol's resolver (commit.Resolver.Loop) for this pipeline's
// sessions until ctx ends.
func (p *Pipeline) ResolveLoop(ctx context.Context) error {
	r := &commit.Resolver{Deps: p.commit(), Settings: p.Config.Commit(), Protocol: p.proto, Recovered: p.recovered.Load,
		FirstID: p.sessionFirstID.Load, Fence: p.fence.Load, Pools: p.Fence.Pools, Watch: p.Fence.EffectiveLease() / 2}
	return r.Loop(ctx)
}

// State is the current lifecycle state.
func (p *Pipeline) State() State { return State(p.state.Load()) }

func (p *Pipeline) setState(s State) {
	old := State(p.state.Swap(int32(s)))
	if old != s {
		p.Log.Info("state", zap.Stringer("from", old), zap.Stringer("to", s))
	}
}

// Ready reports whether recovery finished and a checkpoint succeeded recently.
func (p *Pipeline) Ready() (bool, string) {
	if !p.recovered.Load() {
		return false, "recovery has not finished"
	}
	if st := p.State(); st != Running {
		return false, "state is " + st.String()
	}
	age := time.Since(time.Unix(0, p.lastOK.Load()))
	if age > p.Config.Checkpoint.ReadyMaxAge {
		return false, fmt.Sprintf("last successful checkpoint %s ago (limit %s)", age.Round(time.Millisecond), p.Config.Checkpoint.ReadyMaxAge)
	}
	return true, "ok"
}

// Run takes the fence, recovers and consumes until ctx ends (then drains and returns nil) or a
// fatal error. A failed session (a checkpoint, a lost connection, a server restart, the fence's
// lock session lost) is torn down and started again in-process through recovery, after a jittered
// back-off, up to the tolerable number of failures in a row without a committed checkpoint, and
// up to refusedAttempts when MySQL refuses the data.
func (p *Pipeline) Run(ctx context.Context) error {
	var fence *ledger.Fence
	defer func() {
		if fence != nil {
			fence.Release()
		}
	}()
	// The member joins the group once the fence is first taken (Member.Run subscribes: a process
	// that is refused, or cannot reach MySQL, never takes partitions from the others), serves it
	// while sessions run, and leaves it only after the last one ended (drained): its partitions go
	// to the others once nothing more of them is decided here. A member that never joined is
	// closed too. A fatal error of the group client ends the pipeline.
	// Run stops serving the group as soon as the pipeline is told to stop (ctx), while the last
	// session drains: no grant or revoke is taken in meanwhile (librdkafka heartbeats on its own
	// thread), Close hands every partition back once the drain decided them, and it need not wait
	// out the poll Run was in (half a heartbeat: measured, 0.1 s of a leave's 0.5-1 s).
	var member struct {
		done chan error
		stop context.CancelFunc
		err  atomic.Pointer[error]
	}
	ctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	defer func() {
		if p.Member == nil {
			return
		}
		if member.done != nil {
			p.Member.Leaving()
			member.stop()
			<-member.done
		}
		p.Member.Close()
	}()
	joinGroup := func() {
		if p.Member == nil || member.done != nil {
			return
		}
		mctx, stop := context.WithCancel(ctx)
		member.done, member.stop = make(chan error, 1), stop
		go func() {
			err := p.Member.Run(mctx)
			if err != nil {
				member.err.Store(&err)
				cancelRun()
			}
			member.done <- err
		}()
	}
	memberFailed := func(err error) error {
		if e := member.err.Load(); e != nil {
			p.setState(Failed)
			return fmt.Errorf("consumer group: %w", *e)
		}
		return err
	}
	failures := 0
	streak := 0            // restarts in a row, cluster events included: what the back-off grows with
	refused := 0           // sessions in a row whose data MySQL refused
	ran := false           // a session committed a checkpoint
	var lost *ledger.Fence // the fence released last, until a new one is held
	for {
		committed := false
		// A lost fence refuses every new connection of the pools (no session may go unrecorded):
		// it goes first, before anything below dials.
		if old := p.releaseLost(&fence); old != nil {
			lost = old
		}
		err := p.clusterReady(ctx)
		if err == nil {
			err = p.ensureFence(ctx, &fence, lost)
		}
		if fence != nil {
			lost = nil
		}
		if err == nil {
			joinGroup()
			var s *session
			if s, err = p.newSession(ctx, fence); err == nil {
				err = s.run(ctx)
				if committed = s.committedAny.Load(); committed {
					failures, streak, refused = 0, 0, 0
				}
			}
			if p.Member != nil {
				// No session reads now: what the group revoked meanwhile is handed back at once.
				p.Member.Reading(false)
				p.settleChanges()
			}
		}
		if err == nil || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
			// Stopped, after the drain or before a session started: the ledger is consistent.
			p.setState(Stopped)
			return memberFailed(nil)
		}
		ran = ran || committed
		if reassigned(err) {
			// The session ended (drained, or aborted on a lost assignment): the group may hand its
			// partitions on, and the next session starts on the new assignment at once.
			continue
		}
		p.countFenced(err)
		if ctx.Err() != nil || fatal(err, ran) {
			p.setState(Failed)
			return memberFailed(err)
		}
		// A Galera node outside the primary component is waited for, however long it takes, and a
		// certification conflict at COMMIT is retried: neither is relay failing.
		// Nor is a member finding a partition taken by another: the group moved it (the next session
		// leaves it out), however often that happens.
		if streak++; !fault.ClusterEvent(err) && !errors.Is(err, ledger.ErrPartitionTaken) {
			failures++
		}
		cause := fault.Cause(err)
		p.Metrics.Restarts.WithLabelValues(cause).Inc()
		var ce *commit.CheckpointError
		if errors.As(err, &ce) {
			p.Metrics.Checkpoints.WithLabelValues("failed").Inc()
		}
		if fault.DataRefused(err) {
			if refused++; refused >= refusedAttempts || failures > p.Config.Checkpoint.TolerableFailures {
				p.setState(Failed)
				p.settle(ctx, fence)
				return fmt.Errorf("%w, %d times in a row: %w", ErrDataRefused, refused, err)
			}
		}
		if failures > p.Config.Checkpoint.TolerableFailures {
			p.setState(Failed)
			return fmt.Errorf("%d consecutive failures without a committed checkpoint, last: %w", failures, err)
		}
		p.setState(Restarting)
		wait := restartPolicy.Backoff(streak)
		p.Log.Warn("session failed; restarting in-process through recovery", zap.String("cause", cause),
			zap.Int("consecutive_failures", failures), zap.Duration("backoff", wait), zap.Error(err))
		if restartPolicy.Sleep(ctx, wait) != nil {
			// Stopped while waiting to restart: the ledger holds a consistent state to resume from.
			p.setState(Stopped)
			return memberFailed(nil)
		}
	}
}

// countFenced counts (and reports) a checkpoint whose decision was refused because this process no longer held
// what it decided: a partition another member took (its owner epoch moved; the next session
// leaves it out), or its fence's lease. Nothing of such a checkpoint is committed.
func (p *Pipeline) countFenced(err error) bool {
	var ce *commit.CheckpointError
	fenced := errors.Is(err, ledger.ErrPartitionTaken) ||
		errors.As(err, &ce) && (errors.Is(err, commit.ErrFenceLost) || errors.Is(err, ledger.ErrFenced))
	if fenced {
		p.Metrics.FencedDecisions.Inc()
	}
	return fenced
}

// settle resolves what the failed session left in doubt, as the next session's recovery would: the
// subtasks whose rows MySQL took prepared their branches, which would hold their row locks until
// the next start, against the operator repairing the table. Failing to settle is only logged: the
// next start's recovery finishes it.
func (p *Pipeline) settle(ctx context.Context, fence *ledger.Fence) {
	rctx, cancel := context.WithTimeout(ctx, p.Config.Checkpoint.RestartAllowance)
	defer cancel()
	err := p.endZombies(rctx)
	if err == nil {
		_, _, err = p.proto.Recover(rctx, fence)
	}
	if err != nil {
		p.Log.Warn("resolving the failed checkpoint's branches before the exit failed; the next start's recovery will", zap.Error(err))
	}
}

// restartPolicy spaces in-process restarts; the number of them is Checkpoint.TolerableFailures.
var restartPolicy = fault.Policy{Initial: 200 * time.Millisecond, Max: 10 * time.Second, Sleep: fault.SleepContext}

// fatal reports whether err ends the process: a Fatal sentinel always; a Permanent condition
// (a topic missing, a resume offset outside the topic) at start, before any session committed.
// Once the job ran, such a condition may be a broker that just restarted answering too early, so
// it is restarted like any failure, within the same bound. This is the restart policy over
// fault's classes, not a class of its own: what is Fatal or Permanent is fault's to say.
func fatal(err error, ran bool) bool {
	return fault.IsFatal(err) || (fault.IsPermanent(err) && !ran)
}

// clusterReady (Galera only) holds a session back while the node is outside the primary
// component: it refuses relay's queries (1047), and its causal reads fail as lock wait timeouts
// (1205), which would count as failures; fault.ErrNotPrimary is waited out instead.
func (p *Pipeline) clusterReady(ctx context.Context) error {
	if !p.Fence.Cluster {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return database.CheckPrimary(cctx, p.Ledger.DB())
}

// releaseLost releases *f when its lock session was lost or its lease was not renewed in time,
// and returns it (nil when *f is live, or nil).
func (p *Pipeline) releaseLost(f **ledger.Fence) *ledger.Fence {
	prev := *f
	if prev == nil {
		return nil
	}
	select {
	case <-prev.Lost():
	default:
		if time.Now().Before(prev.Deadline()) {
			return nil
		}
		// Not renewed in time (the process froze, or renewals hang): the job may be another's
		// by now; take the fence again rather than recover under a lease that may be gone.
	}
	p.fence.Store(nil)
	prev.Release()
	*f = nil
	return prev
}

// ensureFence leaves *f a live fence: the one held, or a new one (prev: the fence this process
// held before, released by releaseLost).
func (p *Pipeline) ensureFence(ctx context.Context, f **ledger.Fence, prev *ledger.Fence) error {
	if *f != nil {
		return nil
	}
	p.setState(Starting)
	cfg := p.Fence
	cfg.Prev = prev
	// The lock session just dropped (or an older one of this process) may be alive on the
	// server: ending it first frees the lock at once.
	if err := p.endZombies(ctx); err != nil {
		return err
	}
	// Bounded: waiting out a vanished owner's lease, then ending its sessions.
	actx, cancel := context.WithTimeout(ctx, cfg.EffectiveLease()+time.Minute)
	defer cancel()
	fence, err := ledger.Acquire(actx, p.Ledger, cfg)
	if err != nil {
		return err
	}
	log := p.Log.Named("fence")
	if t := fence.TookOver; t != nil {
		from := "expired_lease"
		if t.Own {
			from = "own"
		}
		p.Metrics.FenceTakeovers.WithLabelValues(from).Inc()
		log.Warn("took the job over", zap.String("from", from), zap.String("previous_owner", t.Owner),
			zap.Int64("previous_epoch", t.Epoch), zap.Duration("lease_expired_for", t.ExpiredFor),
			zap.Duration("waited", t.WaitedLease), zap.Int64s("sessions_ended", t.Killed))
	}
	log.Info("job fenced", zap.Int64("owner_epoch", fence.Epoch()))
	if p.Fenced != nil {
		if err := p.Fenced(ctx); err != nil {
			fence.Release()
			return err
		}
	}
	*f = fence
	p.fence.Store(fence)
	return nil
}

// endZombies ends the server sessions of connections this process dropped: when the network cut
// them off the server keeps them, and with them the locks and attached branches that recovery
// must resolve.
func (p *Pipeline) endZombies(ctx context.Context) error {
	for _, pool := range p.Fence.Pools {
		killed, err := pool.Sessions.KillZombies(ctx, pool.DB)
		if err != nil {
			return fmt.Errorf("end dropped sessions: %w", err)
		}
		if len(killed) > 0 {
			p.Log.Named("recovery").Warn("ended server sessions of dropped connections", zap.String("pool", pool.Name), zap.Int64s("sessions", killed))
		}
	}
	return nil
}
