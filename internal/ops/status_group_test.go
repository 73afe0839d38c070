package ops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// For a job run as a group, status lists its members with their hosts, partitions at their owner
// epochs, last checkpoints and lag (the sum of their partitions'), the consumer group's state as
// Kafka describes it, the partitions whose member stopped as unowned, and of the stale members
// (one left by each process start) only the count and the newest five; also in --json.
func TestStatusGroupMembers(t *testing.T) {
	e, ctx := newEnv(t, 4, func(c *config.Config) {
		c.Membership = config.MembershipGroup
		c.Kafka.GroupID = "relay-" + c.Job.Name
	})
	topic := e.Config.Kafka.Topics[0]
	produceOrders(t, ctx, e, 200)
	// A consumer in the job's group, as a member's membership consumer: Kafka reports the group.
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.Config.Kafka.Brokers.String(), "group.id": e.Config.Kafka.GroupID,
		"partition.assignment.strategy": "cooperative-sticky"})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	hw := partition.Offsets{}
	for p := int32(0); p < 4; p++ {
		_, h, err := kc.QueryWatermarkOffsets(topic, p, 10000)
		if err != nil {
			t.Fatal(err)
		}
		hw.Set(topic, p, h)
	}
	db, job := e.Ledger.DB(), e.Ledger.Job()

	// Seven members that ran and stopped, newest last; the last one took partition 3.
	const stale = 7
	for i := 0; i < stale; i++ {
		m := ledger.NewMember(db, job, fmt.Sprintf("old%d", i))
		f, err := ledger.Acquire(ctx, m, ledger.FenceConfig{Owner: fmt.Sprintf("host-old pid %d", i), Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if i == stale-1 {
			if _, err := m.TakePartitions(ctx, f.Epoch(), []ledger.Want{{Topic: topic, Partition: 3}}); err != nil {
				t.Fatal(err)
			}
		}
		f.Release()
	}
	// A member that just stopped: its lock is free but its lease runs a minute more (a process
	// restarting, or one that left): listed, not live, not stale.
	c := ledger.NewMember(db, job, "c")
	fc, err := ledger.Acquire(ctx, c, ledger.FenceConfig{Owner: "host-c pid 1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fc.Release()
	// Two running members: a reads partitions 0 and 1, b partition 2; each decided half way. a
	// recorded where it answers /readyz, b nowhere.
	want := map[string][]int32{"a": {0, 1}, "b": {2}}
	readyz := map[string]string{"a": readyzServer(t, "ready A")}
	wantLag := map[string]int64{}
	id := int64(0)
	for _, name := range []string{"a", "b"} {
		m := ledger.NewMember(db, job, name)
		f, err := ledger.Acquire(ctx, m, ledger.FenceConfig{Owner: "host-" + name + " pid 1", Readyz: readyz[name]})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Release()
		var ws []ledger.Want
		offs := partition.Offsets{}
		for _, p := range want[name] {
			ws = append(ws, ledger.Want{Topic: topic, Partition: p})
			h, _ := hw.Get(topic, p)
			offs.Set(topic, p, h/2)
			wantLag[name] += h - h/2
		}
		taken, err := m.TakePartitions(ctx, f.Epoch(), ws)
		if err != nil {
			t.Fatal(err)
		}
		id++
		if err := m.Decide(ctx, f.Epoch(), taken.Claims, ledger.Checkpoint{ID: id, Offsets: offs}); err != nil {
			t.Fatal(err)
		}
	}
	// It joins the group now that the members have taken their partitions in the ledger.
	if err := kc.Subscribe(topic, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		kc.Poll(100)
		a, err := kc.Assignment()
		return err == nil && len(a) > 0
	}, "the test's consumer joins the group")

	var r *StatusReport
	if !testenv.Poll(15*time.Second, func() bool {
		if r, err = Status(ctx, e, ""); err != nil {
			t.Fatal(err)
		}
		return r.Group != nil && r.Group.StaleCount == stale && r.Group.State == "Stable"
	}) {
		t.Fatalf("status of the group: %+v; want %d stale members (their 1 s leases ran out), Kafka's state Stable", r.Group, stale)
	}
	g := r.Group
	if len(r.Fences) != 0 || g.GroupID != e.Config.Kafka.GroupID || g.KafkaMembers == nil || *g.KafkaMembers != 1 || g.Assignor != "cooperative-sticky" {
		t.Fatalf("group %s: fences %v, Kafka members %v, assignor %q; want no fences, 1 member, cooperative-sticky", g.GroupID, r.Fences, g.KafkaMembers, g.Assignor)
	}
	if len(g.Members) != 3 {
		t.Fatalf("members %+v; want a, b and c", g.Members)
	}
	if m := g.Members[2]; m.ID != "c" || m.Live || m.LeaseRemainingSeconds == nil || *m.LeaseRemainingSeconds <= 0 || m.LastCheckpoint != nil || m.Lag != nil ||
		m.Readiness != "not running" || m.Ready != nil {
		t.Fatalf("member c, stopped within its lease: %+v; want listed, not running (not asked), its lease running, no checkpoint, no lag", m)
	}
	for i, name := range []string{"a", "b"} {
		m := g.Members[i]
		if m.ID != name || m.Host != "host-"+name+" pid 1" || !m.Live || m.OwnerEpoch != 1 || m.LastCheckpoint == nil ||
			m.LastCheckpoint.ID != int64(i+1) || m.Lag == nil || *m.Lag != wantLag[name] || len(m.Partitions) != len(want[name]) {
			t.Fatalf("member %s: %+v (lag %s); want host-%s, live, checkpoint %d, lag %d, partitions %v", name, m, lagText(m.Lag), name, i+1, wantLag[name], want[name])
		}
		if (name == "a") != (m.Ready != nil && *m.Ready) || m.ReadyzURL != readyz[name] {
			t.Fatalf("member %s: ready %v (%s) asked at %q; want ready only for a, asked at %q", name, m.Ready, m.Readiness, m.ReadyzURL, readyz[name])
		}
		for j, p := range want[name] {
			if got := m.Partitions[j]; got.Partition != p || got.OwnerEpoch != 1 || got.Decisions != 1 || got.Lag == nil {
				t.Fatalf("member %s: partition %+v, want %d at epoch 1, one decision, a lag", name, got, p)
			}
		}
	}
	if len(g.Stale) != 5 || g.Stale[0].ID != fmt.Sprintf("old%d", stale-1) || g.Stale[4].ID != fmt.Sprintf("old%d", stale-5) {
		t.Fatalf("stale members listed: %+v; want the newest five, newest first", g.Stale)
	}
	if len(g.Unowned) != 1 || g.Unowned[0].Partition != 3 || g.Unowned[0].Member != ledger.MemberKey(job, fmt.Sprintf("old%d", stale-1)) {
		t.Fatalf("unowned %+v; want partition 3 of the last stale member", g.Unowned)
	}

	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		fmt.Sprintf("consumer group %s: Stable in Kafka, members 1, assignor cooperative-sticky", g.GroupID),
		fmt.Sprintf("a host-a pid 1 running, ready 1 %[1]s[0]@1 %[1]s[1]@1 1, ", topic),
		fmt.Sprintf("b host-b pid 1 lock held, readiness unknown (not asked: it recorded no /readyz address) 1 %s[2]@1 2, ", topic),
		fmt.Sprintf("UNOWNED partitions (their last owner does not run; the group hands them to a live member): %s[3]@1 of %s", topic, ledger.MemberKey(job, "old6")),
		"c host-c pid 1 not running (lock free; lease runs ",
		"stale members (lock free, lease run out): 7, the oldest stopped ",
		"(a live member's resolver deletes their rows 24h0m0s after that; relay membership forget now), the newest 5: old6 host-old pid 6 owner epoch 1",
	} {
		if !strings.Contains(strings.Join(strings.Fields(text.String()), " "), strings.Join(strings.Fields(line), " ")) {
			t.Errorf("status text lacks %q:\n%s", line, text.String())
		}
	}
	for _, name := range []string{"old0 ", "old1 "} {
		if strings.Contains(text.String(), name) {
			t.Errorf("status text lists %s, older than the newest five stale members:\n%s", name, text.String())
		}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Group struct {
			State   string `json:"state"`
			Members []struct {
				ID         string `json:"id"`
				Lag        int64  `json:"lag"`
				Partitions []struct {
					Partition  int32 `json:"partition"`
					OwnerEpoch int64 `json:"owner_epoch"`
				} `json:"partitions"`
				LastCheckpoint struct {
					ID int64 `json:"id"`
				} `json:"last_checkpoint"`
			} `json:"members"`
			StaleCount int `json:"stale_count"`
		} `json:"group"`
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if b := back.Group; b.State != "Stable" || b.StaleCount != stale || len(b.Members) != 3 || b.Members[0].ID != "a" ||
		len(b.Members[0].Partitions) != 2 || b.Members[0].Partitions[1].Partition != 1 || b.Members[0].Partitions[1].OwnerEpoch != 1 ||
		b.Members[1].Lag != wantLag["b"] || b.Members[1].LastCheckpoint.ID != 2 {
		t.Fatalf("status --json group: %s", js)
	}
	if g.StaleOldestSeconds == nil || *g.StaleOldestSeconds <= 0 || g.Stale[0].StoppedSeconds == nil || *g.Stale[0].StoppedSeconds > *g.StaleOldestSeconds {
		t.Fatalf("stale members' ages: oldest %v, newest %v; want the oldest at least the newest's", g.StaleOldestSeconds, g.Stale[0].StoppedSeconds)
	}

	// relay membership forget deletes the stale members' rows: status counts them as forgotten,
	// no longer as stale; c, whose lease runs, stays listed.
	if f, err := ForgetMembers(ctx, e, yes); err != nil || f.Forgotten != stale {
		t.Fatalf("forget: %+v, %v; want %d forgotten", f, err, stale)
	}
	if r, err = Status(ctx, e, ""); err != nil {
		t.Fatal(err)
	}
	if g := r.Group; g.StaleCount != 0 || g.ForgottenCount != stale || g.StaleOldestSeconds != nil || len(g.Members) != 3 {
		t.Fatalf("after forget: stale %d, forgotten %d, oldest %v, members %d; want 0, %d, none, 3", g.StaleCount, g.ForgottenCount, g.StaleOldestSeconds, len(g.Members), stale)
	}
	text.Reset()
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), fmt.Sprintf("forgotten members (rows deleted; only the relay_jobs row keeps each id's owner epoch): %d", stale)) {
		t.Errorf("status text after forget:\n%s", text.String())
	}
}

func lagText(lag *int64) string {
	if lag == nil {
		return "null"
	}
	return fmt.Sprint(*lag)
}
