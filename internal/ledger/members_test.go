package ledger

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// twoMembers are members a and b of a fresh job run as a group, each holding its fence.
func twoMembers(t *testing.T) (a, b *Ledger, fa, fb *Fence, ctx context.Context) {
	t.Helper()
	l, ctx := newLedger(t)
	a, b = NewMember(l.DB(), l.Job(), "a"), NewMember(l.DB(), l.Job(), "b")
	var err error
	if fa, err = Acquire(ctx, a, FenceConfig{Owner: "host-a pid 1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fa.Release)
	if fb, err = Acquire(ctx, b, FenceConfig{Owner: "host-b pid 2"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Release)
	return a, b, fa, fb, ctx
}

// fresh are partitions ps of topic, granted anew (Held 0).
func fresh(topic string, ps ...int32) []Want {
	out := make([]Want, len(ps))
	for i, p := range ps {
		out[i] = Want{Topic: topic, Partition: p}
	}
	return out
}

// Members lists every member of the job with its lock, lease, partitions and last checkpoint (a
// decision row in XA mode, an offset row in held mode); once a member stops, its partitions are
// reported unowned, and once its lease ran out it is stale.
func TestMembers(t *testing.T) {
	a, b, fa, fb, ctx := twoMembers(t)
	c := NewMember(a.DB(), a.Job(), "c")
	fc, err := Acquire(ctx, c, FenceConfig{Owner: "host-c pid 3", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Release()
	// Another job whose name this one's matches as a LIKE pattern (job_... against job-...).
	other := NewMember(a.DB(), strings.Replace(a.Job(), "_", "-", 1), "a")
	if f, err := Acquire(ctx, other, FenceConfig{Owner: "elsewhere"}); err != nil {
		t.Fatal(err)
	} else {
		defer f.Release()
	}
	ta, err := a.TakePartitions(ctx, fa.Epoch(), fresh("t", 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Decide(ctx, fa.Epoch(), ta.Claims, Checkpoint{ID: 1, Offsets: partition.Offsets{"t": {0: 5, 1: 6}}}); err != nil {
		t.Fatal(err)
	}
	tb, err := b.TakePartitions(ctx, fb.Epoch(), fresh("t", 2))
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(2); id <= 3; id++ {
		if err := b.Decide(ctx, fb.Epoch(), tb.Claims, Checkpoint{ID: id, Offsets: partition.Offsets{"t": {2: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	tc, err := c.TakePartitions(ctx, fc.Epoch(), fresh("t", 3))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := c.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteHeldOffsets(ctx, tx, fc.Epoch(), tc.Claims, 7, partition.Offsets{"t": {3: 9}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	g, err := a.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Members) != 3 {
		t.Fatalf("members %+v; want a, b, c (not the other job's)", g.Members)
	}
	want := []struct {
		id, owner string
		parts     []int32
		last      int64
	}{{"a", "host-a pid 1", []int32{0, 1}, 1}, {"b", "host-b pid 2", []int32{2}, 3}, {"c", "host-c pid 3", []int32{3}, 7}}
	for i, w := range want {
		m := g.Members[i]
		if m.ID != w.id || m.Key != MemberKey(a.Job(), w.id) || m.Owner != w.owner || !m.Held || m.Stale() || m.Lease == nil ||
			m.Lease.Remaining <= 0 || m.Epoch != 1 || m.AcquiredAt.IsZero() {
			t.Fatalf("member %d: %+v; want %s, owner %q, held, lease running, epoch 1", i, m, w.id, w.owner)
		}
		if m.Last == nil || m.Last.ID != w.last || m.Last.DecidedAt.IsZero() {
			t.Fatalf("member %s: last checkpoint %+v, want %d", w.id, m.Last, w.last)
		}
		if len(m.Partitions) != len(w.parts) {
			t.Fatalf("member %s: partitions %+v, want t/%v", w.id, m.Partitions, w.parts)
		}
		for j, p := range w.parts {
			if got := m.Partitions[j]; got.Topic != "t" || got.Partition != p || got.OwnerEpoch != 1 || got.Member != m.Key {
				t.Fatalf("member %s: partition %+v, want t/%d at epoch 1", w.id, got, p)
			}
		}
	}
	if got := g.Members[1].Partitions[0].Decisions; got != 2 {
		t.Fatalf("b's t/2: %d decisions, want 2", got)
	}
	if u := g.Unowned(); len(u) != 0 || len(g.Partitions) != 4 {
		t.Fatalf("all members live: unowned %+v of %d partitions; want none of 4", u, len(g.Partitions))
	}

	fc.Release()
	if !testenv.Poll(10*time.Second, func() bool {
		if g, err = a.Members(ctx); err != nil {
			t.Fatal(err)
		}
		return g.Members[2].Stale()
	}) {
		t.Fatalf("c released, its 1 s lease never ran out: %+v", g.Members[2])
	}
	if m := g.Members[2]; m.Held || len(m.Partitions) != 1 || g.Members[0].Stale() {
		t.Fatalf("after c stopped: c %+v, a stale %v", m, g.Members[0].Stale())
	}
	if u := g.Unowned(); len(u) != 1 || u[0].Partition != 3 || u[0].Member != c.Key() {
		t.Fatalf("after c stopped: unowned %+v, want t/3 of %s", u, c.Key())
	}
}
