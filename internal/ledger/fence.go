// Fence: one owner per job.
//
// Invariant: while a Fence is held, its GET_LOCK connection is open and the job row's owner epoch is
// the one this Fence bumped; a second process fails fast naming the holder, and a process that lost
// its lock connection learns it from Lost and must stop before its next decision.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/xa"
)

// Fence is the ownership of one job.
type Fence struct {
	conn  *sql.Conn
	Epoch int64
	lost  chan struct{}
	stop  chan struct{}
}

// LockName is the GET_LOCK name of an instance key.
func LockName(key string) string { return "relay/" + key }

// lockWaitSeconds is how long Acquire waits for the lock: long enough for the server to notice that the
// previous owner's connection died with its process (a restart right after a SIGKILL), short
// enough that a second live instance still fails fast.
const lockWaitSeconds = 2

// Acquire takes the instance's lock, waiting at most lockWaitSeconds, and bumps its owner epoch. owner describes this
// process (host, pid) for the error another process will print. Instances of another layout (a
// different number of instances) must all be stopped before the layout changes.
func Acquire(ctx context.Context, l *Ledger, owner string) (*Fence, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("fence %s: %w", l.key, err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, LockName(l.key), lockWaitSeconds).Scan(&got); err != nil {
		xa.Discard(conn)
		return nil, fmt.Errorf("fence %s: %w", l.key, err)
	}
	if !got.Valid || got.Int64 != 1 {
		xa.Discard(conn)
		return nil, fmt.Errorf("%w: job %s is running elsewhere: %s", ErrFenced, l.key, Holder(ctx, l))
	}
	f := &Fence{conn: conn, lost: make(chan struct{}), stop: make(chan struct{})}
	// Instances starting together queue on the job row; a deadlock report is retried like any.
	if err := fault.Do(ctx, fault.DefaultPolicy(), func(ctx context.Context) error {
		return f.claim(ctx, l, owner, l.layout)
	}, nil); err != nil {
		f.Release()
		return nil, err
	}
	go f.watch(l.key)
	return f, nil
}

// claim bumps the owner epoch and records the layout, under the job row's lock.
func (f *Fence) claim(ctx context.Context, l *Ledger, owner string, m int) error {
	tx, err := f.conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	defer func() { _ = tx.Rollback() }()
	// Lock the job row exclusively from the first statement: a shared lock taken first (as INSERT
	// IGNORE's duplicate check does) and upgraded later deadlocks against a sibling doing the same.
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_jobs (job, owner_epoch, owner, acquired_at, layout)
		VALUES (?, 0, '', UTC_TIMESTAMP(6), ?) ON DUPLICATE KEY UPDATE layout = layout`, l.job, m); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	var layout int
	if err := tx.QueryRowContext(ctx, `SELECT layout FROM relay_jobs WHERE job = ? FOR UPDATE`, l.job).Scan(&layout); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	if layout != m {
		// A partition must never have two owners: no instance of the last layout may still run.
		// Claims queue on the job row, so an instance holding its lock but not yet claimed (its
		// owner row does not name its connection) checks after this one, against this layout.
		for j := 0; j < layout; j++ {
			old := InstanceKey(l.job, j, layout)
			if old == l.key {
				continue
			}
			var holder sql.NullInt64
			if err := tx.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(old)).Scan(&holder); err != nil {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
			var claimedBy int64
			var claimedLayout int
			err := tx.QueryRowContext(ctx, `SELECT conn_id, layout FROM relay_jobs WHERE job = ?`, old).Scan(&claimedBy, &claimedLayout)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
			if holder.Valid && err == nil && holder.Int64 == claimedBy && claimedLayout != m {
				return fmt.Errorf("%w: job %s runs as %d instances (%s is up); stop them all before running it as %d",
					ErrFenced, l.job, claimedLayout, old, m)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET layout = ? WHERE job = ?`, m, l.job); err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_jobs (job, owner_epoch, owner, acquired_at, layout, conn_id)
		VALUES (?, 1, ?, UTC_TIMESTAMP(6), ?, CONNECTION_ID())
		ON DUPLICATE KEY UPDATE owner_epoch = owner_epoch + 1, owner = VALUES(owner), acquired_at = VALUES(acquired_at),
			layout = VALUES(layout), conn_id = VALUES(conn_id)`,
		l.key, owner, m); err != nil {
		return fmt.Errorf("fence %s: bump epoch: %w", l.key, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ?`, l.key).Scan(&f.Epoch); err != nil {
		return fmt.Errorf("fence %s: read epoch: %w", l.key, err)
	}
	return tx.Commit()
}

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
	var cur int64
	if err := tx.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ? LOCK IN SHARE MODE`, l.key).Scan(&cur); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	if cur != f.Epoch {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w: owner epoch is %d, this process holds %d", ErrFenced, cur, f.Epoch)
	}
	var reserved int64
	if err := tx.QueryRowContext(ctx, `SELECT id_reserved FROM relay_jobs WHERE job = ? FOR UPDATE`, l.job).Scan(&reserved); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	first = max(reserved+1, floor)
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

// Holder describes who holds the job's lock, for error messages and `relay status`.
func Holder(ctx context.Context, l *Ledger) string {
	var connID sql.NullInt64
	_ = l.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(l.key)).Scan(&connID)
	var owner string
	var epoch int64
	var at time.Time
	err := l.db.QueryRowContext(ctx, `SELECT owner, owner_epoch, acquired_at FROM relay_jobs WHERE job = ?`, l.key).Scan(&owner, &epoch, &at)
	switch {
	case !connID.Valid:
		return "nobody holds the lock"
	case errors.Is(err, sql.ErrNoRows) || err != nil:
		return fmt.Sprintf("lock held by MySQL connection %d", connID.Int64)
	default:
		return fmt.Sprintf("owner %s (epoch %d, since %s UTC, MySQL connection %d)", owner, epoch, at.Format(time.RFC3339), connID.Int64)
	}
}

// IsHeld reports whether some process holds the job's lock (used by offline commands).
func IsHeld(ctx context.Context, l *Ledger) (bool, error) {
	var connID sql.NullInt64
	if err := l.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(l.key)).Scan(&connID); err != nil {
		return false, err
	}
	return connID.Valid, nil
}

// watch pings the lock connection; if it dies the lock is gone with it.
func (f *Fence) watch(key string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var mine sql.NullInt64
			err := f.conn.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?) = CONNECTION_ID()`, LockName(key)).Scan(&mine)
			cancel()
			if err != nil || !mine.Valid || mine.Int64 != 1 {
				close(f.lost)
				return
			}
		}
	}
}

// Lost is closed when the fence's lock connection died: ownership may have passed to another process.
func (f *Fence) Lost() <-chan struct{} { return f.lost }

// Release gives the lock back (process exit releases it too).
func (f *Fence) Release() {
	select {
	case <-f.stop:
		return
	default:
		close(f.stop)
	}
	if f.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = f.conn.ExecContext(ctx, `DO RELEASE_ALL_LOCKS()`)
		cancel()
		xa.Discard(f.conn)
	}
}
