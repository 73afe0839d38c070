// Inspection: read-only lookups for operator commands (relay status, txns, verify).
//
// Invariant: nothing here locks a row or a gap, so an operator polling status never delays a
// running relay's decision; the locking read that may decide an action is Verdict, and only it.

package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// OwnerRow is an instance's ownership record: who last took its fence, with which owner epoch.
type OwnerRow struct {
	Key        string    `json:"instance"` // the job, or job/i when it runs as several instances
	Owner      string    `json:"owner"`
	Epoch      int64     `json:"owner_epoch"`
	AcquiredAt time.Time `json:"acquired_at"`
}

// LeaseRow is the lease of an instance's current owner epoch, on the ledger server's clock.
type LeaseRow struct {
	Owner string
	Epoch int64
	Until time.Time
	// Remaining is how long the lease still runs, measured by the server when it was read:
	// negative when it ran out (the owner stopped renewing; a relay run may take over).
	Remaining time.Duration
	// Readyz is the /readyz URL the owner recorded ("" when it recorded none: an operator command,
	// an older relay, or a clean release).
	Readyz string
}

// Lease returns the lease of the instance's current owner epoch; nil when it has none (the
// instance never ran, or its epoch was taken by a relay older than leases).
func (l *Ledger) Lease(ctx context.Context) (*LeaseRow, error) {
	h, err := readHolder(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if !h.claimed || !h.lease.Valid {
		return nil, nil
	}
	return &LeaseRow{Owner: h.owner, Epoch: h.epoch, Until: h.lease.Time, Remaining: h.remaining, Readyz: h.sessions.Readyz}, nil
}

// NewestBlock is the newest block of checkpoint ids this instance reserved (ok false: none). An
// owner reserves a block when its session starts, so while it runs its checkpoints come from this
// block, and a branch in an older block was left by an earlier session.
func (l *Ledger) NewestBlock(ctx context.Context) (first, last int64, ok bool, err error) {
	err = l.db.QueryRowContext(ctx, `SELECT first_id, last_id FROM relay_id_blocks WHERE job = ? AND owner_key = ?
		ORDER BY first_id DESC LIMIT 1`, l.job, l.key).Scan(&first, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("id blocks: %w", err)
	}
	return first, last, true, nil
}

// Jobs lists the names of every job that ever took a fence in the ledger database db.
func Jobs(ctx context.Context, db *sql.DB) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT job FROM relay_jobs`)
	if err != nil {
		return nil, fmt.Errorf("ledger jobs: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, fmt.Errorf("ledger jobs: %w", err)
		}
		job, _, _ := strings.Cut(key, "/")
		out[job] = true
	}
	return out, rows.Err()
}

// Owner returns this instance's ownership record, or nil when no process ever took its fence.
func (l *Ledger) Owner(ctx context.Context) (*OwnerRow, error) {
	o := OwnerRow{Key: l.key}
	err := l.db.QueryRowContext(ctx, `SELECT owner, owner_epoch, acquired_at FROM relay_jobs WHERE job = ?`, l.key).
		Scan(&o.Owner, &o.Epoch, &o.AcquiredAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("job owner: %w", err)
	}
	return &o, nil
}

// Layout is how many instances the job last ran as (1 for a job that never ran).
func (l *Ledger) Layout(ctx context.Context) (int, error) {
	m := 1
	err := l.db.QueryRowContext(ctx, `SELECT layout FROM relay_jobs WHERE job = ?`, l.job).Scan(&m)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("job layout: %w", err)
	}
	return m, nil
}

// Lookup returns the rows of the given checkpoints that exist (a missing id is undecided).
func (l *Ledger) Lookup(ctx context.Context, ids []int64) (map[int64]Checkpoint, error) {
	out := map[int64]Checkpoint{}
	if len(ids) == 0 {
		return out, nil
	}
	args := []any{l.job}
	for _, id := range ids {
		args = append(args, id)
	}
	cs, err := l.checkpoints(ctx, `WHERE job = ? AND checkpoint_id IN (`+placeholders(len(ids))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("lookup checkpoints: %w", err)
	}
	for _, c := range cs {
		out[c.ID] = c
	}
	return out, nil
}

// OffsetsCommittedAt is when a partition offset of the job last committed; zero when none did.
func (l *Ledger) OffsetsCommittedAt(ctx context.Context) (time.Time, error) {
	var at sql.NullTime
	if err := l.db.QueryRowContext(ctx, `SELECT MAX(updated_at) FROM relay_offsets WHERE job = ?`, l.job).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("partition offsets: %w", err)
	}
	return at.Time, nil
}

// ServerNow is the ledger server's UTC clock: ages are measured against the clock that wrote
// decided_at, not against the operator's machine.
func ServerNow(ctx context.Context, db *sql.DB) (time.Time, error) {
	var now time.Time
	if err := db.QueryRowContext(ctx, `SELECT UTC_TIMESTAMP(6)`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("server clock: %w", err)
	}
	return now, nil
}

func placeholders(n int) string { return repeatJoin("?", n) }

// repeatJoin is n copies of s separated by commas (the VALUES of a multi-row insert).
func repeatJoin(s string, n int) string {
	return strings.TrimSuffix(strings.Repeat(s+",", n), ",")
}

// States is checkpoint id → state of every row of the job.
func (l *Ledger) States(ctx context.Context) (map[int64]State, error) {
	cs, err := l.checkpoints(ctx, `WHERE job = ?`, l.job)
	if err != nil {
		return nil, fmt.Errorf("checkpoint states: %w", err)
	}
	out := make(map[int64]State, len(cs))
	for _, c := range cs {
		out[c.ID] = c.State
	}
	return out, nil
}

// Since lists the job's rows with ids above after, oldest first, in any state.
func (l *Ledger) Since(ctx context.Context, after int64) ([]Checkpoint, error) {
	cs, err := l.checkpoints(ctx, `WHERE job = ? AND checkpoint_id > ? ORDER BY checkpoint_id`, l.job, after)
	if err != nil {
		return nil, fmt.Errorf("checkpoints since %d: %w", after, err)
	}
	return cs, nil
}

// CommittedCheckpoints lists the job's COMMITTED rows, oldest first.
func (l *Ledger) CommittedCheckpoints(ctx context.Context) ([]Checkpoint, error) {
	cs, err := l.checkpoints(ctx, `WHERE job = ? AND state = ? ORDER BY checkpoint_id`, l.job, Committed)
	if err != nil {
		return nil, fmt.Errorf("committed checkpoints: %w", err)
	}
	return cs, nil
}

// LastCommitted is the job's newest COMMITTED row (XA mode's committed offsets); nil when there is
// none.
func (l *Ledger) LastCommitted(ctx context.Context) (*Checkpoint, error) {
	cs, err := l.checkpoints(ctx, `WHERE job = ? AND state = ? ORDER BY checkpoint_id DESC LIMIT 1`, l.job, Committed)
	if err != nil {
		return nil, fmt.Errorf("last committed checkpoint: %w", err)
	}
	if len(cs) == 0 {
		return nil, nil
	}
	return &cs[0], nil
}

// FirstCommittedAfter is the job's first COMMITTED row with records and an id above after; nil
// when there is none. One indexed row: polling it does not slow a start being timed.
func (l *Ledger) FirstCommittedAfter(ctx context.Context, after int64) (*Checkpoint, error) {
	cs, err := l.checkpoints(ctx, `WHERE job = ? AND checkpoint_id > ? AND state = ? AND records > 0
		ORDER BY checkpoint_id LIMIT 1`, l.job, after, Committed)
	if err != nil {
		return nil, fmt.Errorf("first committed checkpoint: %w", err)
	}
	if len(cs) == 0 {
		return nil, nil
	}
	return &cs[0], nil
}
