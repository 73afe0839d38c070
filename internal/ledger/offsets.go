// Partition offsets: where each partition resumes, committed with what it covers.
//
// Invariant: a partition's row changes only inside the local transaction that makes its records'
// effect durable: the decision transaction in XA mode, the data transaction in held mode (after a
// shared lock on the owner row confirms the owner epoch, which a new owner's bump must wait for).
// A transaction that did not commit leaves data and offset as they were.

package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/relay-sh/relay/internal/partition"
)

// PartitionOffsets returns the committed offset of every partition of the job, whichever instance
// wrote it, and the highest checkpoint id among them.
func (l *Ledger) PartitionOffsets(ctx context.Context) (partition.Offsets, int64, error) {
	return l.partitionOffsets(ctx, l.db, "")
}

// partitionOffsets is PartitionOffsets through q, the read ending with lock (a locking clause, or
// nothing).
func (l *Ledger) partitionOffsets(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, lock string) (partition.Offsets, int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT topic, kpartition, next_offset, checkpoint_id FROM relay_offsets WHERE job = ?`+lock, l.job)
	if err != nil {
		return nil, 0, fmt.Errorf("partition offsets: %w", err)
	}
	defer rows.Close()
	offs := partition.Offsets{}
	var maxID int64
	for rows.Next() {
		var t string
		var p int32
		var off, id int64
		if err := rows.Scan(&t, &p, &off, &id); err != nil {
			return nil, 0, err
		}
		offs.Set(t, p, off)
		maxID = max(maxID, id)
	}
	return offs, maxID, rows.Err()
}

// Execer is a connection or transaction that runs statements.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// writeOffsets upserts offs for checkpoint id in one statement, inside the caller's transaction.
func (l *Ledger) writeOffsets(ctx context.Context, conn Execer, id int64, offs partition.Offsets) error {
	return l.upsertOffsets(ctx, conn, id, offs, `next_offset = VALUES(next_offset), checkpoint_id = VALUES(checkpoint_id),
		owner_key = VALUES(owner_key), updated_at = VALUES(updated_at)`)
}

// upsertOffsets inserts offs for checkpoint id, a row that exists taking update. Rows go in
// primary-key order (topic, then partition), so concurrent writers (held-mode subtasks of several
// instances, a NewSession's locking read) take their row locks in one order, never crosswise: Go's
// map order would make that order random and let two of them deadlock (1213).
func (l *Ledger) upsertOffsets(ctx context.Context, conn Execer, id int64, offs partition.Offsets, update string) error {
	var q strings.Builder
	var args []any
	q.WriteString(`INSERT INTO relay_offsets (job, topic, kpartition, next_offset, checkpoint_id, owner_key, updated_at) VALUES `)
	for _, t := range slices.Sorted(maps.Keys(offs)) {
		ps := offs[t]
		for _, p := range slices.Sorted(maps.Keys(ps)) {
			if len(args) > 0 {
				q.WriteString(",")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))")
			args = append(args, l.job, t, p, ps[p], id, l.key)
		}
	}
	if len(args) == 0 {
		return nil
	}
	q.WriteString(` ON DUPLICATE KEY UPDATE ` + update)
	if _, err := conn.ExecContext(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("partition offsets: %w", err)
	}
	return nil
}

// WriteHeldOffsets checks the fence and records offs for checkpoint id inside the caller's open
// held-mode transaction on conn, then writes the owner row (owner.go); the caller's COMMIT makes
// them durable with the data.
func (l *Ledger) WriteHeldOffsets(ctx context.Context, conn Execer, epoch int64, claims partition.Claims, id int64, offs partition.Offsets) error {
	var cur int64
	if err := conn.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ? LOCK IN SHARE MODE`, l.key).Scan(&cur); err != nil {
		return fmt.Errorf("held fence check: %w", err)
	}
	if cur != epoch {
		return fmt.Errorf("%w: owner epoch is %d, this process holds %d", ErrFenced, cur, epoch)
	}
	if err := l.stampPartitions(ctx, conn, claims, offs); err != nil {
		return err
	}
	if err := l.writeOffsets(ctx, conn, id, offs); err != nil {
		return err
	}
	return l.stampOwner(ctx, conn, epoch)
}
