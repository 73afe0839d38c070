package database

import (
	"slices"
	"testing"
)

// Closed connections stay listed as zombies until killed; a thread id that does not grow means
// the server restarted: nothing of the old lifetime is listed any more, and a late close of an
// old connection does not touch a new one that got the same id.
func TestTrackerLifetimes(t *testing.T) {
	tr := NewTracker()
	a, b := tr.opened(10), tr.opened(11)
	tr.closed(10, a)
	if got := tr.IDs(); !slices.Equal(got, []int64{10, 11}) {
		t.Fatalf("IDs %v, want open 11 and zombie 10", got)
	}
	if got := tr.Zombies(); !slices.Equal(got, []int64{10}) {
		t.Fatalf("Zombies %v, want [10]", got)
	}
	c := tr.opened(11) // the server restarted: ids start again
	if got := tr.IDs(); !slices.Equal(got, []int64{11}) {
		t.Fatalf("after a restart IDs %v, want only the new 11", got)
	}
	if len(tr.Zombies()) != 0 {
		t.Fatalf("zombies of the old lifetime still listed: %v", tr.Zombies())
	}
	tr.closed(11, b) // the old connection 11, found dead by the pool later
	if got := tr.IDs(); !slices.Equal(got, []int64{11}) {
		t.Fatalf("closing the old 11 touched the new one: IDs %v", got)
	}
	tr.closed(11, c)
	if got := tr.Zombies(); !slices.Equal(got, []int64{11}) {
		t.Fatalf("Zombies %v, want the new 11", got)
	}
}
