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

	"github.com/relay-sh/relay/internal/xa"
)

// Fence is the ownership of one job.
type Fence struct {
	conn  *sql.Conn
	Epoch int64
	lost  chan struct{}
	stop  chan struct{}
}

// LockName is the GET_LOCK name of a job.
func LockName(job string) string { return "relay/" + job }

// Acquire takes the job's lock without waiting and bumps its owner epoch. owner describes this
// process (host, pid) for the error another process will print.
func Acquire(ctx context.Context, l *Ledger, owner string) (*Fence, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("fence %s: %w", l.job, err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, LockName(l.job)).Scan(&got); err != nil {
		xa.Discard(conn)
		return nil, fmt.Errorf("fence %s: %w", l.job, err)
	}
	if !got.Valid || got.Int64 != 1 {
		xa.Discard(conn)
		return nil, fmt.Errorf("%w: job %s is running elsewhere: %s", ErrFenced, l.job, Holder(ctx, l))
	}
	f := &Fence{conn: conn, lost: make(chan struct{}), stop: make(chan struct{})}
	if _, err := conn.ExecContext(ctx, `INSERT INTO relay_jobs (job, owner_epoch, owner, acquired_at)
		VALUES (?, 1, ?, UTC_TIMESTAMP(6))
		ON DUPLICATE KEY UPDATE owner_epoch = owner_epoch + 1, owner = VALUES(owner), acquired_at = VALUES(acquired_at)`,
		l.job, owner); err != nil {
		f.Release()
		return nil, fmt.Errorf("fence %s: bump epoch: %w", l.job, err)
	}
	if err := conn.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ?`, l.job).Scan(&f.Epoch); err != nil {
		f.Release()
		return nil, fmt.Errorf("fence %s: read epoch: %w", l.job, err)
	}
	go f.watch(l.job)
	return f, nil
}

// idBlock is how many checkpoint ids one reservation covers: one ledger write per block.
const idBlock = 1000

// ReserveIDs makes sure ids up to at least upTo are recorded as used, in blocks, so that no later
// owner hands out an id an earlier one may have used for a branch that left no other trace (an
// epoch that died before its prepare). It returns the new reserved bound.
func (f *Fence) ReserveIDs(ctx context.Context, l *Ledger, upTo int64) (int64, error) {
	bound := upTo + idBlock
	res, err := l.db.ExecContext(ctx, `UPDATE relay_jobs SET id_reserved = GREATEST(id_reserved, ?) WHERE job = ? AND owner_epoch = ?`,
		bound, l.job, f.Epoch)
	if err != nil {
		return 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var cur int64
		if err := l.db.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ?`, l.job).Scan(&cur); err != nil || cur != f.Epoch {
			return 0, fmt.Errorf("reserve checkpoint ids: %w: owner epoch is %d, this process holds %d", ErrFenced, cur, f.Epoch)
		}
	}
	return bound, nil
}

// ReservedIDs returns the highest checkpoint id any owner may have used.
func (l *Ledger) ReservedIDs(ctx context.Context) (int64, error) {
	var n int64
	err := l.db.QueryRowContext(ctx, `SELECT id_reserved FROM relay_jobs WHERE job = ?`, l.job).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

// Holder describes who holds the job's lock, for error messages and `relay status`.
func Holder(ctx context.Context, l *Ledger) string {
	var connID sql.NullInt64
	_ = l.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(l.job)).Scan(&connID)
	var owner string
	var epoch int64
	var at time.Time
	err := l.db.QueryRowContext(ctx, `SELECT owner, owner_epoch, acquired_at FROM relay_jobs WHERE job = ?`, l.job).Scan(&owner, &epoch, &at)
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
	if err := l.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(l.job)).Scan(&connID); err != nil {
		return false, err
	}
	return connID.Valid, nil
}

// watch pings the lock connection; if it dies the lock is gone with it.
func (f *Fence) watch(job string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var mine sql.NullInt64
			err := f.conn.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?) = CONNECTION_ID()`, LockName(job)).Scan(&mine)
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
