// The claim: the owner epoch bump and the layout rule, under the job row's lock.
//
// Invariant: the epoch, the owner row and the lease move together in one transaction that writes
// the job row (so holds it exclusively, and on a Galera cluster certifies against every other
// claim of the job) from its first statement; a new layout is recorded only when no process of
// the old one holds its lock and claim, nor, on a Galera cluster, renews a lease from another node.

package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrLayoutSwitch refuses a process whose membership (instances or group) is not the job's: the
// switch is an operator's step (relay membership switch), never a side effect of a start. It is a
// kind of ErrFenced: fatal, exit status 3.
var ErrLayoutSwitch = fmt.Errorf("%w: the job's membership is another", ErrFenced)

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
	// That statement changes nothing, so writes nothing a Galera cluster certifies: on a cluster
	// locks are the node's alone, and two claims on two nodes, each finding no other process up,
	// must write one row, so that the later to commit fails (1213) and claims again, seeing the first.
	if err := l.countClaim(ctx, tx); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	var layout int
	var jobConn int64
	var jobOwner string
	if err := tx.QueryRowContext(ctx, `SELECT layout, conn_id, owner FROM relay_jobs WHERE job = ? FOR UPDATE`, l.job).Scan(&layout, &jobConn, &jobOwner); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	if err := f.operatorFree(ctx, tx, l, m, layout, jobConn, jobOwner); err != nil {
		return err
	}
	if err := f.moveLayout(ctx, tx, l, m, layout); err != nil {
		return err
	}
	if f.cfg.Cluster {
		// GET_LOCK is this node's alone: the holder is read again here, its rows locked, so a claim
		// committed on another node since otherNode looked is seen now; one committing meanwhile
		// writes the same rows as this claim, and one of the two fails certification.
		h, err := holderOf(ctx, tx, l.key, " FOR UPDATE")
		if err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		// Live or not yet judged: otherNode watches it.
		if f.elsewhere(h, f.clocks.judge(l.key, h)) {
			return fmt.Errorf("%w: job %s: owner %s (epoch %d)", errClaimedElsewhere, l.key, h.owner, h.epoch)
		}
	}
	epoch, sent, err := f.bump(ctx, tx, l, owner, m, layout)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	f.mu.Lock()
	f.epoch = epoch
	f.mu.Unlock()
	f.renewed(sent)
	return nil
}

// operatorFree refuses the claim of a process (not an operator command) while an operator command
// holds the whole job: one starting meanwhile would read offsets the command is replacing.
func (f *Fence) operatorFree(ctx context.Context, tx *sql.Tx, l *Ledger, m, layout int, jobConn int64, jobOwner string) error {
	if !f.cfg.Operator && l.key != l.job {
		// An operator command (offsets reset, txns resolve, spec accept) holds the whole job while
		// it runs: an instance or member starting meanwhile would read offsets it is replacing.
		holder, err := lockHolder(ctx, tx, l.job)
		if err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		if holder.Valid && holder.Int64 == jobConn && !strings.HasPrefix(jobOwner, ResolverOwner) {
			return fmt.Errorf("%w: job %s is held by an operator command: %s; start again once it is done", ErrFenced, l.job, Holder(ctx, l.ForKey(l.job)))
		}
		if f.cfg.Cluster && layout == m {
			// On Galera the lock is this node's alone: a command holding the job from another
			// node shows as a live lease on the job's own key, recorded by that node. (Under this
			// layout only an operator command or a resolver holds that key; another layout's
			// process is refused below, by the layout.)
			h, err := holderOf(ctx, tx, l.job, "")
			if err != nil {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
			if h.sessions.Node != f.node && !strings.HasPrefix(h.owner, ResolverOwner) {
				switch f.clocks.judge(l.job, h) {
				case leaseLive:
					return fmt.Errorf("%w: job %s is held by an operator command on another Galera node: owner %s (epoch %d) renews its lease; start again once it is done",
						ErrFenced, l.job, h.owner, h.epoch)
				case leaseUnsure:
					return &unsureError{keys: []string{l.job}}
				}
			}
		}
	}
	return nil
}

// moveLayout records layout m when the job runs as another (layout), once no process of the old
// layout is up; an operator command only checks, and between instances and a group only relay
// membership switch moves it.
func (f *Fence) moveLayout(ctx context.Context, tx *sql.Tx, l *Ledger, m, layout int) error {
	if layout != m {
		// A partition must never have two owners: no instance of the last layout may still run.
		// Claims queue on the job row, so an instance holding its lock but not yet claimed (its
		// owner row does not name its connection) checks after this one, against this layout.
		up, err := l.up(ctx, tx, layout)
		if err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		var unsure []string
		if f.cfg.Cluster {
			remote, u, err := f.remoteUp(ctx, tx, l, m)
			if err != nil {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
			up, unsure = append(up, remote...), u
		}
		for _, u := range up {
			if u.layout == m {
				continue
			}
			if f.cfg.Operator {
				return fmt.Errorf("%w: job %s runs as %s (%s is up); stop them all first", ErrFenced, l.job, layoutName(u.layout), u.key)
			}
			return fmt.Errorf("%w: job %s runs as %s (%s is up); stop them all before running it as %s",
				ErrFenced, l.job, layoutName(u.layout), u.key, layoutName(m))
		}
		if len(unsure) > 0 {
			return &unsureError{keys: unsure}
		}
		// Operator commands and the resolver act within the recorded layout; only relay run moves it,
		// and between instances and a group only after `relay membership switch` recorded it.
		if !f.cfg.Operator {
			if (layout == LayoutGroup) != (m == LayoutGroup) {
				return fmt.Errorf("%w: job %s runs as %s (recorded in the ledger), this process as %s: stop every process of the job, "+
					"then run `relay membership switch` with this process's configuration (it prints its plan; --yes applies it) (docs/RUNBOOK.md, \"Switching membership\")",
					ErrLayoutSwitch, l.job, layoutName(layout), layoutName(m))
			}
		}
		// Before the layout moves: the job's own row is a process's too (a single instance's).
		if err := l.fenceOthers(ctx, tx, m); err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		if !f.cfg.Operator {
			if _, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET layout = ? WHERE job = ?`, m, l.job); err != nil {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
		}
	}
	return nil
}

// bump takes the next owner epoch of l.key for owner, with its owner row and lease, and returns
// it and when the lease was asked for.
func (f *Fence) bump(ctx context.Context, tx *sql.Tx, l *Ledger, owner string, m, layout int) (int64, time.Time, error) {
	own := m
	if f.cfg.Operator && l.key == l.job {
		own = layout // the job row itself: an operator command keeps the recorded layout
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_jobs (job, owner_epoch, owner, acquired_at, layout, conn_id)
		VALUES (?, 1, ?, UTC_TIMESTAMP(6), ?, CONNECTION_ID())
		ON DUPLICATE KEY UPDATE owner_epoch = owner_epoch + 1, owner = VALUES(owner), acquired_at = VALUES(acquired_at),
			layout = VALUES(layout), conn_id = VALUES(conn_id)`,
		l.key, owner, own); err != nil {
		return 0, time.Time{}, fmt.Errorf("fence %s: bump epoch: %w", l.key, err)
	}
	// The epoch is the fence's only once committed: a claim that fails certification and is then
	// refused must not release (clear the sessions of) the winner's lease at that epoch.
	var epoch int64
	if err := tx.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ?`, l.key).Scan(&epoch); err != nil {
		return 0, time.Time{}, fmt.Errorf("fence %s: read epoch: %w", l.key, err)
	}
	if err := l.claimOwner(ctx, tx, epoch); err != nil {
		return 0, time.Time{}, fmt.Errorf("fence %s: %w", l.key, err)
	}
	sent := time.Now()
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_leases (job, owner_epoch, owner, conn_id, lease_until, sessions)
		VALUES (?, ?, ?, CONNECTION_ID(), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?)
		ON DUPLICATE KEY UPDATE owner_epoch = VALUES(owner_epoch), owner = VALUES(owner), conn_id = VALUES(conn_id),
			lease_until = VALUES(lease_until), sessions = VALUES(sessions)`,
		l.key, epoch, owner, f.cfg.EffectiveLease().Microseconds(), f.sessions()); err != nil {
		return 0, time.Time{}, fmt.Errorf("fence %s: lease: %w", l.key, err)
	}
	return epoch, sent, nil
}

// countClaim writes the job's relay_claims row, in a claim's (or a membership switch's) transaction.
func (l *Ledger) countClaim(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO relay_claims (job, claims) VALUES (?, 1) ON DUPLICATE KEY UPDATE claims = claims + 1`, l.job)
	return err
}

// fenceOthers moves the owner epochs of the job's other processes that claimed under another
// layout than m, as a membership switch does, once none of them is up. One frozen past its lease
// on another Galera node holds a lock no check here can see; when it wakes, its lease renewal and
// its next decision are conditional on an epoch that is gone (and on a cluster they are written
// rows, certified against this claim), so it stands down instead of deciding beside this layout.
func (l *Ledger) fenceOthers(ctx context.Context, tx *sql.Tx, m int) error {
	rows, err := tx.QueryContext(ctx, `SELECT job FROM relay_jobs WHERE (job = ? OR job LIKE ?) AND job <> ? AND layout <> ?`,
		l.job, likePrefix(l.job+"/"), l.key, m)
	if err != nil {
		return err
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		for _, q := range []string{
			`UPDATE relay_jobs SET owner_epoch = owner_epoch + 1 WHERE job = ?`,
			`UPDATE relay_leases SET owner_epoch = owner_epoch + 1 WHERE job = ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, k); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE relay_owners SET owner_epoch = owner_epoch + 1, written_at = UTC_TIMESTAMP(6) WHERE job = ? AND scope = ?`,
			l.job, k); err != nil {
			return err
		}
	}
	return nil
}

// remoteUp lists the processes of the job of another layout than m (operator commands and
// resolvers too) that hold their fence from another Galera node: GET_LOCK is node-local, so up
// cannot see them; their lease, recorded by their node, can. A process killed there a moment ago
// counts until its lease is over: from here it cannot be told from one that still decides. The
// keys of leases not judged yet (clocks.go) are returned apart: the claim cannot go on before
// they are (claimRow watches them and claims again).
func (f *Fence) remoteUp(ctx context.Context, tx *sql.Tx, l *Ledger, m int) (up []upProcess, unsure []string, err error) {
	keys, err := l.liveLeases(ctx, tx, f.node)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		if k == l.key {
			continue // this fence's own key: elsewhere, below, decides on it
		}
		h, err := holderOf(ctx, tx, k, "")
		if err != nil {
			return nil, nil, err
		}
		if h.layout == m {
			continue // a process of the layout this claim records does not stop it
		}
		s := f.clocks.judge(k, h)
		switch {
		case !f.remote(h, s):
		case s == leaseUnsure:
			unsure = append(unsure, k)
		default:
			up = append(up, upProcess{key: k + " (a live lease this node did not record)", layout: h.layout})
		}
	}
	return up, unsure, nil
}

// layoutName says how a job runs under layout, for messages.
func layoutName(layout int) string {
	if layout == LayoutGroup {
		return "a consumer group (membership group)"
	}
	return fmt.Sprintf("%d instances", layout)
}

// upProcess is a process of the job that holds its fence now.
type upProcess struct {
	key    string
	layout int // the layout it claimed under
}

// up lists the processes of layout (other than this key) that hold their fence now: the lock held
// by the session their claim recorded. Claims queue on the job row, so a process holding its lock
// but not yet claimed (its row does not name its connection) checks after the caller, against the
// layout the caller leaves.
func (l *Ledger) up(ctx context.Context, tx *sql.Tx, layout int) ([]upProcess, error) {
	keys, err := l.siblings(ctx, tx, layout)
	if err != nil {
		return nil, err
	}
	var out []upProcess
	for _, k := range keys {
		holder, err := lockHolder(ctx, tx, k)
		if err != nil {
			return nil, err
		}
		var claimedBy int64
		var claimedLayout int
		err = tx.QueryRowContext(ctx, `SELECT conn_id, layout FROM relay_jobs WHERE job = ?`, k).Scan(&claimedBy, &claimedLayout)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		if holder.Valid && err == nil && holder.Int64 == claimedBy {
			out = append(out, upProcess{key: k, layout: claimedLayout})
		}
	}
	return out, nil
}
