// Package committed reads what relay's ledger says was committed, as tests and benchmarks poll it.
//
// Invariant: the ledger is read as relay writes it (relay_checkpoints' offsets JSON, held mode's
// per-partition rows) and a table relay has not created yet reads as empty, never as an error: a
// poll that starts before relay's first checkpoint sees nothing committed.
package committed

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/relay-sh/relay/internal/fault"
)

// noTable is MySQL's error for a table that does not exist.
const noTable = 1146

// States returns checkpoint id → state of every ledger row of job.
func States(ctx context.Context, db *sql.DB, job string) (map[int64]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT checkpoint_id, state FROM relay_checkpoints WHERE job = ?`, job)
	if err != nil {
		return nil, fmt.Errorf("ledger states: %w", err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, fmt.Errorf("ledger states: %w", err)
		}
		out[id] = st
	}
	return out, rows.Err()
}

// Offsets is what the ledger says is committed for topic: in XA mode the offsets of the
// newest COMMITTED checkpoint, in held mode the per-partition rows.
func Offsets(ctx context.Context, db *sql.DB, job, topic string, held bool) (map[int32]int64, error) {
	if held {
		return heldOffsets(ctx, db, job, topic)
	}
	out := map[int32]int64{}
	var offs string
	err := db.QueryRowContext(ctx, `SELECT offsets FROM relay_checkpoints WHERE job = ? AND state = 'COMMITTED'
		ORDER BY checkpoint_id DESC LIMIT 1`, job).Scan(&offs)
	if errors.Is(err, sql.ErrNoRows) || fault.IsMySQL(err, noTable) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets: %w", err)
	}
	var m map[string]map[int32]int64
	if err := json.Unmarshal([]byte(offs), &m); err != nil {
		return nil, fmt.Errorf("committed offsets: %w", err)
	}
	for p, o := range m[topic] {
		out[p] = o
	}
	return out, nil
}

// heldOffsets reads held mode's per-partition rows: relay_offsets (current ledger), else
// relay_held_offsets (before it).
func heldOffsets(ctx context.Context, db *sql.DB, job, topic string) (map[int32]int64, error) {
	out := map[int32]int64{}
	for _, table := range []string{"relay_offsets", "relay_held_offsets"} {
		rows, err := db.QueryContext(ctx, `SELECT kpartition, next_offset FROM `+table+` WHERE job = ? AND topic = ?`, job, topic)
		if fault.IsMySQL(err, noTable) {
			continue
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
	return out, nil
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
	rows, err := db.QueryContext(ctx, `SELECT checkpoint_id, offsets, records,
		CAST(UNIX_TIMESTAMP(decided_at) AS CHAR), CAST(UNIX_TIMESTAMP(committed_at) AS CHAR)
		FROM relay_checkpoints WHERE job = ? AND state = 'COMMITTED' ORDER BY checkpoint_id`, job)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	defer rows.Close()
	var out []Checkpoint
	for rows.Next() {
		var c Checkpoint
		var offs, dec, com string
		if err := rows.Scan(&c.ID, &offs, &c.Records, &dec, &com); err != nil {
			return nil, fmt.Errorf("checkpoints: %w", err)
		}
		var m map[string]map[int32]int64
		if err := json.Unmarshal([]byte(offs), &m); err != nil {
			return nil, fmt.Errorf("checkpoint %d offsets: %w", c.ID, err)
		}
		c.Offsets = m[topic]
		c.DecidedAt, c.CommittedAt = unixString(dec), unixString(com)
		out = append(out, c)
	}
	return out, rows.Err()
}

// First returns the job's first committed checkpoint with records above id after (ok
// false while there is none): one indexed row, so polling it does not slow a start being timed.
func First(ctx context.Context, db *sql.DB, job string, after int64) (id int64, at time.Time, ok bool, err error) {
	var com string
	err = db.QueryRowContext(ctx, `SELECT checkpoint_id, CAST(UNIX_TIMESTAMP(committed_at) AS CHAR) FROM relay_checkpoints
		WHERE job = ? AND checkpoint_id > ? AND state = 'COMMITTED' AND records > 0 ORDER BY checkpoint_id LIMIT 1`, job, after).Scan(&id, &com)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, time.Time{}, false, nil
	}
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("first committed checkpoint: %w", err)
	}
	return id, unixString(com), true, nil
}

// unixString parses UNIX_TIMESTAMP's decimal seconds.
func unixString(s string) time.Time {
	f, _ := strconv.ParseFloat(s, 64)
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9))
}
