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
