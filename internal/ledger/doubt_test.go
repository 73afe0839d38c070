package ledger

import (
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/partition"
)

// A branch's in-doubt age counts from its first sighting, which later sightings do not move; a
// decided branch counts from its decision when that is earlier; a tag XA RECOVER no longer lists
// is forgotten.
func TestInDoubtAges(t *testing.T) {
	l, ctx := newLedger(t)
	f, err := Acquire(ctx, l, FenceConfig{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	undecided, decided := l.job+"-7-0", l.job+"-5-0"
	if err := l.Decide(ctx, f.Epoch(), nil, Checkpoint{ID: 5, Tags: []string{decided}, Offsets: partition.Offsets{}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the decision is older than any sighting below
	if err := l.NoteInDoubt(ctx, map[string]int64{undecided: 7}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the first sighting ages: the next one must not move it
	doubt := map[string]int64{undecided: 7, decided: 5}
	ages, err := l.InDoubtAges(ctx, doubt, []string{undecided, decided})
	if err != nil {
		t.Fatal(err)
	}
	if a := ages[undecided]; a < 300*time.Millisecond || a > 5*time.Second {
		t.Errorf("undecided branch: age %s, want from its first sighting 300 ms ago (not moved by this one)", a)
	}
	if a := ages[decided]; a < 600*time.Millisecond || a < ages[undecided] {
		t.Errorf("decided branch: age %s, want from its decision 600 ms ago (undecided: %s)", a, ages[undecided])
	}
	// The decided branch was resolved: XA RECOVER lists only the other one now.
	if ages, err = l.InDoubtAges(ctx, map[string]int64{undecided: 7}, []string{undecided}); err != nil || len(ages) != 1 {
		t.Fatalf("ages %v (%v), want the undecided branch only", ages, err)
	}
	var n int
	if err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM relay_in_doubt WHERE job = ? AND tag = ?`, l.job, decided).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v) of the resolved branch left", n, err)
	}
	// Nothing listed: every row of the job goes.
	if _, err := l.InDoubtAges(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM relay_in_doubt WHERE job = ?`, l.job).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v) left with nothing in XA RECOVER", n, err)
	}
}
