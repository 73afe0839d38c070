// Group members: who the ledger says runs a job run as a group, and which partitions each holds.
//
// Invariant: reads only, and none of them locking (as inspect.go): listing the members never
// delays a take, a decision or a claim. Every partition's owner row is reported, whether or not
// its member still runs, so a partition nobody live holds is visible.

package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/partition"
)

// PartitionOwner is one partition's owner row (relay_partition_owners).
type PartitionOwner struct {
	Topic      string          `json:"topic"`
	Partition  int32           `json:"partition"`
	OwnerEpoch partition.Epoch `json:"owner_epoch"`
	Member     string          `json:"member"`    // the key of the member that took it last
	Decisions  int64           `json:"decisions"` // decisions written under the current owner epoch and the ones before
	TakenAt    time.Time       `json:"taken_at"`
	WrittenAt  time.Time       `json:"written_at"` // the last decision (a take leaves it; when none, the row's creation)
}

// MemberCheckpoint is the newest checkpoint a member decided: its relay_checkpoints row (XA
// mode), else the newest offset row it wrote that no later owner overwrote (held mode).
type MemberCheckpoint struct {
	ID        int64     `json:"id"`
	DecidedAt time.Time `json:"decided_at"`
}

// Member is one member of a job run as a group, as its relay_jobs row, its lock and its lease say.
type Member struct {
	Key        string    `json:"key"` // MemberKey(job, id)
	ID         string    `json:"id"`
	Owner      string    `json:"owner"` // the process that took its fence last (host, pid)
	Epoch      int64     `json:"owner_epoch"`
	AcquiredAt time.Time `json:"acquired_at"`
	// Held: a server session holds the member's lock now (a process of it runs).
	Held bool `json:"held"`
	// Lease is the lease of its current owner epoch (nil: none, as for a fence taken by an
	// operator command). It runs past a released or dead owner until it expires.
	Lease      *LeaseRow         `json:"lease"`
	Partitions []PartitionOwner  `json:"partitions"` // the owner rows naming it, in (topic, partition) order
	Last       *MemberCheckpoint `json:"last_checkpoint"`
}

// Stale reports a member that is gone for good: nobody holds its lock and its lease ran out (or
// it never had one). Every start of a member process leaves one such key behind when it ends.
func (m Member) Stale() bool { return !m.Held && (m.Lease == nil || m.Lease.Remaining <= 0) }

// Group is the ledger's view of a job run as a group.
type Group struct {
	Members    []Member         // every member the ledger has seen, by key
	Partitions []PartitionOwner // every partition's owner row, in (topic, partition) order
}

// Unowned are the partitions whose last owner does not hold its lock now: nobody reads them
// until the consumer group hands them to a live member, which takes them.
func (g Group) Unowned() []PartitionOwner {
	held := map[string]bool{}
	for _, m := range g.Members {
		held[m.Key] = m.Held
	}
	out := []PartitionOwner{}
	for _, p := range g.Partitions {
		if !held[p.Member] {
			out = append(out, p)
		}
	}
	return out
}

// Members reads the job's group: its members (relay_jobs keys <job>/g/...), each with its lock,
// its lease, the partitions it holds and its last checkpoint, and every partition's owner row.
func (l *Ledger) Members(ctx context.Context) (Group, error) {
	g := Group{Members: []Member{}}
	keys, err := l.memberKeys(ctx, l.db)
	if err != nil {
		return g, fmt.Errorf("group members: %w", err)
	}
	idx := map[string]int{}
	for _, key := range keys {
		h, err := readHolder(ctx, l.ForKey(key))
		if err != nil {
			return g, fmt.Errorf("member %s: %w", key, err)
		}
		m := Member{Key: key, ID: strings.TrimPrefix(key, MemberKey(l.job, "")), Owner: h.owner, Epoch: h.epoch, AcquiredAt: h.acquired,
			Held: h.holder.Valid, Partitions: []PartitionOwner{}}
		if h.lease.Valid {
			m.Lease = &LeaseRow{Owner: h.owner, Epoch: h.epoch, Until: h.lease.Time, Remaining: h.remaining, Readyz: h.sessions.Readyz}
		}
		idx[key] = len(g.Members)
		g.Members = append(g.Members, m)
	}
	if g.Partitions, err = l.partitionOwners(ctx); err != nil {
		return g, err
	}
	for _, p := range g.Partitions {
		if i, ok := idx[p.Member]; ok {
			g.Members[i].Partitions = append(g.Members[i].Partitions, p)
		}
	}
	last, err := l.memberCheckpoints(ctx)
	if err != nil {
		return g, err
	}
	for i := range g.Members {
		if c, ok := last[g.Members[i].Key]; ok {
			g.Members[i].Last = &c
		}
	}
	return g, nil
}

// memberKeys are the keys of every member of the job the ledger has seen, in order, read through q
// (a transaction of the caller's, or the pool).
func (l *Ledger) memberKeys(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT job FROM relay_jobs WHERE job LIKE ? ORDER BY job`, likePrefix(MemberKey(l.job, "")))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// partitionOwners reads every owner row of the job, in (topic, partition) order.
func (l *Ledger) partitionOwners(ctx context.Context) ([]PartitionOwner, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT topic, kpartition, owner_epoch, member, decisions, taken_at, written_at
		FROM relay_partition_owners WHERE job = ? ORDER BY topic, kpartition`, l.job)
	if err != nil {
		return nil, fmt.Errorf("partition owners: %w", err)
	}
	defer rows.Close()
	out := []PartitionOwner{}
	for rows.Next() {
		var p PartitionOwner
		if err := rows.Scan(&p.Topic, &p.Partition, &p.OwnerEpoch, &p.Member, &p.Decisions, &p.TakenAt, &p.WrittenAt); err != nil {
			return nil, fmt.Errorf("partition owners: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// memberCheckpoints is each member key's newest checkpoint: its newest decision row, or (held
// mode, which writes none) its newest offset row.
func (l *Ledger) memberCheckpoints(ctx context.Context) (map[string]MemberCheckpoint, error) {
	out := map[string]MemberCheckpoint{}
	like := likePrefix(MemberKey(l.job, ""))
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`SELECT c.instance, c.checkpoint_id, c.decided_at FROM relay_checkpoints c
			JOIN (SELECT instance, MAX(checkpoint_id) AS id FROM relay_checkpoints WHERE job = ? AND instance LIKE ? GROUP BY instance) n
			ON c.checkpoint_id = n.id WHERE c.job = ?`, []any{l.job, like, l.job}},
		{`SELECT owner_key, MAX(checkpoint_id), MAX(updated_at) FROM relay_offsets WHERE job = ? AND owner_key LIKE ? AND checkpoint_id > 0
			GROUP BY owner_key`, []any{l.job, like}},
	} {
		rows, err := l.db.QueryContext(ctx, q.sql, q.args...)
		if err != nil {
			return nil, fmt.Errorf("members' checkpoints: %w", err)
		}
		for rows.Next() {
			var key string
			var c MemberCheckpoint
			if err := rows.Scan(&key, &c.ID, &c.DecidedAt); err != nil {
				rows.Close()
				return nil, fmt.Errorf("members' checkpoints: %w", err)
			}
			if _, ok := out[key]; !ok {
				out[key] = c
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("members' checkpoints: %w", err)
		}
	}
	return out, nil
}
