// Switching a job between instances (i/M) and a consumer group: an operator's step.
//
// Invariant: the job's recorded layout moves between instances and group only here, only while no
// process of the job holds its fence (checked under the job row's lock, which every claim takes
// first), so a partition never has an owner under each layout at once. Offsets are per partition
// in either layout: each partition resumes where its last owner stopped.

package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// LayoutPlan is what switching the job's layout finds and does.
type LayoutPlan struct {
	Job        string   `json:"job"`
	From       string   `json:"from"` // "" for a job that never ran
	To         string   `json:"to"`
	Up         []string `json:"running"`    // processes holding their fence now: the switch waits for them to stop
	Partitions int      `json:"partitions"` // partitions with a committed offset, each resumed where it stopped
	Applied    bool     `json:"applied"`
}

// SwitchLayout records layout to as the job's (LayoutGroup, or a number of instances) when no
// process of the job holds its fence; with apply false it only reads what it would do. A layout
// the job has already is no change.
func SwitchLayout(ctx context.Context, db *sql.DB, job string, to int, apply bool) (LayoutPlan, error) {
	l := &Ledger{db: db, job: job, key: job, layout: to}
	p := LayoutPlan{Job: job, To: layoutName(to)}
	c, err := l.settleLeases(ctx)
	if err != nil {
		return p, fmt.Errorf("layout switch: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return p, fmt.Errorf("layout switch: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var from int
	err = tx.QueryRowContext(ctx, `SELECT layout FROM relay_jobs WHERE job = ? FOR UPDATE`, job).Scan(&from)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("layout switch: %w", err)
	}
	ran := err == nil
	if ran {
		p.From = layoutName(from)
		if p.Up, err = l.upAt(ctx, tx, c, from, to); err != nil {
			return p, err
		}
	}
	if offs, _, err := l.partitionOffsets(ctx, tx, " LOCK IN SHARE MODE"); err != nil {
		return p, err
	} else {
		p.Partitions = offs.Len()
	}
	if !apply || len(p.Up) > 0 || (ran && from == to) {
		return p, nil
	}
	// The row every claim writes: a member or instance claiming on another Galera node meanwhile
	// (it found the old layout) fails certification against this switch, or this switch against it.
	if err := l.countClaim(ctx, tx); err != nil {
		return p, fmt.Errorf("layout switch: %w", err)
	}
	if ran {
		err = fenceAll(ctx, tx, job, to)
	} else {
		_, err = tx.ExecContext(ctx, `INSERT INTO relay_jobs (job, owner_epoch, owner, acquired_at, layout) VALUES (?, 0, '', UTC_TIMESTAMP(6), ?)`, job, to)
	}
	if err != nil {
		return p, fmt.Errorf("layout switch: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return p, fmt.Errorf("layout switch: %w", err)
	}
	p.Applied = true
	return p, nil
}

// upAt lists the processes up under either layout (from, to): by their lock, the job's lock, or
// a live lease another Galera node recorded.
func (l *Ledger) upAt(ctx context.Context, tx *sql.Tx, c *clocks, from, to int) (up []string, err error) {
	job := l.job
	// Any process of either layout: the old one's must stop before the switch, and the new
	// one's cannot be up yet (its claim would have been refused).
	for _, layout := range []int{from, to} {
		procs, err := l.up(ctx, tx, layout)
		if err != nil {
			return nil, fmt.Errorf("layout switch: %w", err)
		}
		for _, u := range procs {
			up = append(up, u.key)
		}
	}
	if held, err := lockHolder(ctx, tx, job); err != nil {
		return nil, fmt.Errorf("layout switch: %w", err)
	} else if held.Valid {
		up = append(up, job)
	}
	// A live lease is a process too: on a Galera cluster its lock is on another node, where
	// this one cannot see it (and a process killed a moment ago holds its lease out). Those
	// another node recorded were watched before this transaction (clocks.go); one that came
	// up since counts as running.
	keys, err := l.liveLeases(ctx, tx, c.node)
	if err != nil {
		return nil, fmt.Errorf("layout switch: %w", err)
	}
	live, err := l.running(ctx, tx, c, keys)
	if err != nil {
		return nil, fmt.Errorf("layout switch: %w", err)
	}
	for _, k := range live {
		if !slices.Contains(up, k) {
			up = append(up, k)
		}
	}
	return up, nil
}

// fenceAll fences every process of the job, of either layout, and records layout to.
func fenceAll(ctx context.Context, tx *sql.Tx, job string, to int) error {
	// Fence every process of the job, of either layout, as a takeover would: their epochs and
	// owner rows (the job's, each process's, each partition's) move, so a decision of one still
	// in flight fails on a row it must write, which a Galera cluster certifies too.
	if _, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET owner_epoch = owner_epoch + 1 WHERE job = ? OR job LIKE ?`,
		job, likePrefix(job+"/")); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE relay_owners SET owner_epoch = owner_epoch + 1, written_at = UTC_TIMESTAMP(6) WHERE job = ?`,
		job); err != nil {
		return err
	}
	// The leases move with the epochs: they are read joined on the epoch, and a renewal of an
	// old process (conditional on its epoch) now fails, so it learns its fence is gone.
	if _, err := tx.ExecContext(ctx, `UPDATE relay_leases SET owner_epoch = owner_epoch + 1 WHERE job = ? OR job LIKE ?`,
		job, likePrefix(job+"/")); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE relay_partition_owners SET owner_epoch = owner_epoch + 1, member = '', written_at = UTC_TIMESTAMP(6) WHERE job = ?`, job); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET layout = ? WHERE job = ?`, to, job)
	return err
}

// liveLeases lists the processes of the job whose lease was not released and may still run, for
// a reader through node ("" off a Galera cluster): those this node recorded, until they run out by
// its clock; those another node recorded (by that node's clock), whatever their lease_until says:
// the caller judges them (clocks.go).
func (l *Ledger) liveLeases(ctx context.Context, q querier, node string) ([]string, error) {
	if node == "" {
		return l.processes(ctx, q, `s.sessions <> '' AND s.lease_until > UTC_TIMESTAMP(6)`)
	}
	// CASE, not AND: the JSON of a released lease ('') must never be parsed (MySQL fails on it).
	return l.processes(ctx, q, `CASE WHEN s.sessions = '' THEN FALSE
		ELSE s.lease_until > UTC_TIMESTAMP(6) OR COALESCE(JSON_UNQUOTE(JSON_EXTRACT(s.sessions, '$.node')), '') <> ? END`, node)
}

// settleLeases returns the judge of leases for reads through the ledger's pool, having watched
// (outside any transaction) the job's leases that another Galera node recorded until each is
// judged: at most one lease, and only when such a lease was not released.
func (l *Ledger) settleLeases(ctx context.Context) (*clocks, error) {
	c, err := clocksOf(ctx, l.db)
	if err != nil || c.node == "" {
		return c, err
	}
	keys, err := l.liveLeases(ctx, l.db, c.node)
	if err != nil {
		return nil, err
	}
	return c, c.settle(ctx, l, keys)
}

// running lists, of keys (from liveLeases), the processes the judge c takes for running now,
// reading each through q: recorded by c's node and live by its clock, or recorded by another node
// and live or not yet judged there (a caller that must not wait settles them first).
func (l *Ledger) running(ctx context.Context, q Execer, c *clocks, keys []string) ([]string, error) {
	var out []string
	for _, k := range keys {
		h, err := holderOf(ctx, q, k, "")
		if err != nil {
			return nil, err
		}
		if c.judge(k, h) != leaseOver {
			out = append(out, k)
		}
	}
	return out, nil
}

// querier runs queries: a pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// processes lists the keys of the job's processes (the job's own and job/…) whose current lease
// (the relay_leases row of the owner epoch in relay_jobs, as s and j) meets cond.
func (l *Ledger) processes(ctx context.Context, q querier, cond string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT j.job FROM relay_jobs j
		JOIN relay_leases s ON s.job = j.job AND s.owner_epoch = j.owner_epoch
		WHERE (j.job = ? OR j.job LIKE ?) AND `+cond, append([]any{l.job, likePrefix(l.job + "/")}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
