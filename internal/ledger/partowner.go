// Partition ownership (membership group): which member may decide each partition.
//
// Invariants:
//   - A partition's owner epoch only grows. A member takes a partition by moving it up, and reads
//     the partition's offset in the same transaction, after the owner row's lock: a decision of the
//     previous owner is either committed before the take (and its offset read) or refused after it.
//   - Every decision writes (not only reads) the owner row of each partition whose offset it writes,
//     conditional on the epoch the member took it at, in the decision's own transaction: a member
//     that lost a partition commits neither its data nor its offsets again, on one server by the
//     row lock and on a Galera cluster by certification of the written row.
//   - A member takes a partition from another member only when the group granted it anew: taking
//     it again in a later session is conditional on nobody having taken it meanwhile.
//   - A take runs under the member's own owner epoch, as a decision does: it checks the epoch in
//     relay_jobs (locked first) and writes the member's owner row conditional on it, in the take's
//     transaction, so a member process fenced out of its key (a zombie whose key was taken over)
//     takes nothing, on one server by the row lock and on a Galera cluster by certification.
//   - The member's job row, then owner rows before offset rows in (topic, partition) order, then
//     the member's owner row (relay_owners): locked in that order by takes and decisions alike, so
//     the two never wait on each other crosswise.

package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/partition"
)

const partitionOwnersTable = `CREATE TABLE IF NOT EXISTS relay_partition_owners (
	job VARCHAR(64) NOT NULL,
	topic VARCHAR(249) NOT NULL,
	kpartition INT NOT NULL,
	owner_epoch BIGINT NOT NULL,
	member VARCHAR(64) NOT NULL,
	decisions BIGINT NOT NULL DEFAULT 0,
	taken_at DATETIME(6) NOT NULL,
	written_at DATETIME(6) NOT NULL,
	PRIMARY KEY (job, topic, kpartition)
) ENGINE=InnoDB`

// ErrPartitionTaken means another member took a partition of this decision (its owner epoch
// moved): nothing of the decision is committed. Not fatal: the member's session restarts without
// the partition, which the group has given (or is about to give) to the other member.
var ErrPartitionTaken = fault.Classed("partition_taken", "a partition of this checkpoint was taken by another member")

// Want is a partition a member is about to read. Held is the owner epoch it took the partition at
// in an earlier session; 0 means the group granted it since (Fresh): it may be taken from anyone.
type Want struct {
	Topic     string
	Partition int32
	Held      partition.Epoch
}

// Taken is the outcome of TakePartitions.
type Taken struct {
	Claims    partition.Claims  // the owner epoch of each partition taken
	Offsets   partition.Offsets // each taken partition's committed offset (absent: never decided)
	Stolen    []Want            // held partitions another member took meanwhile: not taken
	Handovers []Handover        // fresh takes of partitions a process decided before
}

// Handover is a partition taken on a fresh grant after another process (or this member's key in
// an earlier process) decided it: the takeover runs from that last decision to this member's
// first (relay_partition_takeover_seconds).
type Handover struct {
	Topic     string
	Partition int32
	From      string        // the member key that held it last (it may not have decided since its take)
	Since     time.Duration // from its last decision to the take, on the database's clock
}

// TakePartitions moves the owner epoch of every wanted partition to this member, in one
// transaction that also reads their offsets after the owner rows' locks. A held partition whose
// epoch moved is not taken (Lost): another member took it after this one, on a grant of the group
// newer than this member's. epoch is the member's own owner epoch (its fence's): once its key
// moved on, the take fails with ErrFenced and changes nothing.
func (l *Ledger) TakePartitions(ctx context.Context, epoch int64, want []Want) (Taken, error) {
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b Want) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	var out Taken
	// Members taking neighbouring new rows may deadlock on their gaps: InnoDB picks a victim,
	// which takes again.
	err := fault.Do(ctx, fault.DefaultPolicy(), func(ctx context.Context) error {
		var err error
		out, err = l.take(ctx, epoch, want)
		return err
	}, nil)
	return out, err
}

func (l *Ledger) take(ctx context.Context, epoch int64, want []Want) (Taken, error) {
	out := Taken{Claims: partition.Claims{}, Offsets: partition.Offsets{}}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return out, fmt.Errorf("take partitions: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// The member's job row first, as a decision locks it: a claim of this member's key (a takeover
	// of a zombie process) waits for the take or fences it, never both take partitions.
	if err := checkEpoch(ctx, tx, l.key, epoch); err != nil {
		return out, fmt.Errorf("take partitions: %w", err)
	}
	for _, w := range want {
		// Lock the row exclusively from the first statement (creating it at epoch 0 if new).
		if _, err := tx.ExecContext(ctx, `INSERT INTO relay_partition_owners (job, topic, kpartition, owner_epoch, member, taken_at, written_at)
			VALUES (?, ?, ?, 0, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE owner_epoch = owner_epoch`,
			l.job, w.Topic, w.Partition); err != nil {
			return out, fmt.Errorf("take %s/%d: %w", w.Topic, w.Partition, err)
		}
		// A locking read: it reads the row as committed now. A plain read would read the snapshot
		// of the transaction's first read, before another member's take of this partition that
		// committed since (both would move the epoch to the same value), or before the row existed.
		// written_at is the last decision's (a take leaves it): how long the partition went
		// undecided, measured on one clock (a Galera node's skew against the deciding node's shows
		// in it; a negative difference counts as none).
		var cur partition.Epoch
		var decisions, sinceUS int64
		var member string
		if err := tx.QueryRowContext(ctx, `SELECT owner_epoch, member, decisions, TIMESTAMPDIFF(MICROSECOND, written_at, UTC_TIMESTAMP(6))
			FROM relay_partition_owners WHERE job = ? AND topic = ? AND kpartition = ? FOR UPDATE`,
			l.job, w.Topic, w.Partition).Scan(&cur, &member, &decisions, &sinceUS); err != nil {
			return out, fmt.Errorf("take %s/%d: %w", w.Topic, w.Partition, err)
		}
		// A row naming this member was written by this process (a member key is one process's;
		// its sessions never overlap): at another epoch than held, it is this member's own take
		// whose reply was lost, not another's.
		if w.Held != 0 && member != l.key {
			out.Stolen = append(out.Stolen, w)
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE relay_partition_owners SET owner_epoch = ?, member = ?, taken_at = UTC_TIMESTAMP(6)
			WHERE job = ? AND topic = ? AND kpartition = ?`,
			cur+1, l.key, l.job, w.Topic, w.Partition); err != nil {
			return out, fmt.Errorf("take %s/%d: %w", w.Topic, w.Partition, err)
		}
		out.Claims.Set(w.Topic, w.Partition, cur+1)
		// A held partition's take continues this process's hold; a row without a member was
		// never decided by one, or a layout switch cleared it.
		if w.Held == 0 && member != "" && decisions > 0 {
			out.Handovers = append(out.Handovers, Handover{Topic: w.Topic, Partition: w.Partition, From: member,
				Since: time.Duration(max(sinceUS, 0)) * time.Microsecond})
		}
		var off int64
		err := tx.QueryRowContext(ctx, `SELECT next_offset FROM relay_offsets WHERE job = ? AND topic = ? AND kpartition = ? LOCK IN SHARE MODE`,
			l.job, w.Topic, w.Partition).Scan(&off)
		switch {
		case err == nil:
			out.Offsets.Set(w.Topic, w.Partition, off)
		case !errors.Is(err, sql.ErrNoRows):
			return out, fmt.Errorf("take %s/%d: offset: %w", w.Topic, w.Partition, err)
		}
	}
	// Last, as in a decision: on a Galera cluster the job row's lock is this node's alone, and the
	// written owner row makes a take and a claim of this member's key on another node certify
	// against each other.
	if err := l.stampOwner(ctx, tx, epoch); err != nil {
		return out, fmt.Errorf("take partitions: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return out, fmt.Errorf("take partitions: %w", fault.AtCommit(err))
	}
	return out, nil
}

// stampPartitions writes the owner row of every partition of offs, conditional on the epoch the
// member holds it at (claims), inside the caller's decision transaction and before its offset
// rows. No claims (membership instances) stamps nothing: the instance's own owner row fences it.
func (l *Ledger) stampPartitions(ctx context.Context, tx Execer, claims partition.Claims, offs partition.Offsets) error {
	if claims == nil {
		if l.Group() {
			// A member's decision always names what it took; none would write offsets unfenced.
			return fmt.Errorf("%w: a member decides without the partitions it took", ErrPartitionTaken)
		}
		return nil
	}
	var q strings.Builder
	var args []any
	n := 0
	q.WriteString(`UPDATE relay_partition_owners SET decisions = decisions + 1, written_at = UTC_TIMESTAMP(6) WHERE job = ? AND (`)
	args = append(args, l.job)
	for _, t := range slices.Sorted(maps.Keys(offs)) {
		for _, p := range slices.Sorted(maps.Keys(offs[t])) {
			e, ok := claims.Get(t, p)
			if !ok {
				return fmt.Errorf("%w: %s/%d is not held by this member", ErrPartitionTaken, t, p)
			}
			if n > 0 {
				q.WriteString(" OR ")
			}
			q.WriteString("(topic = ? AND kpartition = ? AND owner_epoch = ? AND member = ?)")
			args = append(args, t, p, e, l.key)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	q.WriteString(")")
	res, err := tx.ExecContext(ctx, q.String(), args...)
	if err != nil {
		return fmt.Errorf("partition owners: %w", err)
	}
	if got, err := res.RowsAffected(); err != nil || got != int64(n) {
		return fmt.Errorf("%w: %d of the %d partitions still held at this member's epochs", ErrPartitionTaken, got, n)
	}
	return nil
}
