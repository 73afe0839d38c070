package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// owners is every owner row of l's job by "topic/partition".
func owners(ctx context.Context, t *testing.T, l *Ledger) map[string]PartitionOwner {
	t.Helper()
	rows, err := l.partitionOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]PartitionOwner{}
	for _, r := range rows {
		out[fmt.Sprintf("%s/%d", r.Topic, r.Partition)] = r
	}
	return out
}

func offsetsOf(ctx context.Context, t *testing.T, l *Ledger) partition.Offsets {
	t.Helper()
	offs, _, err := l.PartitionOffsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return offs
}

// A fresh take starts at owner epoch 1 with no offsets; another member's fresh take moves the
// epoch and reads the offset the first one decided; the first one's next decision with its old
// claims is refused and writes nothing (no checkpoint row, offsets and its other owner rows as
// they were), while a decision of the partitions it still holds goes through. XA decisions.
func TestPartitionTakenXA(t *testing.T) {
	a, b, fa, fb, ctx := twoMembers(t)
	ta, err := a.TakePartitions(ctx, fa.Epoch(), fresh("t", 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if want := (partition.Claims{"t": {0: 1, 1: 1}}); !ta.Claims.Equal(want) || len(ta.Offsets) != 0 || len(ta.Stolen) != 0 {
		t.Fatalf("fresh take: %+v; want epochs %v, no offsets, nothing lost", ta, want)
	}
	if err := a.Decide(ctx, fa.Epoch(), ta.Claims, Checkpoint{ID: 1, Offsets: partition.Offsets{"t": {0: 10, 1: 20}}}); err != nil {
		t.Fatalf("A's decision: %v", err)
	}
	tb, err := b.TakePartitions(ctx, fb.Epoch(), fresh("t", 0))
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := tb.Claims.Get("t", 0); e != 2 || !tb.Offsets.Equal(partition.Offsets{"t": {0: 10}}) {
		t.Fatalf("B's take of t/0: epochs %v offsets %v; want epoch 2 and A's offset 10", tb.Claims, tb.Offsets)
	}
	before := owners(ctx, t, a)
	err = a.Decide(ctx, fa.Epoch(), ta.Claims, Checkpoint{ID: 2, Offsets: partition.Offsets{"t": {0: 15, 1: 25}}})
	if !errors.Is(err, ErrPartitionTaken) {
		t.Fatalf("A's decision after B took t/0: %v, want ErrPartitionTaken", err)
	}
	if ok, err := a.Verdict(ctx, 2); err != nil || ok {
		t.Fatalf("refused decision: checkpoint row %v, %v; want none", ok, err)
	}
	if got := offsetsOf(ctx, t, a); !got.Equal(partition.Offsets{"t": {0: 10, 1: 20}}) {
		t.Fatalf("refused decision changed the offsets: %v", got)
	}
	if after := owners(ctx, t, a); after["t/1"] != before["t/1"] || after["t/0"] != before["t/0"] {
		t.Fatalf("refused decision changed owner rows:\nbefore %+v\nafter  %+v", before, after)
	}
	if got := owners(ctx, t, a)["t/0"]; got.Member != b.Key() || got.OwnerEpoch != 2 || got.Decisions != 1 {
		t.Fatalf("t/0's owner row: %+v; want B's at epoch 2, A's one decision", got)
	}
	if err := a.Decide(ctx, fa.Epoch(), ta.Claims, Checkpoint{ID: 3, Offsets: partition.Offsets{"t": {1: 25}}}); err != nil {
		t.Fatalf("A's decision of t/1 alone, which it still holds: %v", err)
	}
	if err := b.Decide(ctx, fb.Epoch(), tb.Claims, Checkpoint{ID: 4, Offsets: partition.Offsets{"t": {0: 12}}}); err != nil {
		t.Fatalf("B's decision of t/0: %v", err)
	}
	if got := offsetsOf(ctx, t, a); !got.Equal(partition.Offsets{"t": {0: 12, 1: 25}}) {
		t.Fatalf("offsets %v; want t/0 at B's 12, t/1 at A's 25", got)
	}
	// The group grants t/0 to A again: a decision under A's first claims (epoch 1) is still
	// refused. The epoch it was taken at decides, not the member's name.
	again, err := a.TakePartitions(ctx, fa.Epoch(), fresh("t", 0))
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := again.Claims.Get("t", 0); e != 3 || !again.Offsets.Equal(partition.Offsets{"t": {0: 12}}) {
		t.Fatalf("A's second take of t/0: %+v; want epoch 3 at B's offset 12", again)
	}
	err = a.Decide(ctx, fa.Epoch(), ta.Claims, Checkpoint{ID: 5, Offsets: partition.Offsets{"t": {0: 30}}})
	if !errors.Is(err, ErrPartitionTaken) {
		t.Fatalf("A's decision under its epoch-1 claims after taking t/0 at epoch 3: %v, want ErrPartitionTaken", err)
	}
	if got := offsetsOf(ctx, t, a); !got.Equal(partition.Offsets{"t": {0: 12, 1: 25}}) {
		t.Fatalf("refused decision changed the offsets: %v", got)
	}
}

// The same in held mode: the offsets written with the data through WriteHeldOffsets.
func TestPartitionTakenHeld(t *testing.T) {
	a, b, fa, fb, ctx := twoMembers(t)
	held := func(l *Ledger, epoch int64, claims partition.Claims, id int64, offs partition.Offsets) error {
		tx, err := l.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if err := l.WriteHeldOffsets(ctx, tx, epoch, claims, id, offs); err != nil {
			return err
		}
		return tx.Commit()
	}
	ta, err := a.TakePartitions(ctx, fa.Epoch(), fresh("h", 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := held(a, fa.Epoch(), ta.Claims, 1, partition.Offsets{"h": {0: 10, 1: 20}}); err != nil {
		t.Fatalf("A's held write: %v", err)
	}
	tb, err := b.TakePartitions(ctx, fb.Epoch(), fresh("h", 1))
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := tb.Claims.Get("h", 1); e != 2 || !tb.Offsets.Equal(partition.Offsets{"h": {1: 20}}) {
		t.Fatalf("B's take of h/1: epochs %v offsets %v; want epoch 2 and A's offset 20", tb.Claims, tb.Offsets)
	}
	before := owners(ctx, t, a)
	err = held(a, fa.Epoch(), ta.Claims, 2, partition.Offsets{"h": {0: 15, 1: 25}})
	if !errors.Is(err, ErrPartitionTaken) {
		t.Fatalf("A's held write after B took h/1: %v, want ErrPartitionTaken", err)
	}
	if got := offsetsOf(ctx, t, a); !got.Equal(partition.Offsets{"h": {0: 10, 1: 20}}) {
		t.Fatalf("refused held write changed the offsets: %v", got)
	}
	if after := owners(ctx, t, a); after["h/0"] != before["h/0"] || after["h/1"] != before["h/1"] {
		t.Fatalf("refused held write changed owner rows:\nbefore %+v\nafter  %+v", before, after)
	}
	if err := held(a, fa.Epoch(), ta.Claims, 3, partition.Offsets{"h": {0: 15}}); err != nil {
		t.Fatalf("A's held write of h/0 alone, which it still holds: %v", err)
	}
}

// Taking a held partition again (a later session of the same member) is conditional on nobody
// having taken it since: after another member took it, it is Stolen and its epoch stays; at the
// current epoch, by the member that holds it, it is taken again at the next epoch.
func TestPartitionHeldRetake(t *testing.T) {
	a, b, fa, fb, ctx := twoMembers(t)
	if _, err := a.TakePartitions(ctx, fa.Epoch(), fresh("t", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TakePartitions(ctx, fb.Epoch(), fresh("t", 0)); err != nil {
		t.Fatal(err)
	}
	again, err := a.TakePartitions(ctx, fa.Epoch(), []Want{{Topic: "t", Partition: 0, Held: 1}, {Topic: "t", Partition: 1, Held: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Stolen) != 1 || again.Stolen[0] != (Want{Topic: "t", Partition: 0, Held: 1}) {
		t.Fatalf("A's held take after B took t/0: stolen %v; want t/0 at held epoch 1", again.Stolen)
	}
	if _, ok := again.Claims.Get("t", 0); ok {
		t.Fatalf("A's held take after B took t/0 took it: %v", again.Claims)
	}
	if e, _ := again.Claims.Get("t", 1); e != 2 {
		t.Fatalf("A's held take of t/1, untouched since: epoch %d, want 2", e)
	}
	if got := owners(ctx, t, a)["t/0"]; got.Member != b.Key() || got.OwnerEpoch != 2 {
		t.Fatalf("t/0 after A's refused take: %+v; want B's at epoch 2", got)
	}
	// The current epoch, but another member's: still lost.
	if r, err := a.TakePartitions(ctx, fa.Epoch(), []Want{{Topic: "t", Partition: 0, Held: 2}}); err != nil || len(r.Stolen) != 1 {
		t.Fatalf("A's take of t/0 held at B's epoch 2: %+v, %v; want it lost", r, err)
	}
	rb, err := b.TakePartitions(ctx, fb.Epoch(), []Want{{Topic: "t", Partition: 0, Held: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := rb.Claims.Get("t", 0); e != 3 || len(rb.Stolen) != 0 {
		t.Fatalf("B's held take of t/0 at its epoch 2: %+v; want epoch 3", rb)
	}
}

// A decision must name only partitions the member holds: one whose offsets name a partition
// outside its claims is refused and writes nothing.
func TestPartitionDecisionOutsideClaims(t *testing.T) {
	a, _, fa, _, ctx := twoMembers(t)
	ta, err := a.TakePartitions(ctx, fa.Epoch(), fresh("t", 0))
	if err != nil {
		t.Fatal(err)
	}
	err = a.Decide(ctx, fa.Epoch(), ta.Claims, Checkpoint{ID: 1, Offsets: partition.Offsets{"t": {0: 5, 1: 6}}})
	if !errors.Is(err, ErrPartitionTaken) {
		t.Fatalf("decision naming t/1, not taken: %v, want ErrPartitionTaken", err)
	}
	if ok, _ := a.Verdict(ctx, 1); ok {
		t.Fatal("refused decision left its checkpoint row")
	}
	if got := offsetsOf(ctx, t, a); len(got) != 0 {
		t.Fatalf("refused decision wrote offsets %v", got)
	}
}

// Two members taking overlapping partition sets at once never both hold a partition at one epoch,
// and every take finishes (deadlock victims take again); the member whose take came last holds
// each partition, and a decision over a set succeeds exactly when its member holds all of it.
func TestPartitionTakesConcurrent(t *testing.T) {
	a, b, fa, fb, _ := twoMembers(t)
	ctx := testenv.Context(t, 4*time.Minute)
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_PARTITION_SEED", 0), 0))
	const rounds, parts = 50, 16
	members, fences := []*Ledger{a, b}, []*Fence{fa, fb}
	id := int64(0)
	for r := 0; r < rounds; r++ {
		sets := make([][]Want, 2)
		for i := range sets {
			for p := int32(0); p < parts; p++ {
				if rng.IntN(3) > 0 { // two thirds of the partitions each: they overlap
					sets[i] = append(sets[i], Want{Topic: "t", Partition: p})
				}
			}
		}
		taken := make([]Taken, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				taken[i], errs[i] = members[i].TakePartitions(ctx, fences[i].Epoch(), sets[i])
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: member %d's take: %v", r, i, err)
			}
		}
		rows := owners(ctx, t, a)
		for p := int32(0); p < parts; p++ {
			ea, okA := taken[0].Claims.Get("t", p)
			eb, okB := taken[1].Claims.Get("t", p)
			if okA && okB && ea == eb {
				t.Fatalf("round %d: both members hold t/%d at epoch %d", r, p, ea)
			}
			row, ok := rows[fmt.Sprintf("t/%d", p)]
			last := -1
			switch {
			case okA && (!okB || ea > eb):
				last = 0
			case okB:
				last = 1
			}
			if last >= 0 && (!ok || row.Member != members[last].Key() || row.OwnerEpoch != max(ea, eb)) {
				t.Fatalf("round %d: t/%d's owner row %+v; want member %s at epoch %d (takes at %d and %d)",
					r, p, row, members[last].Key(), max(ea, eb), ea, eb)
			}
		}
		for i := range members {
			holdsAll := true
			offs := partition.Offsets{}
			for _, w := range sets[i] {
				holdsAll = holdsAll && rows[fmt.Sprintf("t/%d", w.Partition)].Member == members[i].Key()
				offs.Set(w.Topic, w.Partition, int64(r))
			}
			id++
			err := members[i].Decide(ctx, fences[i].Epoch(), taken[i].Claims, Checkpoint{ID: id, Offsets: offs})
			if holdsAll != (err == nil) || (err != nil && !errors.Is(err, ErrPartitionTaken)) {
				t.Fatalf("round %d: member %d holds all of its set: %v; its decision: %v", r, i, holdsAll, err)
			}
		}
	}
}

// A decision and another member's take of its partitions, at once: either the decision commits
// first and the take reads its offsets, or the decision is refused and the take read the offsets
// before it; never a decision committed after a take that read the older offsets.
func TestPartitionDecisionRacesTake(t *testing.T) {
	a, b, fa, fb, _ := twoMembers(t)
	ctx := testenv.Context(t, 4*time.Minute)
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_PARTITION_SEED", 0), 0))
	const rounds, parts = 50, 16
	members, fences := []*Ledger{a, b}, []*Fence{fa, fb}
	all := make([]Want, parts)
	for p := range all {
		all[p] = Want{Topic: "t", Partition: int32(p)}
	}
	owner := 0
	claims, err := a.TakePartitions(ctx, fa.Epoch(), all)
	if err != nil {
		t.Fatal(err)
	}
	before, committed := int64(0), 0
	for r := 1; r <= rounds; r++ {
		x, y := owner, 1-owner
		var some []Want
		for _, w := range all {
			if rng.IntN(4) == 0 {
				some = append(some, w)
			}
		}
		if len(some) == 0 {
			some = all[rng.IntN(parts):][:1]
		}
		next := partition.Offsets{}
		for _, w := range all {
			next.Set(w.Topic, w.Partition, int64(r))
		}
		// The take starts up to 3 ms after the decision: a draw of the seed shuffling which of the
		// two reaches the owner rows first (a take alone is faster); the checks hold either way.
		jitter := time.Duration(rng.IntN(3000)) * time.Microsecond
		var decideErr, takeErr error
		var took Taken
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			decideErr = members[x].Decide(ctx, fences[x].Epoch(), claims.Claims, Checkpoint{ID: int64(r), Offsets: next})
		}()
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(jitter)
			took, takeErr = members[y].TakePartitions(ctx, fences[y].Epoch(), some)
		}()
		close(start)
		wg.Wait()
		if takeErr != nil {
			t.Fatalf("round %d: take: %v", r, takeErr)
		}
		got := offsetsOf(ctx, t, a)
		want := before
		switch {
		case decideErr == nil:
			want = int64(r)
			committed++
		case !errors.Is(decideErr, ErrPartitionTaken):
			t.Fatalf("round %d: decision: %v, want success or ErrPartitionTaken", r, decideErr)
		}
		if decided, _ := a.Verdict(ctx, int64(r)); decided != (decideErr == nil) {
			t.Fatalf("round %d: decision returned %v but its checkpoint row exists: %v", r, decideErr, decided)
		}
		rows := owners(ctx, t, a)
		for _, w := range all {
			if off, _ := got.Get(w.Topic, w.Partition); off != want {
				t.Fatalf("round %d: t/%d at offset %d, want %d (decision: %v)", r, w.Partition, off, want, decideErr)
			}
		}
		for _, w := range some {
			off, ok := took.Offsets.Get(w.Topic, w.Partition)
			if ok != (committed > 0) || off != want {
				t.Fatalf("round %d: the take read t/%d at %d (%v); the decision (%v) leaves it at %d", r, w.Partition, off, ok, decideErr, want)
			}
			e, _ := took.Claims.Get(w.Topic, w.Partition)
			if row := rows[fmt.Sprintf("t/%d", w.Partition)]; row.Member != members[y].Key() || row.OwnerEpoch != e {
				t.Fatalf("round %d: t/%d's owner row %+v; want the take's, at epoch %d", r, w.Partition, row, e)
			}
		}
		before = want
		// The taker is granted every partition for the next round.
		if claims, err = members[y].TakePartitions(ctx, fences[y].Epoch(), all); err != nil {
			t.Fatal(err)
		}
		owner = y
	}
	t.Logf("%d of %d decisions committed before the take, %d refused after it", committed, rounds, rounds-committed)
}

// ownerDecisions is the decisions counter of l's owner row (relay_owners): it moves with every
// write conditional on l's epoch, which is what certifies on a Galera cluster.
func ownerDecisions(ctx context.Context, t *testing.T, l *Ledger) int64 {
	t.Helper()
	var n int64
	if err := l.DB().QueryRowContext(ctx, `SELECT decisions FROM relay_owners WHERE job = ? AND scope = ?`, l.Job(), l.Key()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A take runs under the member's own owner epoch: once the member's key was taken by a newer
// process (a zombie's takeover), a take under the old epoch fails with ErrFenced and changes
// nothing — neither the partitions another member holds, nor the ones it held itself, nor new
// ones, nor its owner row — while a take under the current epoch goes through and writes the
// member's owner row (the write a take and a claim on two Galera nodes certify against).
func TestPartitionTakeFenced(t *testing.T) {
	a, b, fa, fb, ctx := twoMembers(t)
	ta, err := a.TakePartitions(ctx, fa.Epoch(), fresh("t", 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Decide(ctx, fa.Epoch(), ta.Claims, Checkpoint{ID: 1, Offsets: partition.Offsets{"t": {0: 10, 1: 20}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TakePartitions(ctx, fb.Epoch(), fresh("t", 0)); err != nil {
		t.Fatal(err)
	}
	// A new process of member a takes its key: the first one's epoch is stale.
	fa.Release()
	fa2, err := Acquire(ctx, a, FenceConfig{Owner: "host-a pid 3"})
	if err != nil {
		t.Fatal(err)
	}
	defer fa2.Release()
	before, decisions := owners(ctx, t, a), ownerDecisions(ctx, t, a)
	_, err = a.TakePartitions(ctx, fa.Epoch(), append(fresh("t", 0, 2), Want{Topic: "t", Partition: 1, Held: 1}))
	// Refused at the member's job row, first, naming the process that holds the key now.
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "host-a pid 3") {
		t.Fatalf("take under the stale epoch %d (the key is at %d): %v, want ErrFenced naming host-a pid 3", fa.Epoch(), fa2.Epoch(), err)
	}
	if after := owners(ctx, t, a); !maps.Equal(after, before) {
		t.Fatalf("refused take changed owner rows:\nbefore %+v\nafter  %+v", before, after)
	}
	if n := ownerDecisions(ctx, t, a); n != decisions {
		t.Fatalf("refused take wrote the member's owner row: decisions %d, was %d", n, decisions)
	}
	took, err := a.TakePartitions(ctx, fa2.Epoch(), fresh("t", 0))
	if err != nil {
		t.Fatalf("take under the current epoch: %v", err)
	}
	if e, _ := took.Claims.Get("t", 0); e != 3 || !took.Offsets.Equal(partition.Offsets{"t": {0: 10}}) {
		t.Fatalf("take under the current epoch: %+v; want t/0 at epoch 3, offset 10", took)
	}
	if n := ownerDecisions(ctx, t, a); n != decisions+1 {
		t.Fatalf("take under the current epoch left the member's owner row unwritten: decisions %d, was %d", n, decisions)
	}
}

// A fresh take of a partition another member decided reports the hand-over: who decided it last
// and how long before the take, measured from that decision (a take in between moves nothing of
// it). A partition never decided, and a held partition taken again, report none.
func TestPartitionTakeHandover(t *testing.T) {
	a, b, fa, fb, ctx := twoMembers(t)
	ta, err := a.TakePartitions(ctx, fa.Epoch(), fresh("t", 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(ta.Handovers) != 0 {
		t.Fatalf("take of partitions nobody decided: handovers %+v, want none", ta.Handovers)
	}
	if err := a.Decide(ctx, fa.Epoch(), ta.Claims, Checkpoint{ID: 1, Offsets: partition.Offsets{"t": {0: 10, 1: 20}}}); err != nil {
		t.Fatal(err)
	}
	decided := time.Now()
	time.Sleep(300 * time.Millisecond)
	// B takes t/0, then A takes it back: its last decision is still A's first one.
	if _, err := b.TakePartitions(ctx, fb.Epoch(), fresh("t", 0)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	back, err := a.TakePartitions(ctx, fa.Epoch(), fresh("t", 0))
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(decided)
	if len(back.Handovers) != 1 {
		t.Fatalf("A's take back of t/0: handovers %+v, want one", back.Handovers)
	}
	h := back.Handovers[0]
	// The database's clock and this one's tick alike; the take and the statements around it take
	// milliseconds.
	if h.Topic != "t" || h.Partition != 0 || h.From != b.Key() || h.Since < 450*time.Millisecond || h.Since > elapsed+100*time.Millisecond {
		t.Fatalf("A's take back of t/0: %+v; want from %s, since A's decision %s ago (at least the 500ms slept)", h, b.Key(), elapsed)
	}
	held, err := a.TakePartitions(ctx, fa.Epoch(), []Want{{Topic: "t", Partition: 1, Held: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(held.Handovers) != 0 {
		t.Fatalf("A's held take of t/1: handovers %+v, want none", held.Handovers)
	}
}
