package ops

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// relay membership forget shows its plan and changes nothing without a yes; with one it forgets
// only the stopped member with nothing in doubt, and refuses, naming why, a member that runs (lock
// held), one whose lease still runs, one with a checkpoint not COMMITTED and one with a branch in
// XA RECOVER. A job run as instances has no members to forget.
func TestForgetMembersRefuses(t *testing.T) {
	e, ctx := newEnv(t, 1, func(c *config.Config) { c.Membership = config.MembershipGroup })
	db, job := e.Ledger.DB(), e.Ledger.Job()
	fences := map[string]*ledger.Fence{}
	for _, id := range []string{"gone", "running", "recent", "committing", "branch"} {
		lease := time.Second
		if id == "recent" {
			lease = time.Minute
		}
		f, err := ledger.Acquire(ctx, ledger.NewMember(db, job, id), ledger.FenceConfig{Owner: "host-" + id + " pid 1", Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		fences[id] = f
	}
	if err := ledger.NewMember(db, job, "committing").Decide(ctx, fences["committing"].Epoch(), partition.Claims{},
		ledger.Checkpoint{ID: 1, Offsets: partition.Offsets{}}); err != nil {
		t.Fatal(err)
	}
	// "branch" reserved checkpoint ids 100-199 and left a prepared branch of checkpoint 150.
	if _, err := db.ExecContext(ctx, `INSERT INTO relay_id_blocks (job, first_id, last_id, owner_key, reserved_at)
		VALUES (?, 100, 199, ?, UTC_TIMESTAMP(6))`, job, ledger.MemberKey(job, "branch")); err != nil {
		t.Fatal(err)
	}
	branch := tag(e, 150, 0)
	prepareWriting(t, ctx, e, branch, "").Close()
	t.Cleanup(func() { _, _ = db.ExecContext(ctx, "XA ROLLBACK '"+branch+"'") })
	for id, f := range fences {
		if id != "running" {
			f.Release()
		}
	}
	defer fences["running"].Release()
	testenv.Eventually(t, 10*time.Second, func() bool {
		for _, id := range []string{"gone", "committing", "branch"} {
			if left, err := ledger.LeaseLeft(ctx, ledger.NewMember(db, job, id)); err != nil || left > 0 {
				return false
			}
		}
		return true
	}, "the stopped members' 1 s leases to run out")

	leases := func() []string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT job FROM relay_leases WHERE job LIKE ? ORDER BY job`, job+"/g/%")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var k string
			_ = rows.Scan(&k)
			ids = append(ids, strings.TrimPrefix(k, ledger.MemberKey(job, "")))
		}
		return ids
	}
	all := strings.Join(leases(), ",")

	var shown bytes.Buffer
	r, err := ForgetMembers(ctx, e, func(p Plan) (bool, error) { return false, p.WriteText(&shown) })
	if !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("unconfirmed: %v, want ErrNotConfirmed", err)
	}
	if got := strings.Join(leases(), ","); got != all {
		t.Fatalf("an unconfirmed plan changed the members' rows: %s, were %s", got, all)
	}
	if len(r.Forget) != 1 || r.Forget[0].ID != "gone" {
		t.Fatalf("plan forgets %+v, want gone alone:\n%s", r.Forget, shown.String())
	}
	why := map[string]string{
		"running":    "live: its lock is held",
		"recent":     "its lease runs",
		"committing": "checkpoint 1 is not COMMITTED",
		"branch":     "its branch " + branch + " is in XA RECOVER",
	}
	for id, want := range why {
		if l := lineOf(shown.String(), "  keep    "+id+"\t"); !strings.Contains(l, want) {
			t.Errorf("plan line of %s: %q, want it kept because %q\n%s", id, l, want, shown.String())
		}
	}

	if r, err = ForgetMembers(ctx, e, yes); err != nil || !r.Applied || r.Forgotten != 1 {
		t.Fatalf("forget --yes: %+v, %v; want 1 forgotten", r, err)
	}
	if got := strings.Join(leases(), ","); got != "branch,committing,recent,running" {
		t.Fatalf("members with a lease row after forget: %s, want every refused one", got)
	}
	if log, err := e.Ledger.AuditLog(ctx, 10); err != nil || len(log) != 1 || log[0].Action != ledger.AuditForgetMembers {
		t.Fatalf("audit: %+v (%v), want one forget_members row", log, err)
	}
	// Nothing left to forget: no question asked.
	if r, err = ForgetMembers(ctx, e, func(Plan) (bool, error) { t.Error("asked with nothing to forget"); return false, nil }); err != nil || r.Applied {
		t.Fatalf("second forget: %+v, %v", r, err)
	}

	e.Config.Membership = config.MembershipInstances
	if _, err := ForgetMembers(ctx, e, yes); !errors.Is(err, ErrNotGroup) {
		t.Fatalf("forget for a job run as instances: %v, want ErrNotGroup", err)
	}
}
