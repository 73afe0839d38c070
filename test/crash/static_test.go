package crash

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// Static membership (kafka.group_instance_id, a StatefulSet's pod names): a member SIGKILLed and
// started again under the same id within the group's session timeout (relay's default, 6 s) gets its partitions back without waiting for the session timeout and without a rebalance
// of the others, takes its own fence again (same ledger key) and the totals are exact; its
// relay_partition_takeover_seconds measures the restart.
func TestStaticMemberRestart(t *testing.T) {
	e := newEnv(t, 8)
	ctx := context.Background()
	totals := loadgen.NewTotals()
	member := func(id string) []string {
		return []string{"RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1", "RELAY_KAFKA_GROUP_INSTANCE_ID=" + id,
			"RELAY_KAFKA_PROPERTIES="}
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
	// Not a speed claim: a dynamic member's partitions would wait out the session timeout of the
	// dead one before anyone read them; a static one's come back with the restart, and the
	// survivor sees no rebalance only if that is within the session timeout.
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
	// Its partitions were decided last by its own key, in the process killed: each is a takeover
	// (from that decision to the restarted member's first), observed once committed.
	restarted := groupMember(t, b)
	var st memberStats
	testenv.Eventually(t, 10*time.Second, func() bool { st = restarted.stats(t); return st.takeovers > 0 }, "relay_partition_takeover_seconds of the restarted member")
	t.Logf("restarted static member: relay_partition_takeover_seconds %d partitions, mean %s", st.takeovers,
		time.Duration(st.takeoverSum/float64(st.takeovers)*float64(time.Second)).Round(time.Millisecond))
	e.stopAll([]*proc{a, b})
	if d := e.diffOracle(x); d != "" {
		t.Fatalf("totals differ after the stop:\n%s", d)
	}
	if bs := e.branches(); len(bs) != 0 {
		t.Fatalf("XA RECOVER still lists %d branches of the job: %v", len(bs), bs)
	}
}

// A second process started with a running member's static id (a copied StatefulSet pod, a
// misconfigured replica) is refused at its fence, and must not touch the group first: joining
// with the same group.instance.id would fence the running member out of the group (a fatal error
// there), leaving neither. The running member keeps its partitions, with no rebalance, and the
// totals are exact.
func TestDuplicateStaticMemberRefused(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	totals := loadgen.NewTotals()
	member := []string{"RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1", "RELAY_KAFKA_GROUP_INSTANCE_ID=m0", "RELAY_JOB_LEASE=3s",
		"RELAY_KAFKA_PROPERTIES=session.timeout.ms=6000,heartbeat.interval.ms=500"}
	a := e.start(member...)
	testenv.Eventually(t, 60*time.Second, func() bool { return holds(t, a) }, "the member to take its partitions")
	before := len(logEvents(t, a.Log, "rebalance"))
	dup := e.start(member...)
	err := dup.wait(t, 60*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(tail(dup.Log, 3), "running elsewhere") {
		t.Fatalf("the duplicate member: %v, want exit status 3, refused at its fence:\n%s", err, tail(dup.Log, 5))
	}
	// The running member outlives the duplicate by more than the group's session timeout, and
	// the group did not move its partitions meanwhile.
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 1000, Batch: 100, SKUs: 20, Windows: 2, Seed: 94}); err != nil {
		t.Fatal(err)
	}
	x := e.expected(totals)
	if !testenv.Poll(30*time.Second, func() bool { a.exited(t); return e.diffOracle(x) == "" }) {
		t.Fatalf("totals not caught up with the duplicate refused:\n%s", e.diffOracle(x))
	}
	time.Sleep(7 * time.Second)
	a.exited(t)
	if n := len(logEvents(t, a.Log, "rebalance")) - before; n != 0 {
		t.Fatalf("the running member saw %d rebalance events after the duplicate started, want none", n)
	}
	e.stopAll([]*proc{a})
	if d := e.diffOracle(x); d != "" {
		t.Fatalf("totals differ after the stop:\n%s", d)
	}
}

// holds reports whether member p took partitions in the ledger (the group assigned them).
func holds(t *testing.T, p *proc) bool {
	for _, ev := range logEvents(t, p.Log, "partitions taken") {
		if epochs, _ := ev["owner_epochs"].(map[string]any); len(epochs) > 0 {
			return true
		}
	}
	return false
}

// partitionMembers counts the members holding partitions of the job in the ledger.
func (e *env) partitionMembers() int {
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(DISTINCT member) FROM relay_partition_owners WHERE job = ?`, e.job).Scan(&n); err != nil {
		return 0
	}
	return n
}

// A member killed after committing its branches but before marking its checkpoint COMMITTED leaves
// a COMMITTING row that no recovery of its key will ever finish (a member's key is its process's):
// a live member's resolver marks it once the dead member's lease ran out, so the ledger shows no
// checkpoint in flight.
func TestDeadMemberCheckpointMarked(t *testing.T) {
	e := newEnv(t, 4, "RELAY_JOB_LEASE=3s")
	ctx := context.Background()
	totals := loadgen.NewTotals()
	group := []string{"RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1"}
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 500, Batch: 100, SKUs: 20, Windows: 2, Seed: 93}); err != nil {
		t.Fatal(err)
	}
	e.crashAt(crashpoint.AfterCommit, group...)
	committing := func() int {
		n := 0
		for _, st := range e.ledgerRows() {
			if st == "COMMITTING" {
				n++
			}
		}
		return n
	}
	if committing() == 0 {
		t.Fatal("the killed member left no COMMITTING checkpoint")
	}
	live := e.start(group...)
	testenv.Eventually(t, 30*time.Second, func() bool { return committing() == 0 }, "the live member's resolver to mark the dead member's checkpoint")
	x := e.expected(totals)
	if !testenv.Poll(60*time.Second, func() bool { live.exited(t); return e.diffOracle(x) == "" }) {
		t.Fatalf("totals differ:\n%s", e.diffOracle(x))
	}
	e.stopAll([]*proc{live})
}

// A member fenced out of the group by the broker (another client joined with its static
// group.instance.id: a fatal error of its group client) exits, with the cause, instead of
// staying up without partitions; started again, it takes its partitions back and the totals are
// exact.
func TestMemberFencedByGroupExits(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	totals := loadgen.NewTotals()
	member := []string{"RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1", "RELAY_KAFKA_GROUP_INSTANCE_ID=m0",
		"RELAY_KAFKA_PROPERTIES=session.timeout.ms=6000,heartbeat.interval.ms=500"}
	a := e.start(member...)
	testenv.Eventually(t, 60*time.Second, func() bool { return holds(t, a) }, "the member to take its partitions")
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 500, Batch: 100, SKUs: 20, Windows: 2, Seed: 95}); err != nil {
		t.Fatal(err)
	}
	intruder, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "group.id": "relay-" + e.job,
		"group.instance.id": "m0", "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000})
	if err != nil {
		t.Fatal(err)
	}
	if err := intruder.SubscribeTopics([]string{e.topic}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for a.Alive() && time.Now().Before(deadline) {
		intruder.Poll(100)
	}
	_ = intruder.Close()
	err = a.wait(t, time.Second)
	var ee *exec.ExitError
	// Status 1, not 3 (cmd/relay/exit.go): no relay holds the member's fence, and the member is to
	// be restarted, when it rejoins under its id; 3 says "the job runs elsewhere: stop this one".
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(tail(a.Log, 3), "consumer group") {
		t.Fatalf("the fenced member: %v, want exit status 1 naming the consumer group:\n%s", err, tail(a.Log, 5))
	}
	t.Logf("fenced member exited: %v", err)
	a = e.start(member...)
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 500, Batch: 100, SKUs: 20, Windows: 2, Seed: 96}); err != nil {
		t.Fatal(err)
	}
	x := e.expected(totals)
	if !testenv.Poll(60*time.Second, func() bool { a.exited(t); return e.diffOracle(x) == "" }) {
		t.Fatalf("totals not caught up after the restart:\n%s", e.diffOracle(x))
	}
	e.stopAll([]*proc{a})
}
