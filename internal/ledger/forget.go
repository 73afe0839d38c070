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
	"strings"
	"time"
)

// Stopped is a group member with a lease row left, as ForgetMembers sees it: forgotten when Kept
// is empty, else kept for that reason.
type Stopped struct {
	Key   string `json:"key"`
	ID    string `json:"id"`
	Owner string `json:"owner"` // the process that took its fence last (host, pid)
	// ExpiredFor is how long ago its lease ran out, by the server's clock (negative: it still runs).
	ExpiredFor time.Duration `json:"expired_for_ns"`
	Kept       string        `json:"kept,omitempty"`
}

// PlanForget sorts the job's members that have a lease row into those ForgetMembers deletes (the
// lease ran out longer ago than after, nothing in doubt) and those it keeps, with why: a held
// lock, a lease within the bound, a checkpoint not COMMITTED, or keep's reason (the caller's: a
// branch still in XA RECOVER).
func PlanForget(ctx context.Context, l *Ledger, after time.Duration, keep map[string]string) ([]Stopped, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT j.job, j.owner, IS_USED_LOCK(CONCAT('relay/', j.job)) IS NOT NULL,
			TIMESTAMPDIFF(MICROSECOND, s.lease_until, UTC_TIMESTAMP(6)),
			(SELECT MIN(c.checkpoint_id) FROM relay_checkpoints c WHERE c.job = ? AND c.instance = j.job AND c.state <> ?)
		FROM relay_jobs j JOIN relay_leases s ON s.job = j.job
		WHERE j.job LIKE ? AND j.job <> ? ORDER BY j.job`,
		l.job, Committed, likePrefix(MemberKey(l.job, "")), l.key)
	if err != nil {
		return nil, fmt.Errorf("stopped members: %w", err)
	}
	defer rows.Close()
	var out []Stopped
	for rows.Next() {
		var m Stopped
		var held bool
		var expired int64
		var undecided sql.NullInt64
		if err := rows.Scan(&m.Key, &m.Owner, &held, &expired, &undecided); err != nil {
			return nil, fmt.Errorf("stopped members: %w", err)
		}
		m.ID = strings.TrimPrefix(m.Key, MemberKey(l.job, ""))
		m.ExpiredFor = time.Duration(expired) * time.Microsecond
		switch {
		case held:
			m.Kept = "live: its lock is held"
		case m.ExpiredFor <= 0:
			m.Kept = fmt.Sprintf("stopped, but its lease runs %s more", (-m.ExpiredFor).Round(time.Millisecond))
		case m.ExpiredFor <= after:
			m.Kept = fmt.Sprintf("its lease ran out %s ago, within %s", m.ExpiredFor.Round(time.Second), after)
		case undecided.Valid:
			m.Kept = fmt.Sprintf("in doubt: its checkpoint %d is not COMMITTED (recovery or a live member's resolver finishes it)", undecided.Int64)
		case keep[m.Key] != "":
			m.Kept = "in doubt: " + keep[m.Key]
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// ForgetMembers deletes the lease and owner rows of the job's group members PlanForget does not
// keep, and returns how many it forgot.
func ForgetMembers(ctx context.Context, l *Ledger, after time.Duration, keep map[string]string) (int, error) {
	plan, err := PlanForget(ctx, l, after, keep)
	if err != nil {
		return 0, fmt.Errorf("forget members: %w", err)
	}
	n := 0
	for _, m := range plan {
		if m.Kept != "" {
			continue
		}
		forgot, err := l.forget(ctx, m.Key)
		if err != nil {
			return n, fmt.Errorf("forget member %s: %w", m.Key, err)
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
