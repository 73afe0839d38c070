// Subtask: one sink writer, its connection and its transaction per epoch (the protocol's: an XA
// branch, or in held mode a local transaction).
//
// Invariants: a subtask opens its transaction lazily, on the first write of an epoch, so an epoch
// with nothing to write leaves no branch; writes, the barrier and the decision for one epoch
// arrive in order on one goroutine; while a branch is prepared the subtask takes nothing but the
// decision (MariaDB cannot start another transaction on a connection holding a prepared one, and
// must commit it on that same connection). At the barrier the transaction votes through the
// Participant interface (participant.go), the only view the subtask has of it: an XA branch
// prepares (xa.go), a held transaction commits with its offsets (held.go).
//
// Row writing is write.go.

package commit

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
)

// Work is what the loop hands one subtask in one epoch: rows to write and, at the barrier, the
// offsets to commit with them and where the vote goes.
type Work struct {
	Epoch   int64
	Table   *spec.Tables
	DLQ     []sink.DLQRow
	Details []sink.DetailRow
	Offsets partition.Offsets // at the barrier: what the subtask commits with its rows (Protocol.BarrierOffsets)
	Barrier chan<- Reply      // non-nil at the barrier: where the subtask's vote goes
}

// Reply is a subtask's answer to the barrier.
type Reply struct {
	subtask int
	tag     string // empty when the subtask had nothing to write in the epoch
	err     error
	flush   time.Duration
	prep    time.Duration
}

// decision commits the prepared branch on its own connection. (An undecided branch is never
// rolled back here: the session fails, drops the connection and recovery rolls it back.)
type decision struct {
	done     chan<- error
	deadline time.Time // the statement's; zero: none
}

// Env is what every subtask of a session shares.
type Env struct {
	Deps
	Settings
	Proto  Protocol
	Plan   *spec.Plan  // the compiled spec: the aggregate tables and their upserts
	Schema sink.Schema // the dead-letter and detail tables
}

// Subtask is one sink writer.
type Subtask struct {
	env    *Env
	idx    int           // index within this process
	global int           // index across every instance of the job: names the tag
	fence  *ledger.Fence // the session's: a barrier that decides (held mode's COMMIT) does so under it
	// owner is the owner epoch the session took (held mode: Fence.NewSession): a held COMMIT is
	// checked against it, never against the fence's current epoch, which a later session moves on.
	owner int64
	data  chan Work
	ctrl  chan decision
	txn   Participant
	buf   []byte
	log   *zap.Logger
}

// NewSubtask is subtask idx of this process, global across the job's instances, writing under fence.
func NewSubtask(env *Env, idx, global int, fence *ledger.Fence) *Subtask {
	return &Subtask{env: env, idx: idx, global: global, fence: fence, owner: fence.Epoch(), data: make(chan Work, 4), ctrl: make(chan decision, 1),
		log: env.Log.Named("subtask").With(zap.Int("subtask", global))}
}

// Data is where the subtask takes its batches, in order.
func (s *Subtask) Data() chan<- Work { return s.data }

// commit is the coordinator's order, once the checkpoint is decided, to commit the prepared branch.
func (s *Subtask) commit(deadline time.Time, done chan<- error) {
	s.ctrl <- decision{done: done, deadline: deadline}
}

// Run serves batches until ctx ends or a write fails. On return the connection is released, and
// discarded if it holds a transaction: the server then rolls back an active branch and keeps a
// prepared one for recovery.
func (s *Subtask) Run(ctx context.Context) error {
	defer func() {
		if s.txn != nil {
			if st := s.txn.State(); st != Idle {
				s.log.Info("releasing connection with open branch", zap.String("tag", s.txn.Tag()), zap.Stringer("state", st))
			}
			s.txn.Close()
		}
	}()
	for {
		var b Work
		select {
		case <-ctx.Done():
			return nil
		case b = <-s.data:
		}
		start := time.Now()
		err := s.write(ctx, b)
		if b.Barrier == nil {
			if err != nil {
				return err
			}
			continue
		}
		r := Reply{subtask: s.idx, flush: time.Since(start)}
		waits := false
		if err == nil {
			waits, err = s.barrier(ctx, b, &r)
		}
		r.err = err
		b.Barrier <- r
		if err != nil {
			return err
		}
		if !waits {
			continue
		}
		var d decision
		select {
		case <-ctx.Done():
			return nil
		case d = <-s.ctrl:
		}
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if !d.deadline.IsZero() {
			dctx, cancel = context.WithDeadline(ctx, d.deadline)
		}
		err = s.commitVote(dctx, b.Epoch)
		cancel()
		d.done <- err
		if err != nil {
			return err
		}
	}
}

// barrier ends s's part of epoch b.Epoch once its rows are written, by the participant's vote,
// filling r's tag (empty: nothing to commit) and vote time. It reports whether s now holds a
// prepared branch that waits for the coordinator's commit.
func (s *Subtask) barrier(ctx context.Context, b Work, r *Reply) (bool, error) {
	if len(b.Offsets) == 0 && (s.txn == nil || s.txn.State() != Active) {
		return false, nil // nothing written, no offsets of its own to commit
	}
	if len(b.Offsets) > 0 {
		// Opens the transaction for offsets alone, and refuses one still open under another epoch.
		if err := s.begin(ctx, b.Epoch); err != nil {
			return false, err
		}
	}
	crashpoint.Hit(crashpoint.AfterFlush)
	t := time.Now()
	waits, err := s.txn.Vote(ctx, Ballot{Epoch: b.Epoch, Subtask: s.global, Offsets: b.Offsets, Owner: s.owner, Fence: s.fence})
	r.prep = time.Since(t)
	if err != nil {
		return false, err
	}
	r.tag = s.txn.Tag()
	if waits {
		s.env.Metrics.PendingTransactions.Inc()
		s.env.Metrics.Transactions.WithLabelValues("prepare", metrics.OriginNormal).Inc()
		s.log.Debug("prepared", zap.String("tag", r.tag), zap.Int64("checkpoint", b.Epoch))
	} else {
		s.env.Metrics.Transactions.WithLabelValues("commit", metrics.OriginNormal).Inc()
		s.log.Debug("committed", zap.String("tag", r.tag), zap.Int64("checkpoint", b.Epoch))
	}
	return waits, nil
}

// commitVote applies the decision to the transaction that voted for epoch (XA: commits its
// prepared branch).
func (s *Subtask) commitVote(ctx context.Context, epoch int64) error {
	tag := s.txn.Tag()
	if err := s.txn.Commit(ctx); err != nil {
		s.log.Warn("branch resolution failed; recovery will finish it", zap.String("tag", tag),
			zap.Int64("checkpoint", epoch), zap.String("action", "commit"), zap.Error(err))
		return err
	}
	s.env.Metrics.PendingTransactions.Dec()
	s.env.Metrics.Transactions.WithLabelValues("commit", metrics.OriginNormal).Inc()
	s.log.Debug("commit", zap.String("tag", tag), zap.Int64("checkpoint", epoch))
	return nil
}

func (s *Subtask) begin(ctx context.Context, epoch int64) error {
	tag := Tag(s.env.Job, epoch, s.global)
	if s.txn != nil && s.txn.State() == Active {
		if s.txn.Tag() == tag {
			return nil
		}
		return fmt.Errorf("subtask %d: branch %s still active at epoch %d", s.global, s.txn.Tag(), epoch)
	}
	if s.txn == nil || s.txn.State() == Broken {
		b, err := s.env.Proto.newParticipant(ctx, s.env.Sink)
		if err != nil {
			return fmt.Errorf("subtask %d: connect: %w", s.global, err)
		}
		s.txn = b
		s.log.Info("sink connection opened", zap.Int64("connection", b.ConnID()))
	}
	if err := s.txn.Begin(ctx, tag); err != nil {
		return err
	}
	s.log.Debug("begin", zap.String("tag", tag), zap.Int64("checkpoint", epoch))
	return nil
}
