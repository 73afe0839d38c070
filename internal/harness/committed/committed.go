// Package committed reads what relay's ledger says was committed, as tests and benchmarks poll it.
//
// Invariant: the ledger is read through the ledger package's own queries, as relay reads it (XA
// mode's newest COMMITTED row, held mode's per-partition rows), and a table relay has not created
// yet reads as empty, never as an error: a poll that starts before relay's first checkpoint sees
// nothing committed.
package committed

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
)

// noTable is MySQL's error for a table that does not exist.
const noTable = 1146

// States returns checkpoint id → state of every ledger row of job.
func States(ctx context.Context, db *sql.DB, job string) (map[int64]string, error) {
	states, err := ledger.New(db, job).States(ctx)
	if err != nil {
		return nil, fmt.Errorf("ledger states: %w", err)
	}
	out := make(map[int64]string, len(states))
	for id, st := range states {
		out[id] = string(st)
	}
	return out, nil
}

// Offsets is what the ledger says is committed for topic: in XA mode the offsets of the
// newest COMMITTED checkpoint, in held mode the per-partition rows.
func Offsets(ctx context.Context, db *sql.DB, job, topic string, held bool) (map[int32]int64, error) {
	if held {
		return heldOffsets(ctx, db, job, topic)
	}
	out := map[int32]int64{}
	last, err := ledger.New(db, job).LastCommitted(ctx)
	if fault.IsMySQL(err, noTable) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets: %w", err)
	}
	if last != nil {
		for p, o := range last.Offsets[topic] {
			out[p] = o
		}
	}
	return out, nil
}

// heldOffsets reads held mode's per-partition rows (the ledger's relay_offsets). A ledger of a
// relay from before that table kept them in relay_held_offsets, which the ledger package no
// longer knows: it is read here, only when relay_offsets does not exist.
func heldOffsets(ctx context.Context, db *sql.DB, job, topic string) (map[int32]int64, error) {
	out := map[int32]int64{}
	offs, _, err := ledger.New(db, job).PartitionOffsets(ctx)
	if err == nil {
		for p, o := range offs[topic] {
			out[p] = o
		}
		return out, nil
	}
	if !fault.IsMySQL(err, noTable) {
		return nil, fmt.Errorf("held offsets: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT kpartition, next_offset FROM relay_held_offsets WHERE job = ? AND topic = ?`, job, topic)
	if fault.IsMySQL(err, noTable) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("held offsets: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p int32
		var o int64
		if err := rows.Scan(&p, &o); err != nil {
			return nil, fmt.Errorf("held offsets: %w", err)
		}
		out[p] = o
	}
	return out, rows.Err()
}

// Reached reports whether got covers end on every partition.
func Reached(got, end map[int32]int64) bool {
	for p, hi := range end {
		if got[p] < hi {
			return false
		}
	}
	return true
}

// Wait polls the ledger every interval until it covers end; it returns the time of the
// first poll that saw it. alive reports whether relay still runs (a dead relay ends the wait).
func Wait(db *sql.DB, job, topic string, held bool, end map[int32]int64, every, limit time.Duration, alive func() bool) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := Offsets(ctx, db, job, topic, held)
		cancel()
		now := time.Now()
		if err == nil && Reached(got, end) {
			return now, nil
		}
		if !alive() {
			return now, fmt.Errorf("relay exited before committing the end of %s (ledger: %v, end: %v)", topic, got, end)
		}
		if now.After(deadline) {
			return now, fmt.Errorf("ledger did not reach the end of %s within %s (ledger: %v, end: %v, err: %v)", topic, limit, got, end, err)
		}
		time.Sleep(every)
	}
}

// Checkpoint is one committed ledger row, with its offsets of one topic.
type Checkpoint struct {
	ID          int64
	Offsets     map[int32]int64
	Records     int64
	DecidedAt   time.Time
	CommittedAt time.Time
}

// Checkpoints lists the job's committed checkpoints, oldest first.
func Checkpoints(ctx context.Context, db *sql.DB, job, topic string) ([]Checkpoint, error) {
	cs, err := ledger.New(db, job).CommittedCheckpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	out := make([]Checkpoint, 0, len(cs))
	for _, c := range cs {
		hc := Checkpoint{ID: c.ID, Offsets: c.Offsets[topic], Records: c.Records, DecidedAt: c.DecidedAt}
		if c.CommittedAt != nil {
			hc.CommittedAt = *c.CommittedAt
		}
		out = append(out, hc)
	}
	return out, nil
}

// First returns the job's first committed checkpoint with records above id after (ok
// false while there is none): one indexed row, so polling it does not slow a start being timed.
func First(ctx context.Context, db *sql.DB, job string, after int64) (id int64, at time.Time, ok bool, err error) {
	c, err := ledger.New(db, job).FirstCommittedAfter(ctx, after)
	if err != nil || c == nil {
		return 0, time.Time{}, false, err
	}
	if c.CommittedAt != nil {
		at = *c.CommittedAt
	}
	return c.ID, at, true, nil
}
