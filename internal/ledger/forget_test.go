package ledger

import (
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// Stopped members are forgotten once their lease ran out longer ago than the bound: not one whose
// lock is held, not one with a checkpoint still COMMITTING, not one the caller keeps (branches in
// XA RECOVER), and not one stopped more recently than the bound.
func TestForgetMembers(t *testing.T) {
	l, ctx := newLedger(t)
	short := FenceConfig{Owner: "test", Lease: time.Second}
	fences := map[string]*Fence{}
	for _, id := range []string{"gone", "kept", "committing", "running", "recent"} {
		f, err := Acquire(ctx, NewMember(l.DB(), l.Job(), id), short)
		if err != nil {
			t.Fatal(err)
		}
		fences[id] = f
	}
	c := NewMember(l.DB(), l.Job(), "committing")
	if err := c.Decide(ctx, fences["committing"].Epoch(), partition.Claims{}, Checkpoint{ID: 1, Offsets: partition.Offsets{}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gone", "kept", "committing"} {
		fences[id].Release()
	}
	defer fences["running"].Release()
	// Every lease but "recent"'s ran out more than a second ago; "recent" stops only now.
	testenv.Eventually(t, 10*time.Second, func() bool {
		left, err := LeaseLeft(ctx, NewMember(l.DB(), l.Job(), "gone"))
		return err == nil && left == 0
	}, "the stopped members' leases to run out")
	time.Sleep(1200 * time.Millisecond) // the scenario: stopped longer ago than the bound below
	fences["recent"].Release()
	n, err := ForgetMembers(ctx, NewMember(l.DB(), l.Job(), "self"), time.Second, map[string]string{MemberKey(l.Job(), "kept"): "a branch in XA RECOVER"})
	if err != nil || n != 1 {
		t.Fatalf("forgot %d (%v), want 1", n, err)
	}
	var left []string // members whose lease row is still there
	rows, err := l.DB().QueryContext(ctx, `SELECT job FROM relay_leases WHERE job LIKE ? ORDER BY job`, likePrefix(MemberKey(l.Job(), "")))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		left = append(left, k[len(MemberKey(l.Job(), "")):])
	}
	rows.Close()
	if want := []string{"committing", "kept", "recent", "running"}; len(left) != len(want) || left[0] != want[0] || left[1] != want[1] || left[2] != want[2] || left[3] != want[3] {
		t.Fatalf("members left %v, want %v", left, want)
	}
	var owners int
	if err := l.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM relay_owners WHERE job = ? AND scope = ?`, l.Job(), MemberKey(l.Job(), "gone")).Scan(&owners); err != nil || owners != 0 {
		t.Fatalf("the forgotten member's owner row: %d (%v)", owners, err)
	}
	// Its relay_jobs row stays: a later claim of the key continues above its epoch.
	var epoch int64
	if err := l.DB().QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ?`, MemberKey(l.Job(), "gone")).Scan(&epoch); err != nil || epoch < 1 {
		t.Fatalf("the forgotten member's relay_jobs row: epoch %d (%v)", epoch, err)
	}
	// A second pass without keep forgets "kept" only: "gone" is forgotten already (not again).
	if n, err := ForgetMembers(ctx, NewMember(l.DB(), l.Job(), "self"), time.Second, nil); err != nil || n != 1 {
		t.Fatalf("second pass forgot %d (%v), want 1", n, err)
	}
}
