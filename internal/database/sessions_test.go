package database

import (
	"slices"
	"testing"
)

// Closed connections stay listed as zombies until killed; a new boot time means the server
// restarted: nothing of the old lifetime is listed any more, and a late close of an old connection
// does not touch a new one that got the same id.
func TestTrackerLifetimes(t *testing.T) {
	tr := NewTracker()
	a, b := tr.opened(10, 1000), tr.opened(11, 1001) // one lifetime: Uptime's granularity
	tr.closed(10, a)
	if got := tr.List(); got.Boot != 1000 || !slices.Equal(got.IDs, []int64{10, 11}) {
		t.Fatalf("List %+v, want boot 1000, open 11 and zombie 10", got)
	}
	c := tr.opened(11, 5000) // the server restarted: ids start again
	if got := tr.List(); got.Boot != 5000 || !slices.Equal(got.IDs, []int64{11}) {
		t.Fatalf("after a restart List %+v, want only the new 11", got)
	}
	tr.closed(11, b) // the old connection 11, found dead by the pool later
	if got := tr.List(); !slices.Equal(got.IDs, []int64{11}) {
		t.Fatalf("closing the old 11 touched the new one: %+v", got)
	}
	tr.closed(11, c)
	if got := tr.List(); !slices.Equal(got.IDs, []int64{11}) {
		t.Fatalf("List %+v, want the new 11 as a zombie", got)
	}
}

// A month of renewals, one every 10 s, while the pool closes an idle connection and opens a new
// one each time (SetConnMaxIdleTime at work): pruned against what the server lists at each
// renewal, the list stays the live sessions plus the closed ones the server still has.
func TestTrackerMonthOfChurn(t *testing.T) {
	const renewals = 30 * 24 * 360
	tr := NewTracker()
	const boot = 1000
	var next int64 = 1
	open := []int64{}
	for ; next <= 4; next++ { // the pool's live connections
		tr.opened(next, boot)
		open = append(open, next)
	}
	// Two connections dropped while the network was cut: the server keeps them until a KILL.
	for _, id := range []int64{next, next + 1} {
		tr.opened(id, boot)
		tr.closed(id, boot)
	}
	stuck := map[int64]bool{next: true, next + 1: true}
	next += 2
	maxLen := 0
	for r := 0; r < renewals; r++ {
		tr.closed(open[0], boot)
		open = append(open[1:], next)
		tr.opened(next, boot)
		next++
		listed := map[int64]bool{}
		for _, id := range open {
			listed[id] = true
		}
		for id := range stuck {
			listed[id] = true
		}
		tr.forget(tr.zombies(), listed)
		maxLen = max(maxLen, len(tr.List().IDs))
		if maxLen > len(open)+len(stuck) {
			t.Fatalf("renewal %d: %d sessions listed, the server has %d of them", r, maxLen, len(open)+len(stuck))
		}
	}
	got := tr.List()
	if len(got.IDs) != len(open)+len(stuck) {
		t.Fatalf("after a month: %v, want the %d open and the %d stuck", got.IDs, len(open), len(stuck))
	}
}
