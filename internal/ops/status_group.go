// Status of a job run as a consumer group: its members as the ledger records them, and the group
// as Kafka describes it. Invariant: reads only (the ledger's non-locking reads, Kafka's
// DescribeConsumerGroups): it joins no group and takes no partition; every member still running
// (or within its lease) is listed, stale ones only as a count and the newest few, and every
// partition whose member does not hold its lock is listed as unowned, however many members left.

package ops

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// GroupStatus is the job's group: the ledger's members and Kafka's view of the consumer group.
type GroupStatus struct {
	GroupID string `json:"group_id"` // kafka.group_id
	// State is Kafka's state of the consumer group (Stable, PreparingRebalance,
	// CompletingRebalance, Empty, Dead, Unknown); KafkaMembers the members Kafka counts in it and
	// Assignor its partition assignor. KafkaError says why they are missing (Kafka did not answer).
	State        string `json:"state"`
	KafkaMembers *int   `json:"kafka_members"`
	Assignor     string `json:"assignor"`
	KafkaError   string `json:"kafka_error,omitempty"`
	// Members are those whose lock is held or whose lease still runs (a member restarting, or one
	// that just stopped), by id.
	Members []GroupMember `json:"members"`
	// Stale are members gone for good (lock free, lease run out) whose lease and owner rows are
	// still there: one is left behind by every start of a member process, so only the newest
	// staleShown are listed; StaleCount counts all, StaleOldestSeconds is how long ago the
	// oldest one's lease ran out (null: none). A live member's resolver deletes their rows
	// ForgetMembersAfter (job.forget_members_after) after that; relay membership forget at once.
	Stale              []GroupMember `json:"stale"`
	StaleCount         int           `json:"stale_count"`
	StaleOldestSeconds *float64      `json:"stale_oldest_seconds"`
	ForgetMembersAfter string        `json:"forget_members_after"`
	// ForgottenCount counts the stopped members whose rows were deleted: only their relay_jobs
	// row is left, keeping the member id's owner epoch.
	ForgottenCount int `json:"forgotten_count"`
	// Unowned are the partitions whose last owner does not hold its lock now: nobody reads them
	// until the group hands them to a live member. Lag as in Partitions.
	Unowned []MemberPartition `json:"unowned"`
}

// GroupMember is one member of the group, as the ledger records it.
type GroupMember struct {
	ID   string `json:"id"`
	Key  string `json:"key"`  // its ledger key, <job>/g/<id>: its lock, lease and owner row
	Host string `json:"host"` // the process that took its fence last (host, pid)
	Live bool   `json:"live"` // its lock is held now
	// Ready is the answer of its /readyz (recorded with its lease; true: 200), asked while it is
	// live: null when not asked or no answer, with Readiness saying why.
	Ready      *bool     `json:"ready"`
	Readiness  string    `json:"readiness"`
	ReadyzURL  string    `json:"readyz_url"`
	OwnerEpoch int64     `json:"owner_epoch"`
	AcquiredAt time.Time `json:"acquired_at"`
	// LeaseRemainingSeconds is how long its lease still runs (0 once expired; null: it has none);
	// StoppedSeconds how long ago it ran out, for a member that does not run (null otherwise).
	LeaseRemainingSeconds *float64          `json:"lease_remaining_seconds"`
	StoppedSeconds        *float64          `json:"stopped_seconds"`
	Partitions            []MemberPartition `json:"partitions"`
	LastCheckpoint        *MemberCheckpoint `json:"last_checkpoint"` // null: it never decided one
	// Lag is the sum of its partitions' lag (null when none of them has one).
	Lag *int64 `json:"lag"`
}

// MemberPartition is a partition's owner row with the partition's lag.
type MemberPartition struct {
	ledger.PartitionOwner
	Lag *int64 `json:"lag"`
}

// MemberCheckpoint is a member's newest checkpoint, aged on the report's clock.
type MemberCheckpoint struct {
	ledger.MemberCheckpoint
	AgeSeconds float64 `json:"age_seconds"`
}

// staleShown is how many stale members status lists (the newest first).
const staleShown = 5

// group gathers the group's status; lags are the report's partitions, for each member's lag.
func (e *Env) group(ctx context.Context, lags []PartitionLag) (*GroupStatus, error) {
	g, err := e.Ledger.Members(ctx)
	if err != nil {
		return nil, err
	}
	lagOf := partition.Offsets{}
	for _, p := range lags {
		if p.Lag != nil {
			lagOf.Set(p.Topic, p.Partition, *p.Lag)
		}
	}
	withLag := func(ps []ledger.PartitionOwner) ([]MemberPartition, *int64) {
		out := make([]MemberPartition, 0, len(ps))
		var sum *int64
		for _, p := range ps {
			mp := MemberPartition{PartitionOwner: p}
			if lag, ok := lagOf.Get(p.Topic, p.Partition); ok {
				if sum == nil {
					sum = new(int64)
				}
				*sum += lag
				mp.Lag = &lag
			}
			out = append(out, mp)
		}
		return out, sum
	}
	s := &GroupStatus{GroupID: e.Config.Kafka.GroupID, Members: []GroupMember{}, Stale: []GroupMember{},
		ForgetMembersAfter: e.Config.Job.ForgetMembersAfter.String()}
	for _, m := range g.Members {
		gm := GroupMember{ID: m.ID, Key: m.Key, Host: m.Owner, Live: m.Held, OwnerEpoch: m.Epoch, AcquiredAt: m.AcquiredAt}
		if m.Lease != nil {
			left := max(m.Lease.Remaining.Seconds(), 0)
			gm.LeaseRemainingSeconds = &left
			if !m.Held && left == 0 {
				stopped := -m.Lease.Remaining.Seconds()
				gm.StoppedSeconds = &stopped
				if s.StaleOldestSeconds == nil || stopped > *s.StaleOldestSeconds {
					s.StaleOldestSeconds = &stopped
				}
			}
			if m.Held {
				gm.ReadyzURL = localReadyz(m.Lease.Readyz)
			}
		}
		switch {
		case !m.Held:
			gm.Readiness = "not running"
		case gm.ReadyzURL == "":
			gm.Readiness = "not asked: it recorded no /readyz address"
		default:
			gm.Ready, gm.Readiness = askReadyz(ctx, gm.ReadyzURL)
		}
		gm.Partitions, gm.Lag = withLag(m.Partitions)
		if m.Last != nil {
			gm.LastCheckpoint = &MemberCheckpoint{MemberCheckpoint: *m.Last}
		}
		switch {
		case m.Stale() && m.Lease == nil:
			s.ForgottenCount++
		case m.Stale():
			s.Stale = append(s.Stale, gm)
		default:
			s.Members = append(s.Members, gm)
		}
	}
	s.StaleCount = len(s.Stale)
	slices.SortStableFunc(s.Stale, func(a, b GroupMember) int { return b.AcquiredAt.Compare(a.AcquiredAt) })
	s.Stale = s.Stale[:min(len(s.Stale), staleShown)]
	s.Unowned, _ = withLag(g.Unowned())
	e.describeGroup(ctx, s)
	return s, nil
}

// describeGroup fills in Kafka's view of the consumer group; a Kafka that does not answer leaves
// it unknown (KafkaError), not the whole status.
func (e *Env) describeGroup(ctx context.Context, s *GroupStatus) {
	s.State = kafka.ConsumerGroupStateUnknown.String()
	fail := func(err error) { s.KafkaError = fmt.Sprintf("describe consumer group %s: %v", s.GroupID, err) }
	c, err := e.consumer()
	if err != nil {
		fail(err)
		return
	}
	defer c.Close()
	a, err := kafka.NewAdminClientFromConsumer(c.Kafka())
	if err != nil {
		fail(err)
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := a.DescribeConsumerGroups(ctx, []string{s.GroupID})
	if err == nil && len(res.ConsumerGroupDescriptions) != 1 {
		err = fmt.Errorf("%d descriptions", len(res.ConsumerGroupDescriptions))
	}
	if err != nil {
		fail(err)
		return
	}
	d := res.ConsumerGroupDescriptions[0]
	if d.Error.Code() != kafka.ErrNoError {
		fail(d.Error)
		return
	}
	n := len(d.Members)
	s.State, s.KafkaMembers, s.Assignor = d.State.String(), &n, d.PartitionAssignor
}

// withAges sets the members' checkpoint ages against the report's clock.
func (s *GroupStatus) withAges(now time.Time) {
	for _, ms := range [][]GroupMember{s.Members, s.Stale} {
		for i := range ms {
			if c := ms[i].LastCheckpoint; c != nil {
				c.AgeSeconds = ageSeconds(now, c.DecidedAt)
			}
		}
	}
}
