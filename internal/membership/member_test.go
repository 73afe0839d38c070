package membership

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
)

// A partition another member took stays out of this member's sessions; if the group still assigns
// it here after regrant, the member is told to start over and takes it back as a fresh grant. A
// partition the group revoked meanwhile is not taken back.
func TestStolenPartitionRegranted(t *testing.T) {
	mb := &Member{log: zap.NewNop(), changes: make(chan *Change, 4), held: map[tp]int64{{"t", 0}: 3, {"t", 1}: 3, {"t", 2}: 3},
		stolen: map[tp]uint64{}, regrant: 50 * time.Millisecond}
	mb.Took(ledger.Taken{Lost: []ledger.Want{{Topic: "t", Partition: 1, Held: 3}, {Topic: "t", Partition: 2, Held: 3}}})
	for _, w := range mb.Wants() {
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
	got := map[int32]int64{}
	for _, w := range mb.Wants() {
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
	mb := &Member{log: zap.NewNop(), changes: make(chan *Change, 4), held: map[tp]int64{{"t", 0}: 3},
		stolen: map[tp]uint64{}, regrant: regrant}
	lost := ledger.Taken{Lost: []ledger.Want{{Topic: "t", Partition: 0, Held: 3}}}
	mb.Took(lost)
	time.Sleep(regrant / 2)
	mb.mu.Lock()
	delete(mb.stolen, tp{"t", 0}) // granted anew (rebalance)
	mb.mu.Unlock()
	mb.Took(lost)                     // and taken by another member again
	time.Sleep(regrant/2 + regrant/6) // past the first steal's regrant, before the second's
	select {
	case <-mb.changes:
		t.Fatal("taken back on the first steal's regrant, half a regrant after the second steal")
	default:
	}
	if w := mb.Wants(); len(w) != 0 {
		t.Fatalf("wants %+v before the second steal's regrant", w)
	}
	select {
	case <-mb.changes:
	case <-time.After(5 * time.Second):
		t.Fatal("not taken back after the second steal's regrant")
	}
	if w := mb.Wants(); len(w) != 1 || w[0].Held != 0 {
		t.Fatalf("wants %+v after regrant, want the partition fresh (0)", w)
	}
}
