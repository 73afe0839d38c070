// Row writing: a subtask's batches into its epoch's transaction, statement by statement.
//
// Invariants: every transaction takes its row locks in the same order (aggregates in spec order,
// each one's rows in primary-key order), and every statement runs inside the epoch's transaction.
// Subtasks write disjoint rows (routing by key), and their sessions run at READ COMMITTED, so a
// page split never turns one subtask's row lock into a gap lock that blocks a peer's insert until
// the checkpoint ends (it did under REPEATABLE READ; see docs/PROTOCOL.md). A statement that still
// waits for a lock (another writer, a prepared branch nobody resolved) has its blockers logged,
// and fails at mysql.lock_wait_timeout like any other error. A row MySQL refuses is named.

package commit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/spec"
)

// write flushes one batch into the epoch's transaction, opening it on first use.
func (s *Subtask) write(ctx context.Context, b Work) error {
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
	tag, conn := s.txn.Tag(), s.txn.ConnID()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	t := time.AfterFunc(s.env.LockWait/5, func() {
		defer close(done)
		s.reportLocks(wctx, tag, conn)
	})
	err := s.txn.Exec(ctx, string(s.buf))
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
