package galera

// Leases across node clocks: a lease is written with the clock of the node its owner renews on,
// and read on another node, whose clock may be seconds off (an NTP step, a host not synced yet).
// Invariant checked here: a healthy owner on one node is never judged gone from a node whose clock
// runs ahead (it is not taken over, and neither an operator command nor a layout change goes
// through beside it), and an owner that stopped renewing is still taken over from there, within
// about one lease.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/testenv"
)

// setClock restarts node n with its wall clock off by seconds from the host's (the test puts it
// back), and returns pools through nodes 1 and 2 on a fresh database (a restarted node dropped
// every session).
func setClock(t *testing.T, n, seconds int) [2]*sql.DB {
	testenv.GaleraScript(t, "clock", fmt.Sprint(n), fmt.Sprintf("%+d", seconds))
	dbs := racePools(t)
	want := time.Duration(seconds) * time.Second
	if got := clockAhead(t, dbs[1]) - clockAhead(t, dbs[0]); (got - want).Abs() > time.Second {
		t.Fatalf("node 2's clock runs %v ahead of node 1's, want %v", got, want)
	}
	if err := ledger.EnsureSchema(context.Background(), dbs[0]); err != nil {
		t.Fatal(err)
	}
	return dbs
}

// clockAhead is how far db's server clock runs ahead of the host's.
func clockAhead(t *testing.T, db *sql.DB) time.Duration {
	var now time.Time
	before := time.Now()
	if err := db.QueryRow(`SELECT UTC_TIMESTAMP(6)`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now.Sub(before.UTC()).Round(100 * time.Millisecond)
}

// TestSkewedNodeClock holds jobs on node 1 with healthy, renewing owners while node 2's clock runs
// 8 s ahead (lease 2 s: by node 2's clock the lease ran out 6 s ago at every renewal). From node 2,
// a relay run of the job, an operator command and a rescale must each be refused, and a membership
// switch must list the owner as running; the owner keeps its fence. Then an owner stops renewing
// (its lock session is ended on node 1): node 2 takes the job over, about one lease after it first
// looked. The same with node 2's clock 8 s behind, where by its clock that lease runs 8 s longer.
func TestSkewedNodeClock(t *testing.T) {
	const lease = 2 * time.Second
	ctx := context.Background()
	testenv.Galera(t)
	t.Cleanup(func() { testenv.GaleraScript(t, "clock", "2", "0") })
	dbs := setClock(t, 2, 8)
	cfg := func(owner string, operator bool) ledger.FenceConfig {
		return ledger.FenceConfig{Owner: owner, Lease: lease, Cluster: true, TakeOver: !operator, Operator: operator}
	}
	// hold takes a new job on node 1 and checks, once node 2 has acted, that its owner kept it.
	hold := func() (job string, owner *ledger.Fence, kept func(what string)) {
		job = "sk" + testenv.Suffix()
		owner, err := ledger.Acquire(ctx, ledger.New(dbs[0], job), cfg("the owner on node 1", false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(owner.Release)
		epoch := owner.Epoch()
		return job, owner, func(what string) {
			select {
			case <-owner.Lost():
				t.Errorf("after %s on node 2, the owner on node 1 lost its fence", what)
			case <-time.After(lease):
				if got := owner.Epoch(); got != epoch {
					t.Errorf("after %s on node 2, the owner's epoch moved from %d to %d", what, epoch, got)
				}
			}
		}
	}
	// takenOver ends the owner's lock session on node 1, as when its host vanished: it stops
	// renewing without letting go. Node 2 cannot tell that by its clock; it sees the lease stand
	// still, and must take the job over about one lease after it first looked.
	takenOver := func(job string, owner *ledger.Fence) {
		var lockSession int64
		if err := dbs[0].QueryRow(`SELECT IS_USED_LOCK(?)`, ledger.LockName(job)).Scan(&lockSession); err != nil {
			t.Fatal(err)
		}
		if _, err := dbs[0].Exec(fmt.Sprintf("KILL %d", lockSession)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-owner.Lost():
		case <-time.After(5 * lease):
			t.Fatal("the owner on node 1 kept renewing after its lock session was ended")
		}
		start := time.Now()
		f, err := ledger.Acquire(ctx, ledger.New(dbs[1], job), cfg("the test's relay run on node 2", false))
		if err != nil {
			t.Fatalf("relay run on node 2 once the owner on node 1 stopped renewing: %v", err)
		}
		defer f.Release()
		took := time.Since(start)
		t.Logf("taken over from node 2 in %v (lease %v): %+v", took.Round(time.Millisecond), lease, f.TookOver)
		if f.TookOver == nil || took > lease+2*time.Second {
			t.Errorf("relay run on node 2 took %v and reports no takeover (%+v): want the owner's lease waited out, about %v", took, f.TookOver, lease)
		}
	}

	for _, c := range []struct {
		name    string
		process func(job string) *ledger.Ledger
		op      bool
		want    string
	}{
		{"relay run", func(job string) *ledger.Ledger { return ledger.New(dbs[1], job) }, false, "running on another Galera node"},
		{"operator command", func(job string) *ledger.Ledger { return ledger.New(dbs[1], job) }, true, "running on another Galera node"},
		{"instance 0/2", func(job string) *ledger.Ledger { return ledger.NewInstance(dbs[1], job, 0, 2) }, false, "a live lease this node did not record"},
	} {
		job, _, kept := hold()
		start := time.Now()
		f, err := ledger.Acquire(ctx, c.process(job), cfg("the test's "+c.name+" on node 2", c.op))
		switch {
		case err == nil:
			f.Release()
			t.Errorf("%s on node 2 got the fence of a job whose owner renews on node 1 (took over: %+v)", c.name, f.TookOver)
		case !errors.Is(err, ledger.ErrFenced) || !strings.Contains(err.Error(), c.want):
			t.Errorf("%s on node 2: %v, want refused (%q)", c.name, err, c.want)
		default:
			t.Logf("%s refused in %v: %v", c.name, time.Since(start).Round(time.Millisecond), err)
		}
		kept(c.name)
	}
	job, owner, kept := hold()
	plan, err := ledger.SwitchLayout(ctx, dbs[1], job, ledger.LayoutGroup, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(plan.Up, job) {
		t.Errorf("membership switch planned on node 2 lists %v as running, want the owner on node 1 (%s)", plan.Up, job)
	}
	kept("a membership switch plan")
	takenOver(job, owner)

	dbs = setClock(t, 2, -8)
	job, owner, _ = hold()
	takenOver(job, owner)
}
