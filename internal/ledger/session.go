// Held-mode sessions: a new epoch for the same owner.
//
// Invariant: a new session's epoch, its owner row and its lease move in one transaction that
// waits for the previous session's data transactions, so it resumes after every commit of theirs.

package ledger

import (
	"context"
	"fmt"

	"github.com/relay-sh/relay/internal/partition"
)

// NewSession starts a held-mode session of this owner: in one ledger transaction it takes the
// owner row exclusively, bumps the owner epoch (and the lease's with it) and reads every
// partition's offset with a locking read. A data transaction of the previous session holds the
// owner row shared from its fence check to its COMMIT, and its offset rows exclusively: one whose
// COMMIT is still under way on the server (its client gave up on it) is waited for, so the new
// session resumes after it rather than from the offsets before it; one that has not checked the
// fence yet finds the new epoch and fails with ErrFenced. It returns the offsets and the highest
// checkpoint id among them, as PartitionOffsets does.
//
// The waits run on a pool connection, not on the lock session, and without holding up renewals:
// a transaction waited for may need a new connection of this process to finish (the resolver's
// guarded XA COMMIT), and a new connection waits for a renewal to record it.
func (f *Fence) NewSession(ctx context.Context, l *Ledger) (partition.Offsets, int64, error) {
	old := f.Epoch()
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("new session: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := checkEpoch(ctx, tx, l.key, old); err != nil {
		return nil, 0, fmt.Errorf("new session: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET owner_epoch = ? WHERE job = ?`, old+1, l.key); err != nil {
		return nil, 0, fmt.Errorf("new session: bump epoch: %w", err)
	}
	if err := l.advanceOwner(ctx, tx, old, old+1); err != nil {
		return nil, 0, fmt.Errorf("new session: %w", err)
	}
	offs, maxID, err := l.partitionOffsets(ctx, tx, " LOCK IN SHARE MODE")
	if err != nil {
		return nil, 0, fmt.Errorf("new session: %w", err)
	}
	// The lease moves to the new epoch with it; no renewal of the old one may run past this point.
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	res, err := tx.ExecContext(ctx, `UPDATE relay_leases SET owner_epoch = ? WHERE job = ? AND owner_epoch = ? AND conn_id = ?`,
		old+1, l.key, old, f.connID)
	if err != nil {
		return nil, 0, fmt.Errorf("new session: lease: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return nil, 0, fmt.Errorf("new session: %w: lease of epoch %d not found", ErrFenced, old)
	}
	if err := tx.Commit(); err != nil {
		// Unknown outcome: the lease may be at either epoch, so the next renewal may fail and
		// the fence be taken again. Nothing decides under an epoch it does not know it holds.
		return nil, 0, fmt.Errorf("new session: commit: %w", err)
	}
	f.mu.Lock()
	f.epoch = old + 1
	f.mu.Unlock()
	return offs, maxID, nil
}
