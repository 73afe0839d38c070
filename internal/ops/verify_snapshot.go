// Verify's read of MySQL. Invariant: the tables, dead letters and offsets are read in one consistent
// snapshot taken between two equal reads of the partitions' offset rows (in XA mode with no
// checkpoint COMMITTING), so the tables hold exactly what those offsets cover, even while relay runs.

package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/spec"
)

// snapshot is MySQL as of the job's last commit: every aggregate table and the job's dead-letter
// and append-sink rows within the ranges that commit covers.
type snapshot struct {
	checkpoint int64
	ranges     []Range
	notes      []string
	tables     [][]spec.Row // by aggregate, sorted by key
	dlq        []BadRecord
	detail     *DetailDiff // Rows and Duplicates; Expected comes from the recount
}

var snapshotRetry = fault.Policy{Attempts: 10, Initial: 200 * time.Millisecond, Max: 2 * time.Second}

var errNoCheckpoint = errors.New("the job has no decided checkpoint: nothing was committed to verify")

// snapshot reads MySQL as of the job's last commit, the ranges starting at begin.
func (e *Env) snapshot(ctx context.Context, plan *spec.Plan, begin partition.Offsets) (*snapshot, error) {
	var s *snapshot
	err := fault.Do(ctx, snapshotRetry, func(ctx context.Context) error {
		var err error
		s, err = e.trySnapshot(ctx, plan, begin)
		return err
	}, nil)
	return s, err
}

// resumePoint is the job's last commit: the newest checkpoint id among the partitions' offset rows,
// and those offsets. Each row commits with what it covers: with the data in held mode, with the
// decision in XA mode, whose branches commit after it, hence no row may be COMMITTING.
func (e *Env) resumePoint(ctx context.Context) (int64, partition.Offsets, error) {
	led := e.Ledger
	offs, id, err := led.PartitionOffsets(ctx)
	if err != nil {
		return 0, nil, err
	}
	if id == 0 {
		return 0, nil, errNoCheckpoint
	}
	if e.Config.Mode == commit.ModeHeld {
		return id, offs, nil
	}
	committing, err := led.Committing(ctx)
	if err != nil {
		return 0, nil, err
	}
	if len(committing) > 0 {
		// Retried: a running relay finishes within a checkpoint; a stopped one left branches in doubt.
		return 0, nil, fault.Transient(fmt.Errorf("checkpoint %d is still COMMITTING (branches %s): let relay recover it, or resolve them, then verify again",
			committing[0].ID, strings.Join(committing[0].Tags, ",")))
	}
	return id, offs, nil
}

// trySnapshot takes the snapshot between two reads of the resume point; when both agree, no commit
// happened in between, so the snapshot holds exactly what that resume point covers.
func (e *Env) trySnapshot(ctx context.Context, plan *spec.Plan, begin partition.Offsets) (*snapshot, error) {
	id, offs, err := e.resumePoint(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := e.Sink.Conn(ctx)
	if err != nil {
		return nil, err
	}
	// A read-only snapshot transaction: on any doubt the connection is discarded, never pooled open.
	ok := false
	defer func() {
		if ok {
			_ = conn.Close()
		} else {
			database.Discard(conn)
		}
	}()
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("verify snapshot: %w", err)
		}
	}
	id2, offs2, err := e.resumePoint(ctx)
	if err != nil {
		return nil, err
	}
	if id2 != id || !offs2.Equal(offs) {
		return nil, fault.Transient(fmt.Errorf("checkpoint %d committed while the snapshot was taken", id2))
	}
	s := &snapshot{checkpoint: id}
	s.ranges, s.notes = rangesOf(begin, offs)
	cfg := e.Config.MySQL
	if s.tables, err = readTables(ctx, conn, plan); err != nil {
		return nil, err
	}
	if s.dlq, err = readDeadLetters(ctx, conn, cfg.DLQTable, e.Ledger.Job()); err != nil {
		return nil, err
	}
	if cfg.DetailTable != "" {
		s.detail = &DetailDiff{Table: cfg.DetailTable}
		for _, rg := range s.ranges {
			var n, distinct int64
			if err := conn.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT src_offset) FROM `"+cfg.DetailTable+
				"` WHERE src_topic = ? AND src_partition = ? AND src_offset >= ? AND src_offset < ?", rg.Topic, rg.Partition, rg.From, rg.To).
				Scan(&n, &distinct); err != nil {
				return nil, fmt.Errorf("read %s: %w", cfg.DetailTable, err)
			}
			s.detail.Rows += n
			s.detail.Duplicates += n - distinct
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return nil, fmt.Errorf("verify snapshot: %w", err)
	}
	ok = true
	return s, nil
}

// rangesOf pairs each partition's first offset to recount with the offset the commit covers.
func rangesOf(begin, to partition.Offsets) ([]Range, []string) {
	var out []Range
	var notes []string
	parts := partitionsOf(begin)
	for _, t := range sortedTopics(parts) {
		for _, p := range parts[t] {
			lo, _ := begin.Get(t, p)
			hi, ok := to.Get(t, p)
			if !ok {
				// Not committed yet (a partition added since): nothing of it is in MySQL.
				hi = lo
			}
			if hi < lo {
				notes = append(notes, fmt.Sprintf("%s:%d: the committed offset %d is below the first offset to recount %d", t, p, hi, lo))
				hi = lo
			}
			out = append(out, Range{Topic: t, Partition: p, From: lo, To: hi})
		}
	}
	return out, notes
}

// readTables reads every aggregate table of plan.
func readTables(ctx context.Context, q spec.Querier, plan *spec.Plan) ([][]spec.Row, error) {
	out := make([][]spec.Row, len(plan.Tables()))
	for a := range out {
		var err error
		if out[a], err = plan.Read(ctx, q, a); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readDeadLetters(ctx context.Context, q spec.Querier, table, job string) ([]BadRecord, error) {
	rows, err := q.QueryContext(ctx, "SELECT topic, kpartition, koffset, reason FROM `"+table+"` WHERE job = ?", job)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	var out []BadRecord
	for rows.Next() {
		var b BadRecord
		if err := rows.Scan(&b.Topic, &b.Partition, &b.Offset, &b.Reason); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}
