package membership

import (
	"maps"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// testMember is a member outside any group, holding held, whose methods the tests drive as the
// rebalance callback and the sessions would.
func testMember(held map[tp]partition.Epoch, regrant time.Duration) *Member {
	return &Member{log: zap.NewNop(), changes: make(chan *Change, 4), held: held, granted: map[tp]Grant{},
		stolen: map[tp]uint64{}, regrant: regrant}
}

// A partition another member took stays out of this member's sessions; if the group still assigns
// it here after regrant, the member is told to start over and takes it back as a fresh grant. A
// partition the group revoked meanwhile is not taken back.
func TestStolenPartitionRegranted(t *testing.T) {
	mb := testMember(map[tp]partition.Epoch{{"t", 0}: 3, {"t", 1}: 3, {"t", 2}: 3}, 50*time.Millisecond)
	_, g := mb.Wants()
	mb.Took(g, ledger.Taken{Stolen: []ledger.Want{{Topic: "t", Partition: 1, Held: 3}, {Topic: "t", Partition: 2, Held: 3}}})
	wants, _ := mb.Wants()
	for _, w := range wants {
		if w.Partition != 0 {
			t.Fatalf("wants %+v right after it was taken by another member", w)
		}
	}
	mb.mu.Lock()
	delete(mb.held, tp{"t", 2}) // the group revoked it meanwhile
	mb.mu.Unlock()
	select {
	case ch := <-mb.changes:
		if ch.Kind != Assigned {
			t.Fatalf("change %v, want assigned", ch.Kind)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no change after regrant")
	}
	got := map[int32]partition.Epoch{}
	wants, _ = mb.Wants()
	for _, w := range wants {
		got[w.Partition] = w.Held
	}
	if len(got) != 2 || got[0] != 3 || got[1] != 0 {
		t.Fatalf("wants after regrant %v, want partition 0 held at 3 and partition 1 fresh (0), not 2", got)
	}
}

// A partition stolen, granted anew and stolen again waits a whole regrant from its latest steal:
// the first steal's timer, firing meanwhile, does not take it back.
func TestRegrantFromLatestSteal(t *testing.T) {
	const regrant = 300 * time.Millisecond
	mb := testMember(map[tp]partition.Epoch{{"t", 0}: 3}, regrant)
	lost := ledger.Taken{Stolen: []ledger.Want{{Topic: "t", Partition: 0, Held: 3}}}
	_, g := mb.Wants()
	mb.Took(g, lost)
	time.Sleep(regrant / 2)
	mb.mu.Lock()
	mb.grant(tp{"t", 0}) // granted anew (rebalance)
	mb.mu.Unlock()
	_, g = mb.Wants()
	mb.Took(g, ledger.Taken{Claims: partition.Claims{"t": {0: 5}}}) // taken
	_, g = mb.Wants()
	mb.Took(g, ledger.Taken{Stolen: []ledger.Want{{Topic: "t", Partition: 0, Held: 5}}}) // and taken by another member again
	time.Sleep(regrant/2 + regrant/6)                                                    // past the first steal's regrant, before the second's
	select {
	case <-mb.changes:
		t.Fatal("taken back on the first steal's regrant, half a regrant after the second steal")
	default:
	}
	if w, _ := mb.Wants(); len(w) != 0 {
		t.Fatalf("wants %+v before the second steal's regrant", w)
	}
	select {
	case <-mb.changes:
	case <-time.After(5 * time.Second):
		t.Fatal("not taken back after the second steal's regrant")
	}
	if w, _ := mb.Wants(); len(w) != 1 || w[0].Held != 0 {
		t.Fatalf("wants %+v after regrant, want the partition fresh (0)", w)
	}
}

// A grant that arrives while a session takes (between its Wants and its Took: the group revoked or
// lost a partition and granted it again) is not overwritten by the take's result: the partition
// stays fresh (Held 0), so the next take takes it from whoever holds it now, rather than holding
// it at the older take's epoch and finding it taken (then stolen for a regrant period). A steal
// the older take saw does not keep it out either. Partitions granted no later than the take's
// Wants take its result.
func TestGrantDuringTake(t *testing.T) {
	mb := testMember(map[tp]partition.Epoch{}, time.Hour)
	mb.mu.Lock()
	for p := int32(0); p < 4; p++ {
		mb.grant(tp{"t", p})
	}
	mb.mu.Unlock()
	// A session takes t/0..t/3 fresh; while its take runs, the group loses t/0 and t/2 and grants
	// them again (another member may have taken them in between).
	_, g := mb.Wants()
	mb.mu.Lock()
	for _, p := range []int32{0, 2} {
		mb.drop(tp{"t", p})
		mb.grant(tp{"t", p})
	}
	mb.mu.Unlock()
	mb.Took(g, ledger.Taken{Claims: partition.Claims{"t": {0: 4, 1: 4}}})
	// t/2 and t/3 are taken at 7; the next take (a steal of each, seen by the next session's
	// take of them held) comes back after t/2 was lost and granted once more.
	_, g = mb.Wants()
	mb.Took(g, ledger.Taken{Claims: partition.Claims{"t": {2: 7, 3: 7}}})
	_, g = mb.Wants()
	mb.mu.Lock()
	mb.drop(tp{"t", 2})
	mb.grant(tp{"t", 2})
	mb.mu.Unlock()
	mb.Took(g, ledger.Taken{Stolen: []ledger.Want{{Topic: "t", Partition: 2, Held: 7}, {Topic: "t", Partition: 3, Held: 7}}})
	wants, _ := mb.Wants()
	got := map[int32]partition.Epoch{}
	for _, w := range wants {
		got[w.Partition] = w.Held
	}
	want := map[int32]partition.Epoch{0: 0, 1: 4, 2: 0} // t/3 stolen: not wanted until regranted
	if !maps.Equal(got, want) {
		t.Fatalf("wants %v after takes that raced grants, want %v (t/0 and t/2 granted during the takes: fresh, 0)", got, want)
	}
}
