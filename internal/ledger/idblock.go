// Checkpoint id blocks: ids reserved per owner, never handed out twice.
//
// Invariant: blocks are disjoint across instances and owners and recorded before any id of them is
// used, under the job row's lock and the current epoch.

package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// idBlock is how many checkpoint ids one reservation covers: one ledger write per block.
const idBlock = 1000

// ReserveIDs hands this owner the next block of checkpoint ids, all at or above floor. Blocks are
// disjoint across instances and owners, and recorded: an id is never handed out twice, even when its
// first use left no trace (an epoch that died before its prepare), and the block tells which
// instance may hold a branch with that id.
func (f *Fence) ReserveIDs(ctx context.Context, l *Ledger, floor int64) (first, last int64, err error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// Exclusive locks from the first read, the job row before the instance's owner row (the order
	// claim takes them in): a shared lock upgraded later deadlocks against a second reservation
	// doing the same (the job row is the owner row when the job runs as one instance).
	var reserved, blocks, cur int64
	if err := tx.QueryRowContext(ctx, `SELECT id_reserved FROM relay_jobs WHERE job = ? FOR UPDATE`, l.job).Scan(&reserved); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ? FOR UPDATE`, l.key).Scan(&cur); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	if epoch := f.Epoch(); cur != epoch {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w: owner epoch is %d, this process holds %d", ErrFenced, cur, epoch)
	}
	// The blocks themselves too: a job row deleted by hand (a demo reset, an operator) must not
	// hand out ids a recorded block already covers.
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(last_id), 0) FROM relay_id_blocks WHERE job = ?`, l.job).Scan(&blocks); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	first = max(reserved+1, blocks+1, floor)
	last = first + idBlock - 1
	if _, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET id_reserved = ? WHERE job = ?`, last, l.job); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_id_blocks (job, first_id, last_id, owner_key, reserved_at)
		VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))`, l.job, first, last, l.key); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	return first, last, tx.Commit()
}

// BlockOwner tells which instance key reserved checkpoint id; ok is false for an id no block covers.
func (l *Ledger) BlockOwner(ctx context.Context, id int64) (key string, ok bool, err error) {
	err = l.db.QueryRowContext(ctx, `SELECT owner_key FROM relay_id_blocks WHERE job = ? AND first_id <= ? AND last_id >= ?
		ORDER BY first_id DESC LIMIT 1`, l.job, id, id).Scan(&key)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return key, err == nil, err
}
