// Start positions: where a partition the ledger has never seen begins, recorded before it is read.
//
// Invariant: a partition is read only from a row of relay_offsets. The first process that reads a
// partition without one records it first (checkpoint id 0, under its owner epoch), and every later
// session, process and member resumes from that row, whatever the watermarks are by then: "latest"
// is resolved once per job and partition, never again. A row, once there, is never overwritten
// here; two processes recording at once agree on the first one committed.
package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/relay-sh/relay/internal/partition"
)

// RecordStarts records where each partition of marks without an offset row starts and returns the
// ledger's offset of every partition of marks (recorded now, by a racing process, or before).
//
// The start of a topic the job has no row of yet is latest's high watermark (earliest's low one
// when latest is false); marks then should hold every partition of the topic, so that the job's
// "latest" is one moment for all of them, whichever process reads each. A partition missing in a
// topic the job already has rows of was added since the job first saw the topic: everything in it
// is new to the job, so it starts at its low watermark.
func (l *Ledger) RecordStarts(ctx context.Context, epoch int64, marks partition.Marks, latest bool) (partition.Offsets, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("record start offsets: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := checkEpoch(ctx, tx, l.key, epoch); err != nil {
		return nil, fmt.Errorf("record start offsets: %w", err)
	}
	topics := slices.Sorted(maps.Keys(marks))
	have, err := l.topicOffsets(ctx, tx, topics, "")
	if err != nil {
		return nil, err
	}
	fresh := partition.Offsets{}
	for _, t := range topics {
		for p, m := range marks[t] {
			if _, ok := have.Get(t, p); ok {
				continue
			}
			off := m[0]
			if latest && len(have[t]) == 0 {
				off = m[1]
			}
			fresh.Set(t, p, off)
		}
	}
	out := partition.Offsets{}
	for t, ps := range marks {
		for p := range ps {
			if off, ok := have.Get(t, p); ok {
				out.Set(t, p, off)
			}
		}
	}
	if fresh.Len() == 0 {
		return out, nil
	}
	// Checkpoint id 0: no checkpoint covered anything of these partitions yet. A row that exists
	// (a racing process's) stays as it is.
	if err := l.upsertOffsets(ctx, tx, 0, fresh, `next_offset = next_offset`); err != nil {
		return nil, fmt.Errorf("record start offsets: %w", err)
	}
	// Read again with a lock: a racing process's row, committed or not, won over this one's
	// (its INSERT waited for it and changed nothing), and only a locking read sees it.
	now, err := l.topicOffsets(ctx, tx, topics, " LOCK IN SHARE MODE")
	if err != nil {
		return nil, err
	}
	for t, ps := range fresh {
		for p := range ps {
			off, ok := now.Get(t, p)
			if !ok {
				return nil, fmt.Errorf("record start offsets: %s/%d has no row after its insert", t, p)
			}
			out.Set(t, p, off)
		}
	}
	// The owner row, as every decision writes it: on a Galera cluster, a process that lost the
	// job on another node fails certification here instead of recording beside the new owner.
	if err := l.stampOwner(ctx, tx, epoch); err != nil {
		return nil, fmt.Errorf("record start offsets: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("record start offsets: commit: %w", err)
	}
	return out, nil
}

// topicOffsets reads the job's offset rows of topics inside tx, the read ending with lock.
func (l *Ledger) topicOffsets(ctx context.Context, tx *sql.Tx, topics []string, lock string) (partition.Offsets, error) {
	args := []any{l.job}
	for _, t := range topics {
		args = append(args, t)
	}
	rows, err := tx.QueryContext(ctx, `SELECT topic, kpartition, next_offset FROM relay_offsets WHERE job = ? AND topic IN (?`+
		strings.Repeat(", ?", len(topics)-1)+`) ORDER BY topic, kpartition`+lock, args...)
	if err != nil {
		return nil, fmt.Errorf("record start offsets: %w", err)
	}
	defer rows.Close()
	out := partition.Offsets{}
	for rows.Next() {
		var t string
		var p int32
		var off int64
		if err := rows.Scan(&t, &p, &off); err != nil {
			return nil, fmt.Errorf("record start offsets: %w", err)
		}
		out.Set(t, p, off)
	}
	return out, rows.Err()
}
