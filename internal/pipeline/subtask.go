// Subtask: one sink writer, its connection and its transaction per epoch (the protocol's: an XA
// branch, or in held mode a local transaction).
//
// Invariants: a subtask opens its transaction lazily, on the first write of an epoch, so an epoch
// with nothing to write leaves no branch; writes, the barrier and the decision for one epoch
// arrive in order on one goroutine; while a branch is prepared the subtask takes nothing but the
// decision (MariaDB cannot start another transaction on a connection holding a prepared one, and
// must commit it on that same connection). What the barrier does is the protocol's (xa.go,
// held.go).
//
// Subtasks write disjoint rows (routing by key), and their sessions run at READ COMMITTED, so a
// page split never turns one subtask's row lock into a gap lock that blocks a peer's insert until
// the checkpoint ends (it did under REPEATABLE READ; see docs/PROTOCOL.md). A statement that still
// waits for a lock (another writer, a prepared branch nobody resolved) has its blockers logged,
// and fails at mysql.lock_wait_timeout like any other error.
package pipeline

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/xa"
)

// batch is work for one subtask in one epoch: rows to write and, at the barrier, the order to prepare.
type batch struct {
	epoch   int64
	table   *spec.Tables
	dlq     []sink.DLQRow
	details []sink.DetailRow
	offsets ledger.Offsets  // at the barrier: what the subtask commits with its rows (protocol.barrierOffsets)
	prepare chan<- prepared // non-nil at the barrier
}

// prepared is a subtask's answer to the barrier.
type prepared struct {
	subtask int
	tag     string // empty when the subtask had nothing to write in the epoch
	err     error
	flush   time.Duration
	prep    time.Duration
}

// txn is a subtask's transaction of one epoch: *xa.Branch, or *heldTxn in held mode. How it ends
// at the barrier is the protocol's (an XA branch prepares, a held transaction commits with its
// offsets): each protocol's barrier reaches its own type.
type txn interface {
	Tag() string
	State() xa.State
	ConnID() int64
	Start(ctx context.Context, tag string) error
	Exec(ctx context.Context, q string, args ...any) error
	Commit(ctx context.Context) error
	Close()
}

// decision commits the prepared branch on its own connection. (An undecided branch is never
// rolled back here: the session fails, drops the connection and recovery rolls it back.)
type decision struct {
	done     chan<- error
	deadline time.Time // the statement's; zero: none
}

type subtask struct {
	p      *Pipeline     // the job's configuration, sink pool, schema, plan, protocol and metrics
	idx    int           // index within this process
	global int           // index across every instance of the job: names the tag
	fence  *ledger.Fence // the session's: a barrier that decides (held mode's COMMIT) does so under it
	data   chan batch
	ctrl   chan decision
	branch txn
	buf    []byte
	log    *zap.Logger
}

func newSubtask(p *Pipeline, idx, global int, fence *ledger.Fence) *subtask {
	return &subtask{p: p, idx: idx, global: global, fence: fence, data: make(chan batch, 4), ctrl: make(chan decision, 1),
		log: p.Log.Named("subtask").With(zap.Int("subtask", global))}
}

// commit is the coordinator's order, once the checkpoint is decided, to commit the prepared branch.
func (s *subtask) commit(deadline time.Time, done chan<- error) {
	s.ctrl <- decision{done: done, deadline: deadline}
}

// run serves batches until ctx ends or a write fails. On return the connection is released, and
// discarded if it holds a transaction: the server then rolls back an active branch and keeps a
// prepared one for recovery.
func (s *subtask) run(ctx context.Context) error {
	defer func() {
		if s.branch != nil {
			if st := s.branch.State(); st != xa.Idle {
				s.log.Info("releasing connection with open branch", zap.String("tag", s.branch.Tag()), zap.Stringer("state", st))
			}
			s.branch.Close()
		}
	}()
	for {
		var b batch
		select {
		case <-ctx.Done():
			return nil
		case b = <-s.data:
		}
		start := time.Now()
		err := s.write(ctx, b)
		if b.prepare == nil {
			if err != nil {
				return err
			}
			continue
		}
		r := prepared{subtask: s.idx, flush: time.Since(start)}
		waits := false
		if err == nil {
			waits, err = s.p.proto.barrier(ctx, s, b, &r)
		}
		r.err = err
		b.prepare <- r
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
		err = s.commitBranch(dctx, b.epoch)
		cancel()
		d.done <- err
		if err != nil {
			return err
		}
	}
}

// commitBranch commits the prepared branch of epoch, as the decision says.
func (s *subtask) commitBranch(ctx context.Context, epoch int64) error {
	tag := s.branch.Tag()
	if err := s.branch.Commit(ctx); err != nil {
		s.log.Warn("branch resolution failed; recovery will finish it", zap.String("tag", tag),
			zap.Int64("checkpoint", epoch), zap.String("action", "commit"), zap.Error(err))
		return err
	}
	s.p.Metrics.PendingTransactions.Dec()
	s.p.Metrics.Transactions.WithLabelValues("commit", metrics.OriginNormal).Inc()
	s.log.Debug("commit", zap.String("tag", tag), zap.Int64("checkpoint", epoch))
	return nil
}

// write flushes one batch into the epoch's transaction, opening it on first use.
func (s *subtask) write(ctx context.Context, b batch) error {
	hasRows := b.table != nil && b.table.Keys() > 0
	if !hasRows && len(b.dlq) == 0 && len(b.details) == 0 {
		return nil
	}
	if err := s.begin(ctx, b.epoch); err != nil {
		return err
	}
	n := s.p.Config.MySQL.BatchRows // rows per statement
	// Aggregates in spec order, each one's rows in primary-key order: every transaction takes its
	// row locks in the same order, table by table.
	for a := range s.p.Plan.Tables() {
		if !hasRows {
			break
		}
		rows := b.table.Drain(a)
		for i := 0; i < len(rows); i += n {
			j := min(i+n, len(rows))
			s.buf = s.p.Plan.AppendUpsert(s.buf[:0], a, rows[i:j])
			if err := s.exec(ctx); err != nil {
				return fmt.Errorf("subtask %d: %s: %w", s.global, s.p.Plan.Tables()[a], err)
			}
		}
	}
	for i := 0; i < len(b.details); i += n {
		j := min(i+n, len(b.details))
		s.buf = s.p.schema.AppendDetailInsert(s.buf[:0], b.details[i:j])
		if err := s.exec(ctx); err != nil {
			return fmt.Errorf("subtask %d: detail rows: %w", s.global, err)
		}
	}
	for i := 0; i < len(b.dlq); i += n {
		j := min(i+n, len(b.dlq))
		s.buf = s.p.schema.AppendDLQInsert(s.buf[:0], s.p.Config.Job.Name, b.epoch, b.dlq[i:j])
		if err := s.exec(ctx); err != nil {
			return fmt.Errorf("subtask %d: dead-letter rows: %w", s.global, err)
		}
	}
	return nil
}

// exec runs the statement in s.buf inside the epoch's transaction. One still running after a fifth
// of the lock wait timeout has the lock it waits for explained in the log, while the wait lasts
// (afterwards the server no longer says who held it).
func (s *subtask) exec(ctx context.Context) error {
	tag, conn := s.branch.Tag(), s.branch.ConnID()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	t := time.AfterFunc(s.p.Config.MySQL.LockWait/5, func() {
		defer close(done)
		s.reportLocks(wctx, tag, conn)
	})
	err := s.branch.Exec(ctx, string(s.buf))
	stop()
	if !t.Stop() {
		<-done
	}
	return err
}

// reportLocks logs who holds the locks the statement on connection conn waits for, once, while the
// wait lasts. A blocker without a session is a prepared branch nobody resolved yet: its locks stay
// until recovery or the resolver (or an operator, for another job's branch) finishes it.
func (s *subtask) reportLocks(ctx context.Context, tag string, conn int64) {
	bs, err := database.Blockers(ctx, s.p.Sink, conn)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("statement slow; cannot read its lock waits", zap.String("tag", tag), zap.Int64("connection", conn), zap.Error(err))
		}
		return
	}
	for _, b := range bs {
		s.log.Warn("waiting for a row lock", zap.String("tag", tag), zap.Int64("connection", conn),
			zap.String("blocker_trx", b.TrxID), zap.Int64("blocker_connection", b.Thread),
			zap.Bool("blocker_detached", b.Thread == 0), zap.String("blocker_state", b.State),
			zap.Time("blocker_started", b.Started), zap.Int64("blocker_rows_locked", b.RowsLocked),
			zap.String("blocker_query", b.Query))
	}
}

func (s *subtask) begin(ctx context.Context, epoch int64) error {
	tag := config.Tag(s.p.Config.Job.Name, epoch, s.global)
	if s.branch != nil && s.branch.State() == xa.Active {
		if s.branch.Tag() == tag {
			return nil
		}
		return fmt.Errorf("subtask %d: branch %s still active at epoch %d", s.global, s.branch.Tag(), epoch)
	}
	if s.branch == nil || s.branch.State() == xa.Broken {
		b, err := s.p.proto.newTxn(ctx, s.p.Sink)
		if err != nil {
			return fmt.Errorf("subtask %d: connect: %w", s.global, err)
		}
		s.branch = b
		s.log.Info("sink connection opened", zap.Int64("connection", b.ConnID()))
	}
	if err := s.branch.Start(ctx, tag); err != nil {
		return err
	}
	s.log.Debug("begin", zap.String("tag", tag), zap.Int64("checkpoint", epoch))
	return nil
}
