package crash

import (
	"context"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// A prepared branch of the job that is still attached to a live session (a zombie) cannot be
// resolved at start-up: relay goes on without it, and its resolver rolls it back (no ledger row)
// once the session is gone. Meanwhile checkpoints move past its id and totals stay exact.
func TestResolverFinishesAttachedBranch(t *testing.T) {
	e := newEnv(t, 2, "RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	zombie, tag := e.attachedBranch(ctx, "zombie", 3)
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 2000, Batch: 100, Seed: 11}); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, p.Log, "in-doubt branch left to the resolver")) == 1 }, "recovery to leave the attached branch")
	testenv.Eventually(t, 30*time.Second, func() bool { return e.maxCheckpoint() > 3 }, "checkpoints past the attached branch's id")
	// relay's own branches are in XA RECOVER between their prepare and commit, so this waits for a
	// moment between checkpoints (relay is idle once it has read the 2000 orders).
	testenv.Eventually(t, 15*time.Second, func() bool {
		got := e.branches()
		return len(got) == 1 && got[0].Tag == tag
	}, "only "+tag+" in doubt")
	// The resolver sees it on every pass (each second here) and exports it with its age.
	addr := httpAddr(t, p)
	testenv.Eventually(t, 15*time.Second, func() bool {
		s := scrapeMetrics(t, addr)
		return s.value(t, "relay_xa_in_doubt_branches") == 1 && s.value(t, "relay_xa_in_doubt_oldest_age_seconds") >= 1
	}, "relay_xa_in_doubt_branches 1 with an age of a second or more")
	zombie.Close() // the session ends; the prepared branch stays, now resolvable
	// The log line follows the XA ROLLBACK, so wait for it, not for the branch to vanish.
	testenv.Eventually(t, 30*time.Second, func() bool { return len(logEvents(t, p.Log, "in-doubt branch resolved")) > 0 }, "the resolver to roll the branch back")
	if got := e.branches(); len(got) != 0 {
		t.Fatalf("branches %v left after the resolver's rollback", got)
	}
	testenv.Eventually(t, 15*time.Second, func() bool {
		s := scrapeMetrics(t, addr)
		return s.value(t, "relay_xa_in_doubt_branches") == 0 && s.value(t, "relay_xa_in_doubt_oldest_age_seconds") == 0 &&
			s.value(t, "relay_transactions_total", "action", "rollback", "origin", "resolver") == 1
	}, "the in-doubt gauges back to 0 and one resolver rollback counted")
	resolved := logEvents(t, p.Log, "in-doubt branch resolved")
	if len(resolved) != 1 || resolved[0]["tag"] != tag || resolved[0]["action"] != "rollback" || resolved[0]["origin"] != "resolver" {
		t.Fatalf("resolutions %v, want one rollback of %s by the resolver", resolved, tag)
	}
	p.Kill()
	e.finish(totals)
}
