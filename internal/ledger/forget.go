// Forgetting dead members: a group member's key is its process's, so each process start leaves a
// relay_leases and a relay_owners row behind once it stopped, which every lease and stalled-process
// read goes over. Its relay_jobs row stays (small, read only by key): it keeps the key's epoch, so
// a static member starting again under the key claims above every epoch it ever had.
//
// Invariant: a member's lease and owner rows are deleted only when nothing of it can still matter: its lock is free,
// its lease ran out longer ago than the caller's bound (by this node's clock: on a Galera cluster a
// lease another node wrote is off by the two clocks' difference, far below the bound of a day), it left no checkpoint that is not COMMITTED
// (the resolver finishes those first), and the caller found none of its branches in XA RECOVER.
// A zombie of it, should one wake, finds no owner row to decide under (its decisions write
// relay_owners conditional on its epoch) and no lease to renew, and fails.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ForgetMembers deletes the lease and owner rows of the job's group members stopped longer than after, except keep
// (keys with branches still in XA RECOVER), and returns how many it forgot.
func ForgetMembers(ctx context.Context, l *Ledger, after time.Duration, keep map[string]bool) (int, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT j.job FROM relay_jobs j
		JOIN relay_leases s ON s.job = j.job
		WHERE j.job LIKE ? AND j.job <> ? AND IS_USED_LOCK(CONCAT('relay/', j.job)) IS NULL
			AND s.lease_until < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
			AND NOT EXISTS (SELECT 1 FROM relay_checkpoints c WHERE c.job = ? AND c.instance = j.job AND c.state <> ?)`,
		likePrefix(MemberKey(l.job, "")), l.key, after.Microseconds(), l.job, Committed)
	if err != nil {
		return 0, fmt.Errorf("forget members: %w", err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, err
		}
		if !keep[k] {
			keys = append(keys, k)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		forgot, err := l.forget(ctx, k)
		if err != nil {
			return n, fmt.Errorf("forget member %s: %w", k, err)
		}
		if forgot {
			n++
		}
	}
	return n, nil
}

// forget deletes member key's lease and owner rows, under its relay_jobs row's lock (which a claim of the key
// takes first), if its lock is still free: a process taking the key meanwhile waits and then
// claims it anew.
func (l *Ledger) forget(ctx context.Context, key string) (bool, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	var conn int64
	if err := tx.QueryRowContext(ctx, `SELECT conn_id FROM relay_jobs WHERE job = ? FOR UPDATE`, key).Scan(&conn); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return false, err
	}
	if holder, err := lockHolder(ctx, tx, key); err != nil || holder.Valid {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM relay_leases WHERE job = ?`, key); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM relay_owners WHERE job = ? AND scope = ?`, l.job, key); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
