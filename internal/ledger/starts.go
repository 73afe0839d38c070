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
// A topic whose starts this relay has not recorded yet (its first run on it: relay_start_topics
// has no row of it) starts at latest's high watermark (earliest's low one when latest is false);
// marks then should hold every partition of the topic, so that the job's "latest" is one moment
// for all of them, whichever process reads each. Once a topic's starts are recorded, a partition
// without a row was added to it since: everything in it is new to the job, so it starts at its low
// watermark, whatever latest says. (A topic a relay from before start positions read has rows but
// no relay_start_topics row: its missing partitions, those that relay had not decided yet, get the
// position latest says, as that relay gave them: the configured one at a start or a take, the
// beginning for a partition discovered while running; the topic is recorded from then on.)
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
	known, err := l.startTopics(ctx, tx, topics)
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
			if latest && !known[t] {
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
	if fresh.Len() == 0 && len(known) == len(topics) {
		return out, nil
	}
	// Checkpoint id 0: no checkpoint covered anything of these partitions yet. A row that exists
	// (a racing process's) stays as it is.
	if err := l.upsertOffsets(ctx, tx, 0, fresh, `next_offset = next_offset`); err != nil {
		return nil, fmt.Errorf("record start offsets: %w", err)
	}
	for _, t := range topics {
		if known[t] {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO relay_start_topics (job, topic, recorded_at) VALUES (?, ?, UTC_TIMESTAMP(6))
			ON DUPLICATE KEY UPDATE topic = topic`, l.job, t); err != nil {
			return nil, fmt.Errorf("record start offsets: %w", err)
		}
	}
	if fresh.Len() == 0 {
		return out, l.commitStarts(ctx, tx, epoch)
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
	return out, l.commitStarts(ctx, tx, epoch)
}

// commitStarts writes the owner row, as every decision does (on a Galera cluster a process that
// lost the job on another node fails certification here instead of recording beside the new
// owner), and commits.
func (l *Ledger) commitStarts(ctx context.Context, tx *sql.Tx, epoch int64) error {
	if err := l.stampOwner(ctx, tx, epoch); err != nil {
		return fmt.Errorf("record start offsets: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record start offsets: commit: %w", err)
	}
	return nil
}

// StartRows returns the job's offset rows that are start positions: partitions no checkpoint
// decided yet, nothing of which was counted.
func (l *Ledger) StartRows(ctx context.Context) (partition.Offsets, error) {
	offs, err := readOffsets(l.db.QueryContext(ctx, `SELECT topic, kpartition, next_offset FROM relay_offsets WHERE job = ? AND checkpoint_id = 0`, l.job))
	if err != nil {
		return nil, fmt.Errorf("start offsets: %w", err)
	}
	return offs, nil
}

// readOffsets reads rows of (topic, partition, offset).
func readOffsets(rows *sql.Rows, err error) (partition.Offsets, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := partition.Offsets{}
	for rows.Next() {
		var t string
		var p int32
		var off int64
		if err := rows.Scan(&t, &p, &off); err != nil {
			return nil, err
		}
		out.Set(t, p, off)
	}
	return out, rows.Err()
}

// startTopicsTable names the topics whose start positions were recorded (RecordStarts): a
// partition of one that has no offset row was added to the topic since.
const startTopicsTable = `CREATE TABLE IF NOT EXISTS relay_start_topics (
	job VARCHAR(64) NOT NULL,
	topic VARCHAR(249) NOT NULL,
	recorded_at DATETIME(6) NOT NULL,
	PRIMARY KEY (job, topic)
) ENGINE=InnoDB`

// startTopics reads which of topics have their starts recorded, inside tx.
func (l *Ledger) startTopics(ctx context.Context, tx *sql.Tx, topics []string) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT topic FROM relay_start_topics WHERE job = ? AND topic IN (?`+
		strings.Repeat(", ?", len(topics)-1)+`)`, append([]any{l.job}, anys(topics)...)...)
	if err != nil {
		return nil, fmt.Errorf("record start offsets: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("record start offsets: %w", err)
		}
		out[t] = true
	}
	return out, rows.Err()
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// topicOffsets reads the job's offset rows of topics inside tx, the read ending with lock.
func (l *Ledger) topicOffsets(ctx context.Context, tx *sql.Tx, topics []string, lock string) (partition.Offsets, error) {
	offs, err := readOffsets(tx.QueryContext(ctx, `SELECT topic, kpartition, next_offset FROM relay_offsets WHERE job = ? AND topic IN (?`+
		strings.Repeat(", ?", len(topics)-1)+`) ORDER BY topic, kpartition`+lock, append([]any{l.job}, anys(topics)...)...))
	if err != nil {
		return nil, fmt.Errorf("record start offsets: %w", err)
	}
	return offs, nil
}
