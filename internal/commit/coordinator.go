// Checkpoint coordinator: collect the barrier replies of one checkpoint and, in XA mode, decide
// and commit it (twoPhase); in held mode the replies are the subtasks' own commits (onePhase).
//
// Invariants: XA mode writes the decision only after every subtask answered the barrier without
// error, and only before the fence's lease deadline; a subtask is told to commit only after the
// decision is durable; past the decision a failure fails the checkpoint but never undoes it
// (recovery finishes the commit from XA RECOVER and the ledger, never by retrying a COMMIT whose
// reply was lost); the decision is marked COMMITTED only after every branch's commit answered, so
// a reader's snapshot without a COMMITTING row is a checkpoint boundary (docs/PIPELINES.md, "What a
// reader sees"). Held mode has no decision of the coordinator's to write: each subtask's vote
// committed its rows with its partitions' offsets (held.go), so onePhase only collects the
// replies, and the checkpoint counts as committed (Pending.Committed) only once every subtask
// answered without error; a subtask that failed fails the checkpoint, and its partitions resume
// from their last committed offsets. Every phase runs under a deadline. The coordinator knows the
// subtasks only as voters (it never touches a Participant: each subtask's goroutine alone uses its
// connection) and the ledger only as a decider, so it is tested without Kafka or MySQL.

package commit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
)

// Pending is a checkpoint past its barrier.
type Pending struct {
	ID      int64
	Records int64 // records folded into the checkpoint
	Offsets partition.Offsets
	Replies chan Reply // one per subtask, sent once its part of the epoch is prepared
	// Committed records the checkpoint once its data is durable (the session's bookkeeping).
	Committed func(tags []string, log *zap.Logger)
}

// voter is a subtask as the coordinator sees it: its barrier reply arrives on the checkpoint's
// replies, naming it by index; once the decision is durable it is told to commit, and applies it
// to its Participant on the subtask's own goroutine, the only one that uses its connection.
type voter interface {
	// commit orders the prepared branch committed on its own connection within deadline (zero:
	// none); the outcome is sent to done.
	commit(deadline time.Time, done chan<- error)
}

// decider is the ledger as the owner of a fence.
type decider interface {
	// Deadline is when the fence's lease runs out unless renewed.
	Deadline() time.Time
	// Decide writes the checkpoint's decision row, conditional on still owning the job
	// (ledger.ErrFenced otherwise). Its COMMIT is the checkpoint's commit point.
	Decide(ctx context.Context, c ledger.Checkpoint) error
	MarkCommitted(ctx context.Context, id int64) error
	// Prune deletes committed rows well below newest.
	Prune(ctx context.Context, newest int64) error
}

// fencedLedger decides as the owner epoch of fence.
type fencedLedger struct {
	led   *ledger.Ledger
	fence *ledger.Fence
}

func (f fencedLedger) Deadline() time.Time { return f.fence.Deadline() }
func (f fencedLedger) Decide(ctx context.Context, c ledger.Checkpoint) error {
	return f.led.Decide(ctx, f.fence.Epoch(), f.fence.Claims(), c)
}
func (f fencedLedger) MarkCommitted(ctx context.Context, id int64) error {
	return f.led.MarkCommitted(ctx, id)
}
func (f fencedLedger) Prune(ctx context.Context, newest int64) error {
	return f.led.Prune(ctx, newest, 1000)
}

// Coordinator completes the checkpoints of one session.
type Coordinator struct {
	parts   []voter // indexed by Reply.subtask
	decider decider
	timeout time.Duration // of the barrier phase (with the decision), and of the commit phase
	// stagger commits the first branch alone and the rest together, so that a death in between
	// leaves the state the between-commits crash point tests (some committed, some prepared, the
	// decision durable). Only crash-point builds set it: production commits every branch at once.
	stagger bool
	m       *metrics.Metrics
	log     *zap.Logger
}

// NewCoordinator completes the checkpoints of subs, deciding in led as the owner of fence, each
// phase within timeout.
func NewCoordinator(subs []*Subtask, led *ledger.Ledger, fence *ledger.Fence, timeout time.Duration, m *metrics.Metrics, log *zap.Logger) *Coordinator {
	parts := make([]voter, len(subs))
	for i, s := range subs {
		parts[i] = s
	}
	return &Coordinator{parts: parts, decider: fencedLedger{led, fence}, timeout: timeout, stagger: crashpoint.Enabled, m: m, log: log}
}

// votes are a checkpoint's barrier replies.
type votes struct {
	tags    []string // of the subtasks that wrote, in reply order
	wrote   []voter  // those subtasks
	maxPrep time.Duration
}

// collect waits for every subtask's barrier reply, until ctx ends.
func (c *Coordinator) collect(ctx context.Context, cp *Pending) (votes, error) {
	var v votes
	var flushMax time.Duration
	for range c.parts {
		select {
		case r := <-cp.Replies:
			if r.err != nil {
				return v, &CheckpointError{fmt.Errorf("checkpoint %d: prepare: %w", cp.ID, r.err)}
			}
			flushMax, v.maxPrep = max(flushMax, r.flush), max(v.maxPrep, r.prep)
			if r.tag != "" {
				v.tags = append(v.tags, r.tag)
				v.wrote = append(v.wrote, c.parts[r.subtask])
			}
		case <-ctx.Done():
			return v, &CheckpointError{fmt.Errorf("checkpoint %d: prepare: %w", cp.ID, context.Cause(ctx))}
		}
	}
	c.m.PhaseDuration.WithLabelValues("flush").Observe(flushMax.Seconds())
	return v, nil
}

// onePhase completes a checkpoint whose barrier replies were the subtasks' own commits.
func (c *Coordinator) onePhase(ctx context.Context, cp *Pending) error {
	tctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	v, err := c.collect(tctx, cp)
	if err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	cp.Committed(v.tags, c.log.With(zap.Int64("checkpoint", cp.ID)))
	return nil
}

// twoPhase runs prepare → decide → commit. Every error but ledger.ErrFenced (which ends the
// process, and is returned as it is) is a CheckpointError.
func (c *Coordinator) twoPhase(ctx context.Context, cp *Pending) error {
	log := c.log.With(zap.Int64("checkpoint", cp.ID))
	tctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	v, err := c.collect(tctx, cp)
	if err != nil {
		return err
	}
	c.m.PhaseDuration.WithLabelValues("prepare").Observe(v.maxPrep.Seconds())
	crashpoint.Hit(crashpoint.AfterPrepare)

	t := time.Now()
	// Decide only while the lease surely holds: past the deadline another process may be taking
	// the job over (its epoch bump would fail this write anyway; this keeps the old owner quiet).
	deadline := c.decider.Deadline()
	if !t.Before(deadline) {
		return &CheckpointError{fmt.Errorf("checkpoint %d: decide: %w: lease not renewed since %s", cp.ID, ErrFenceLost, deadline.Format(time.RFC3339Nano))}
	}
	dctx, dcancel := context.WithDeadline(tctx, deadline)
	err = c.decider.Decide(dctx, ledger.Checkpoint{ID: cp.ID, Tags: v.tags, Offsets: cp.Offsets, Records: cp.Records})
	dcancel()
	if errors.Is(err, ledger.ErrFenced) {
		return err
	}
	if err != nil {
		// The decision may or may not have committed: recovery reads the verdict and acts on it.
		return &CheckpointError{err}
	}
	c.m.PhaseDuration.WithLabelValues("decide").Observe(time.Since(t).Seconds())
	log.Debug("decided", zap.Strings("tags", v.tags), zap.Int64("records", cp.Records))
	crashpoint.Hit(crashpoint.AfterDecide)

	// From here the checkpoint is committed; failures only delay it. The commit phase gets a
	// deadline of its own so that a blackholed connection cannot hold it.
	cctx, ccancel := context.WithTimeout(ctx, c.timeout)
	defer ccancel()
	t = time.Now()
	groups := [][]voter{v.wrote}
	if c.stagger && len(v.wrote) > 1 {
		groups = [][]voter{v.wrote[:1], v.wrote[1:]}
	}
	for i, g := range groups {
		if err := commitAll(cctx, g); err != nil {
			return &CheckpointError{fmt.Errorf("checkpoint %d: commit: %w", cp.ID, err)}
		}
		if i < len(groups)-1 {
			crashpoint.Hit(crashpoint.BetweenCommits)
		}
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	if err := c.decider.MarkCommitted(cctx, cp.ID); err != nil {
		return &CheckpointError{err}
	}
	c.m.PhaseDuration.WithLabelValues("commit").Observe(time.Since(t).Seconds())
	cp.Committed(v.tags, log)
	if cp.ID%100 == 0 {
		if err := c.decider.Prune(cctx, cp.ID); err != nil {
			log.Warn("ledger prune failed", zap.Error(err))
		}
	}
	return nil
}

// commitAll commits the prepared branches of parts in parallel, each on its own connection,
// within ctx's deadline.
func commitAll(ctx context.Context, parts []voter) error {
	done := make(chan error, len(parts))
	deadline, _ := ctx.Deadline()
	for _, p := range parts {
		p.commit(deadline, done)
	}
	for range parts {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// CheckpointError marks the failure of a checkpoint (counted as relay_checkpoints_total{result=
// "failed"}), as opposed to one of recovery or of the fence; both restart the session alike. It is
// a marker for that metric only and carries no class: fault.Cause, fault.IsFatal and
// fault.IsPermanent see through it (Unwrap), so internal/fault stays the one classifier.
type CheckpointError struct{ Err error }

func (e *CheckpointError) Error() string { return e.Err.Error() }
func (e *CheckpointError) Unwrap() error { return e.Err }

// ErrFenceLost: the lease could not be renewed (the lock session died or hung). It is the
// ledger's own, so that a connection the lost fence refused (ledger.ErrFenceLost) fails its
// checkpoint as a lost fence, as the deadline checks here do.
var ErrFenceLost = ledger.ErrFenceLost
