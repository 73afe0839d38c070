package crash

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// Static membership (kafka.group_instance_id, a StatefulSet's pod names): a member SIGKILLed and
// started again under the same id within the group's session timeout gets its partitions back
// without waiting for the session timeout and without a rebalance of the others, takes its own fence
// again (same ledger key) and the totals are exact.
func TestStaticMemberRestart(t *testing.T) {
	e := newEnv(t, 8)
	ctx := context.Background()
	totals := loadgen.NewTotals()
	member := func(id string) []string {
		return []string{"RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1", "RELAY_KAFKA_GROUP_INSTANCE_ID=" + id,
			"RELAY_KAFKA_PROPERTIES=session.timeout.ms=45000,heartbeat.interval.ms=1000"}
	}
	produce := func(seed uint64) {
		t.Helper()
		if err := e.produce(ctx, totals, loadgen.Options{Orders: 1500, Batch: 100, SKUs: 20, Windows: 2, Seed: seed}); err != nil {
			t.Fatal(err)
		}
	}
	a := e.start(member("m0")...)
	b := e.start(member("m1")...)
	// Both members read: each took its share in the ledger.
	testenv.Eventually(t, 60*time.Second, func() bool {
		return len(logEvents(t, a.Log, "partitions taken")) > 0 && len(logEvents(t, b.Log, "partitions taken")) > 0 &&
			e.partitionMembers() == 2
	}, "both members to hold partitions")
	produce(91)
	before := len(logEvents(t, a.Log, "rebalance"))
	if err := b.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = b.Wait(10 * time.Second)
	killed := time.Now()
	b = e.start(member("m1")...)
	produce(92)
	x := e.expected(totals)
	// Not a speed claim: a dynamic member's partitions would wait out the 45s session timeout of
	// the dead one before anyone read them; a static one's come back with the restart.
	if !testenv.Poll(20*time.Second, func() bool { a.exited(t); b.exited(t); return e.diffOracle(x) == "" }) {
		t.Fatalf("totals not caught up 20s after the static member's restart (its partitions waited for the session timeout?):\n%s", e.diffOracle(x))
	}
	t.Logf("restarted static member caught up %s after the kill", time.Since(killed).Round(time.Millisecond))
	if n := len(logEvents(t, a.Log, "rebalance")); n != before {
		t.Fatalf("the survivor saw %d rebalance events after the static member's restart, want none", n-before)
	}
	took := logEvents(t, b.Log, "partitions taken")
	if len(took) == 0 || len(took[len(took)-1]["owner_epochs"].(map[string]any)) == 0 {
		t.Fatalf("the restarted member took no partitions: %v", took)
	}
	if ev := logEvents(t, b.Log, "membership group"); len(ev) != 1 || !strings.HasSuffix(ev[0]["member"].(string), "/g/m1") {
		t.Fatalf("restarted member: %v, want the ledger key .../g/m1", ev)
	}
	e.stopAll([]*proc{a, b})
	if d := e.diffOracle(x); d != "" {
		t.Fatalf("totals differ after the stop:\n%s", d)
	}
	if bs := e.branches(); len(bs) != 0 {
		t.Fatalf("XA RECOVER still lists %d branches of the job: %v", len(bs), bs)
	}
}

// partitionMembers counts the members holding partitions of the job in the ledger.
func (e *env) partitionMembers() int {
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(DISTINCT member) FROM relay_partition_owners WHERE job = ?`, e.job).Scan(&n); err != nil {
		return 0
	}
	return n
}
