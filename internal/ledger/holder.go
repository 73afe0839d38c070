// The holder: what the ledger and the server say about who holds a job's fence.
//
// Invariant: these are reads only; they change neither the lock, the epoch nor the lease.

package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// holderRow is what the ledger and the server say about the lock's holder.
type holderRow struct {
	holder    sql.NullInt64 // IS_USED_LOCK: the session holding the lock now
	claimed   bool          // the job row exists
	connID    int64         // the session the last claim recorded
	owner     string
	epoch     int64
	layout    int // the layout its claim recorded
	acquired  time.Time
	lease     sql.NullTime
	remaining time.Duration // until the lease runs out, by the server's clock (negative: expired)
	sessions  recorded
}

func readHolder(ctx context.Context, l *Ledger) (holderRow, error) {
	return holderOf(ctx, l.db, l.key, "")
}

// holderOf reads the holder of key through q (a transaction: the claim's), with lock appended to
// the read of the job and lease rows (" FOR UPDATE" inside the claim).
func holderOf(ctx context.Context, q Execer, key, lock string) (holderRow, error) {
	var h holderRow
	var err error
	if h.holder, err = lockHolder(ctx, q, key); err != nil {
		return h, err
	}
	var us sql.NullInt64
	var js string
	err = q.QueryRowContext(ctx, `SELECT j.conn_id, j.owner, j.owner_epoch, j.layout, j.acquired_at, l.lease_until,
		TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.lease_until), COALESCE(l.sessions, '')
		FROM relay_jobs j LEFT JOIN relay_leases l ON l.job = j.job AND l.owner_epoch = j.owner_epoch WHERE j.job = ?`+lock,
		key).Scan(&h.connID, &h.owner, &h.epoch, &h.layout, &h.acquired, &h.lease, &us, &js)
	if errors.Is(err, sql.ErrNoRows) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	h.claimed = true
	h.remaining = time.Duration(us.Int64) * time.Microsecond
	if js != "" {
		if err := json.Unmarshal([]byte(js), &h.sessions); err != nil {
			return h, fmt.Errorf("recorded sessions: %w", err)
		}
	}
	return h, nil
}

// LeaseLeft is how long the instance's lease still runs by the server's clock: 0 when its owner
// stopped renewing past it (or never had one). The resolver acts for another instance only then:
// an instance whose lock session just dropped is restarting in-process and takes its fence back
// within its lease. (XA mode only, which a Galera cluster refuses: one server wrote the lease and
// reads it, so one clock.)
func LeaseLeft(ctx context.Context, l *Ledger) (time.Duration, error) {
	h, err := readHolder(ctx, l)
	if err != nil || !h.lease.Valid {
		return 0, err
	}
	return max(h.remaining, 0), nil
}

// Stalled lists the processes of the job, other than this one, that hold their lock but stopped
// renewing past their lease: frozen (a GC or VM pause, SIGSTOP) or cut off from the server. Their
// sessions keep their row locks (an open transaction, a prepared branch) that the live processes'
// checkpoints wait on; they may be taken over as a newcomer would (Acquire with TakeOver), since
// they stopped deciding before their lease ran out. One query, cheap enough to ask every few
// seconds: the lease read is the server's, the lock's holder must be the session the claim recorded.
// That session holds its lock on the node this query runs on (GET_LOCK is node-local on a Galera
// cluster) and renews the lease there, so the lease is compared with the clock that wrote it.
func Stalled(ctx context.Context, l *Ledger) ([]string, error) {
	keys, err := l.processes(ctx, l.db, `j.job <> ? AND s.sessions <> '' AND s.lease_until < UTC_TIMESTAMP(6)
		AND IS_USED_LOCK(CONCAT('relay/', j.job)) = j.conn_id`, l.key)
	if err != nil {
		return nil, fmt.Errorf("stalled processes: %w", err)
	}
	return keys, nil
}

// Holder describes who holds the job's lock, for error messages and `relay status`.
func Holder(ctx context.Context, l *Ledger) string {
	connID, _ := lockHolder(ctx, l.db, l.key)
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
	connID, err := lockHolder(ctx, l.db, l.key)
	return connID.Valid, err
}

// lockHolder is the server session holding the fence lock of instance key (IS_USED_LOCK), NULL
// when none does. Every read of a lock's holder goes through it, on the caller's connection or
// transaction.
func lockHolder(ctx context.Context, q Execer, key string) (sql.NullInt64, error) {
	var holder sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(key)).Scan(&holder)
	return holder, err
}

// siblings are the keys of the job's processes under layout other than key: the instances of
// layout M, or, under LayoutGroup, every member the ledger has seen (read through q, inside the
// caller's transaction).
func (l *Ledger) siblings(ctx context.Context, q *sql.Tx, layout int) ([]string, error) {
	var keys []string
	if layout == LayoutGroup {
		all, err := l.memberKeys(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, k := range all {
			if k != l.key {
				keys = append(keys, k)
			}
		}
		return keys, nil
	}
	for j := 0; j < layout; j++ {
		if k := InstanceKey(l.job, j, layout); k != l.key {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// likePrefix is a LIKE pattern matching the strings that start with s (a job name may hold _).
func likePrefix(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s) + "%"
}
