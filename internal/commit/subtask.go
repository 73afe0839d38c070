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
// Subtasks write disjoint rows (routing by key), and their sessions run at READ COMMITTED, so a
// page split never turns one subtask's row lock into a gap lock that blocks a peer's insert until
// the checkpoint ends (it did under REPEATABLE READ; see docs/PROTOCOL.md). A statement that still
// waits for a lock (another writer, a prepared branch nobody resolved) has its blockers logged,
// and fails at mysql.lock_wait_timeout like any other error.
package commit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
)

// Batch is work for one subtask in one epoch: rows to write and, at the barrier, the order to prepare.
type Batch struct {
	Epoch   int64
	Table   *spec.Tables
	DLQ     []sink.DLQRow
	Details []sink.DetailRow
	Offsets partition.Offsets // at the barrier: what the subtask commits with its rows (Protocol.BarrierOffsets)
	Prepare chan<- Reply      // non-nil at the barrier
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
	owner  int64
	data   chan Batch
	ctrl   chan decision
	branch Participant
	buf    []byte
	log    *zap.Logger
}

// NewSubtask is subtask idx of this process, global across the job's instances, writing under fence.
func NewSubtask(env *Env, idx, global int, fence *ledger.Fence) *Subtask {
	return &Subtask{env: env, idx: idx, global: global, fence: fence, owner: fence.Epoch(), data: make(chan Batch, 4), ctrl: make(chan decision, 1),
		log: env.Log.Named("subtask").With(zap.Int("subtask", global))}
}

// Data is where the subtask takes its batches, in order.
func (s *Subtask) Data() chan<- Batch { return s.data }

// commit is the coordinator's order, once the checkpoint is decided, to commit the prepared branch.
func (s *Subtask) commit(deadline time.Time, done chan<- error) {
	s.ctrl <- decision{done: done, deadline: deadline}
}

// Run serves batches until ctx ends or a write fails. On return the connection is released, and
// discarded if it holds a transaction: the server then rolls back an active branch and keeps a
// prepared one for recovery.
func (s *Subtask) Run(ctx context.Context) error {
	defer func() {
		if s.branch != nil {
			if st := s.branch.State(); st != Idle {
				s.log.Info("releasing connection with open branch", zap.String("tag", s.branch.Tag()), zap.Stringer("state", st))
			}
			s.branch.Close()
		}
	}()
	for {
		var b Batch
		select {
		case <-ctx.Done():
			return nil
		case b = <-s.data:
		}
		start := time.Now()
		err := s.write(ctx, b)
		if b.Prepare == nil {
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
		b.Prepare <- r
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
		err = s.commitBranch(dctx, b.Epoch)
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
func (s *Subtask) barrier(ctx context.Context, b Batch, r *Reply) (bool, error) {
	if s.branch == nil || s.branch.State() != Active {
		if len(b.Offsets) == 0 {
			return false, nil // nothing written, no offsets of its own to commit
		}
		if err := s.begin(ctx, b.Epoch); err != nil {
			return false, err
		}
	}
	crashpoint.Hit(crashpoint.AfterFlush)
	t := time.Now()
	waits, err := s.branch.Vote(ctx, Ballot{Epoch: b.Epoch, Subtask: s.global, Offsets: b.Offsets, Owner: s.owner, Fence: s.fence})
	r.prep = time.Since(t)
	if err != nil {
		return false, err
	}
	r.tag = s.branch.Tag()
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

// commitBranch commits the prepared branch of epoch, as the decision says.
func (s *Subtask) commitBranch(ctx context.Context, epoch int64) error {
	tag := s.branch.Tag()
	if err := s.branch.Commit(ctx); err != nil {
		s.log.Warn("branch resolution failed; recovery will finish it", zap.String("tag", tag),
			zap.Int64("checkpoint", epoch), zap.String("action", "commit"), zap.Error(err))
		return err
	}
	s.env.Metrics.PendingTransactions.Dec()
	s.env.Metrics.Transactions.WithLabelValues("commit", metrics.OriginNormal).Inc()
	s.log.Debug("commit", zap.String("tag", tag), zap.Int64("checkpoint", epoch))
	return nil
}

// write flushes one batch into the epoch's transaction, opening it on first use.
func (s *Subtask) write(ctx context.Context, b Batch) error {
	hasRows := b.Table != nil && b.Table.Keys() > 0
	if !hasRows && len(b.DLQ) == 0 && len(b.Details) == 0 {
		return nil
	}
	if err := s.begin(ctx, b.Epoch); err != nil {
		return err
	}
	n := s.env.BatchRows // rows per statement
	// Aggregates in spec order, each one's rows in primary-key order: every transaction takes its
	// row locks in the same order, table by table.
	for a, table := range s.env.Plan.Tables() {
		if !hasRows {
			break
		}
		rows := b.Table.Drain(a)
		err := s.flush(ctx, len(rows), n,
			func(dst []byte, i, j int) []byte { return s.env.Plan.AppendUpsert(dst, a, rows[i:j]) },
			func(k int) string { return rowName(s.env.Plan, a, rows[k]) })
		if err != nil {
			return fmt.Errorf("subtask %d: %s: %w", s.global, table, err)
		}
	}
	err := s.flush(ctx, len(b.Details), n,
		func(dst []byte, i, j int) []byte { return s.env.Schema.AppendDetailInsert(dst, b.Details[i:j]) },
		func(k int) string {
			d := &b.Details[k]
			return fmt.Sprintf("order_id=%q of record %s/%d@%d", d.OrderID, d.Topic, d.Partition, d.Offset)
		})
	if err != nil {
		return fmt.Errorf("subtask %d: detail rows: %w", s.global, err)
	}
	err = s.flush(ctx, len(b.DLQ), n,
		func(dst []byte, i, j int) []byte {
			return s.env.Schema.AppendDLQInsert(dst, s.env.Job, b.Epoch, b.DLQ[i:j])
		},
		func(k int) string {
			d := &b.DLQ[k]
			return fmt.Sprintf("record %s/%d@%d", d.Topic, d.Partition, d.Offset)
		})
	if err != nil {
		return fmt.Errorf("subtask %d: dead-letter rows: %w", s.global, err)
	}
	return nil
}

// flush writes rows 0..rows-1 of one table, n to a statement; stmt renders rows [i, j), and name
// names row k should MySQL refuse it.
func (s *Subtask) flush(ctx context.Context, rows, n int, stmt func(dst []byte, i, j int) []byte, name func(k int) string) error {
	for i := 0; i < rows; i += n {
		j := min(i+n, rows)
		s.buf = stmt(s.buf[:0], i, j)
		if err := s.exec(ctx); err != nil {
			if fault.DataRefused(err) {
				return s.refused(ctx, i, j, stmt, name, err)
			}
			return err
		}
	}
	return nil
}

// refused names the row of a statement (rows [i, j)) that MySQL refused for its data. relay
// validated every value it writes, so this is a relay bug, and no retry of the statement can
// succeed; the operator needs the row. The epoch's transaction is gone with the error (its
// connection is discarded), so the rows run again one at a time in a transaction of their own,
// rolled back whatever happens, up to the first that MySQL refuses.
func (s *Subtask) refused(ctx context.Context, i, j int, stmt func(dst []byte, i, j int) []byte, name func(k int) string, err error) error {
	k := i
	if j-i > 1 {
		var perr error
		if k, perr = s.probe(ctx, i, j, stmt); perr != nil {
			return fmt.Errorf("MySQL refused a statement for its data (finding the row failed: %v): %w", perr, err)
		}
		if k < 0 {
			return fmt.Errorf("MySQL refused a statement for its data, but none of its rows alone: %w", err)
		}
	}
	return fmt.Errorf("MySQL refused row %s: %w", name(k), err)
}

// probe runs rows [i, j) one statement each, in one transaction that it rolls back, and returns
// the first row MySQL refuses for its data (-1: none). A statement that waits for a lock (a peer's
// transaction) fails at mysql.lock_wait_timeout; the whole probe is bounded by checkpoint.timeout.
func (s *Subtask) probe(ctx context.Context, i, j int, stmt func(dst []byte, i, j int) []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.env.CheckpointTimeout)
	defer cancel()
	tx, err := s.env.Sink.BeginTx(ctx, nil)
	if err != nil {
		return -1, err
	}
	defer func() { _ = tx.Rollback() }()
	for k := i; k < j; k++ {
		s.buf = stmt(s.buf[:0], k, k+1)
		switch _, err := tx.ExecContext(ctx, string(s.buf)); {
		case fault.DataRefused(err):
			return k, nil
		case err != nil:
			return -1, err
		}
	}
	return -1, nil
}

// rowName names row r of aggregate a for an operator: its key columns as MySQL prints them
// (strings quoted in Go syntax, so bytes that are not UTF-8 show as escapes), then what the
// checkpoint adds to its measures.
func rowName(p *spec.Plan, a int, r spec.Row) string {
	cols, err := p.Format(a, r)
	if err != nil {
		return fmt.Sprintf("%q (%v)", r.Key, err)
	}
	key, measures := p.ColumnNames(a)
	var b strings.Builder
	for i, c := range key {
		fmt.Fprintf(&b, "%s=%q ", c, cols[i])
	}
	b.WriteString("(adding")
	for i, c := range measures {
		fmt.Fprintf(&b, " %s=%s", c, cols[len(key)+i])
	}
	b.WriteString(")")
	return b.String()
}

// exec runs the statement in s.buf inside the epoch's transaction. One still running after a fifth
// of the lock wait timeout has the lock it waits for explained in the log, while the wait lasts
// (afterwards the server no longer says who held it).
func (s *Subtask) exec(ctx context.Context) error {
	tag, conn := s.branch.Tag(), s.branch.ConnID()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	t := time.AfterFunc(s.env.LockWait/5, func() {
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
func (s *Subtask) reportLocks(ctx context.Context, tag string, conn int64) {
	bs, err := database.Blockers(ctx, s.env.Sink, conn)
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

func (s *Subtask) begin(ctx context.Context, epoch int64) error {
	tag := Tag(s.env.Job, epoch, s.global)
	if s.branch != nil && s.branch.State() == Active {
		if s.branch.Tag() == tag {
			return nil
		}
		return fmt.Errorf("subtask %d: branch %s still active at epoch %d", s.global, s.branch.Tag(), epoch)
	}
	if s.branch == nil || s.branch.State() == Broken {
		b, err := s.env.Proto.NewParticipant(ctx, s.env.Sink)
		if err != nil {
			return fmt.Errorf("subtask %d: connect: %w", s.global, err)
		}
		s.branch = b
		s.log.Info("sink connection opened", zap.Int64("connection", b.ConnID()))
	}
	if err := s.branch.Begin(ctx, tag); err != nil {
		return err
	}
	s.log.Debug("begin", zap.String("tag", tag), zap.Int64("checkpoint", epoch))
	return nil
}
