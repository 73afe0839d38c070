// Held mode's ledger: per-partition offsets committed inside the data transaction that covers them.
//
// Invariant: a partition's offset row changes only in the same local transaction as the rows its
// records produced, and only while this process's owner epoch is current (checked under a shared
// lock on the job row, which a new owner's epoch bump must wait for). The COMMIT is the decision:
// a transaction that did not commit leaves both data and offset as they were.
package ledger

import (
	"context"
	"database/sql"
	"fmt"
)

// HeldOffsets returns the committed offsets of every partition and the highest checkpoint id seen.
func (l *Ledger) HeldOffsets(ctx context.Context) (Offsets, int64, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT topic, kpartition, next_offset, checkpoint_id FROM relay_held_offsets WHERE job = ?`, l.job)
	if err != nil {
		return nil, 0, fmt.Errorf("held offsets: %w", err)
	}
	defer rows.Close()
	offs := Offsets{}
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

// WriteHeldOffsets checks the fence and records offs for checkpoint id inside the caller's open
// transaction on conn; the caller's COMMIT makes both durable together.
func (l *Ledger) WriteHeldOffsets(ctx context.Context, conn Execer, epoch, id int64, offs Offsets) error {
	var cur int64
	if err := conn.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ? LOCK IN SHARE MODE`, l.job).Scan(&cur); err != nil {
		return fmt.Errorf("held fence check: %w", err)
	}
	if cur != epoch {
		return fmt.Errorf("%w: owner epoch is %d, this process holds %d", ErrFenced, cur, epoch)
	}
	for t, ps := range offs {
		for p, off := range ps {
			if _, err := conn.ExecContext(ctx, `INSERT INTO relay_held_offsets
				(job, topic, kpartition, next_offset, checkpoint_id, owner_epoch, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))
				ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset), checkpoint_id = VALUES(checkpoint_id),
					owner_epoch = VALUES(owner_epoch), updated_at = VALUES(updated_at)`,
				l.job, t, p, off, id, epoch); err != nil {
				return fmt.Errorf("held offsets %s/%d: %w", t, p, err)
			}
		}
	}
	return nil
}
