package galera

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// groupMember is the environment of a member of the job's consumer group (membership group, one
// subtask). The group's session timeout is 6 s so that a dead or frozen member loses its
// partitions within the test; the lease is 30 s so that a member frozen past the session timeout
// still has a live lease when it wakes and really sends its COMMIT: what must refuse it is the
// partition owner rows, not the lease deadline.
var groupMember = []string{"RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1", "RELAY_JOB_LEASE=30s",
	"RELAY_KAFKA_PROPERTIES=session.timeout.ms=6000,heartbeat.interval.ms=500"}

// memberKey is the ledger key (<job>/g/<id>) of a group member, from its log.
func memberKey(t *testing.T, r *harness.Relay) string {
	t.Helper()
	l, err := r.WaitLog(func(l harness.LogLine) bool { return l.Msg == "membership group" }, 60*time.Second)
	if err != nil {
		t.Fatalf("relay did not start as a group member: %v\n%s", err, harness.Tail(r.Log, 20))
	}
	return fmt.Sprint(l.Fields["member"])
}

// partitionOwners is every owner row of the job's topic, read through the ledger on node 3 with
// causal reads (none before a member created the table).
func (e *env) partitionOwners() []ledger.PartitionOwner {
	g, err := ledger.New(e.check, e.job).Members(context.Background())
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var out []ledger.PartitionOwner
	for _, p := range g.Partitions {
		if p.Topic == e.topic {
			out = append(out, p)
		}
	}
	return out
}

// owners counts the partitions whose owner row names each member.
func (e *env) owners() map[string]int {
	out := map[string]int{}
	for _, p := range e.partitionOwners() {
		out[p.Member]++
	}
	return out
}

// partitionsOf lists the partitions whose owner row names member.
func (e *env) partitionsOf(member string) []int32 {
	var out []int32
	for _, p := range e.partitionOwners() {
		if p.Member == member {
			out = append(out, p.Partition)
		}
	}
	return out
}

// resumed says whether every partition of parts is in the offsets a session read after since
// (about to read records), at its start or at a take while it ran, in one of rs's logs.
func (e *env) resumed(parts []int32, since time.Time, rs ...*harness.Relay) bool {
	seen := map[string]bool{}
	for _, r := range rs {
		// A session reads from the offsets it logs when it starts ("recovered") or when it takes
		// partitions while it runs ("partitions added").
		for _, l := range append(logLines(e.t, r.Log, "recovered"), logLines(e.t, r.Log, "partitions added")...) {
			if !l.TS.After(since) {
				continue
			}
			offs, _ := l.Fields["offsets"].(map[string]any)
			ps, _ := offs[e.topic].(map[string]any)
			for p := range ps {
				seen[p] = true
			}
		}
	}
	for _, p := range parts {
		if !seen[fmt.Sprint(p)] {
			return false
		}
	}
	return true
}

// takenFrom waits until no partition's owner row names key (the others took all of them), and
// says how long that took from since.
func (e *env) takenFrom(key string, since time.Time, alive ...*harness.Relay) time.Duration {
	e.t.Helper()
	if !testenv.Poll(60*time.Second, func() bool {
		for _, r := range alive {
			if !r.Alive() {
				e.t.Fatalf("relay exited: %v\n%s", r.Err(), harness.Tail(r.Log, 30))
			}
		}
		return e.owners()[key] == 0
	}) {
		e.t.Fatalf("member %s still owns partitions 60 s later: %v", key, e.owners())
	}
	return time.Since(since)
}

// zombieOutcome is how the session of a member frozen before its COMMIT ended once woken, from its
// log after the crash point: "epoch" (its decision's owner row write found another member's epoch:
// ErrPartitionTaken, counted in relay_fenced_decisions_total), "certification" (1213 at COMMIT,
// relay_restarts_total{cause="commit_conflict"}), "lost" (librdkafka reported the assignment lost
// first, and ending the session cancelled the COMMIT in flight: relay logs and counts nothing of
// it, and the COMMIT may still have reached the server, so only the cluster says whether it was
// refused), "other", or "" while the session runs.
func zombieOutcome(t *testing.T, r *harness.Relay) (how, detail string) {
	lines, err := harness.ReadLog(r.Log)
	if err != nil {
		t.Fatal(err)
	}
	woke := false
	for _, l := range lines {
		switch {
		case strings.Contains(l.Text, "crashpoint: stopping at held-before-commit"):
			woke = true
		case !woke:
		case l.Msg == "rebalance" && l.Fields["kind"] == "lost":
			return "lost", fmt.Sprintf("partitions %v lost", l.Fields["partitions"])
		case l.Msg == "session failed; restarting in-process through recovery":
			msg := fmt.Sprint(l.Fields["error"])
			switch {
			case strings.Contains(msg, ledger.ErrPartitionTaken.Error()):
				return "epoch", msg
			case l.Fields["cause"] == "commit_conflict":
				return "certification", msg
			}
			return "other", fmt.Sprintf("%s (cause %v)", msg, l.Fields["cause"])
		}
	}
	return "", ""
}

// wsrepCounters reads node's counters of local transactions aborted by a replicated write set
// (wsrep_local_bf_aborts) and refused by certification (wsrep_local_cert_failures).
func wsrepCounters(t *testing.T, node int) (bfAborts, certFailures int64) {
	t.Helper()
	db, err := harness.Open(testenv.Galera(t)[node-1])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_bf_aborts', 'wsrep_local_cert_failures')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		if name == "wsrep_local_bf_aborts" {
			bfAborts = v
		} else {
			certFailures = v
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return bfAborts, certFailures
}

// TestGroupMembersAcrossNodes runs three members of one job's consumer group on the three nodes
// (A on node 1 and B on node 2, C joining on node 3), 12 partitions, orders streaming in. B freezes
// (SIGSTOP) just before a COMMIT, its data, offsets and partition owner rows written, past the
// group's session timeout: A and C take its partitions on their nodes, where B's row locks do not
// exist, and resume them (read their offsets). B is woken (SIGCONT) right then, before the new
// owners decide those partitions, and its COMMIT must not count. Only the owner rows stand in its
// way: the orders fall on a sparse key space (20000 SKUs, 200 windows), so B's open transaction
// shares no aggregate row with what A and C commit while it is frozen, and the takes write no
// offset row. The cluster must refuse it, on node 2 (which runs only B): the takes' owner rows,
// applied there, abort B's transaction (wsrep_local_bf_aborts), or certification fails its COMMIT
// (wsrep_local_cert_failures), or its owner row write finds the new epochs (ErrPartitionTaken).
// Then A is SIGKILLed and B and C take its partitions. Totals exact; the takeover times and how
// B's COMMIT was refused are printed. Without the owner row writes of decisions (stampPartitions
// returning nil) node 2 counted nothing and B's COMMIT doubled its 40 orders, 3 runs of 3.
func TestGroupMembersAcrossNodes(t *testing.T) {
	e := newEnv(t, 12)
	totals := loadgen.NewTotals()
	sd := testenv.Seed(t, "RELAY_TEST_SEED", 0)
	stop := e.streamOrders(totals, 1500, sd, func(o *loadgen.Options) { o.SKUs, o.Windows = 20000, 200 })
	a := e.start(1, groupMember...)
	n := 30 + int(sd%20)
	b := e.start(2, append([]string{fmt.Sprintf("RELAY_CRASH_AT=held-before-commit:%d", n), "RELAY_CRASH_ACTION=stop"}, groupMember...)...)
	keyA, keyB := memberKey(t, a), memberKey(t, b)
	testenv.Eventually(t, 60*time.Second, func() bool { o := e.owners(); return o[keyA] > 0 && o[keyB] > 0 },
		"members on node 1 and node 2 to take partitions")
	c := e.start(3, groupMember...)
	keyC := memberKey(t, c)

	// B freezes itself at its n-th COMMIT; the group evicts it after the session timeout and the
	// others take its partitions.
	if !testenv.Poll(90*time.Second, func() bool {
		return strings.Contains(harness.Tail(b.Log, 50), "crashpoint: stopping at held-before-commit") || !b.Alive()
	}) || !b.Alive() {
		t.Fatalf("member B never reached the crash point (alive %v)\n%s", b.Alive(), harness.Tail(b.Log, 30))
	}
	testenv.Eventually(t, 10*time.Second, b.Stopped, "member B to stop itself at the crash point")
	frozen := time.Now()
	frozenOwners := e.owners()
	lost := e.partitionsOf(keyB)
	bf0, _ := wsrepCounters(t, 2)
	// Woken as soon as the new owners took B's partitions and resumed them (their offsets read),
	// before their first decision of them: a poll at the pace of a query, not testenv.Poll's
	// back-off. B's COMMIT then lands where only the owner rows stand in its way.
	deadline := time.Now().Add(60 * time.Second)
	for e.owners()[keyB] > 0 || !e.resumed(lost, frozen, a, c) {
		if time.Now().After(deadline) || !a.Alive() || !c.Alive() {
			t.Fatalf("B's partitions %v not taken and resumed 60 s after it froze (A alive %v, C alive %v): %v", lost, a.Alive(), c.Alive(), e.owners())
		}
	}
	zombieTakeover := time.Since(frozen)
	bf1, cf1 := wsrepCounters(t, 2)
	if err := b.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var how, detail string
	if !testenv.Poll(60*time.Second, func() bool {
		how, detail = zombieOutcome(t, b)
		return how != "" || !b.Alive()
	}) || how == "" {
		t.Fatalf("the woken member's session did not end (alive %v)\n%s", b.Alive(), harness.Tail(b.Log, 30))
	}
	if how == "other" {
		t.Fatalf("the woken member's session failed neither on the owner rows' epochs nor by certification: %s\n%s", detail, harness.Tail(b.Log, 30))
	}
	// B's next session started: whatever its COMMIT met has happened.
	testenv.Eventually(t, 60*time.Second, func() bool {
		ls := logLines(t, b.Log, "partitions taken")
		return len(ls) > 0 && ls[len(ls)-1].TS.After(frozen)
	}, "the woken member to start a new session")
	_, cf2 := wsrepCounters(t, 2)
	// Node 2 runs nothing but B: a refusal by the cluster is counted there, either while B was
	// frozen (the take's owner rows, applied on node 2, abort B's transaction, which holds them)
	// or at its COMMIT (certification).
	// Errorf, not Fatalf: the totals below say what the COMMIT did.
	if how != "epoch" && how != "certification" && bf1-bf0+cf2-cf1 == 0 {
		t.Errorf("B's COMMIT after its partitions were taken was refused neither by the owner rows' epochs nor by the cluster (node 2: %+d BF aborts while frozen, %+d certification failures after); its session ended by %s: %s",
			bf1-bf0, cf2-cf1, how, detail)
	}

	// A dies: B (back in the group) and C take its partitions.
	e.waitDecided(c, 60*time.Second)
	killedOwners := e.owners()
	a.Kill()
	killed := time.Now()
	killTakeover := e.takenFrom(keyA, killed, b, c)
	e.waitDecided(c, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*harness.Relay{b, c} {
		if err := r.Stop(60 * time.Second); err != nil {
			t.Fatalf("member did not stop cleanly: %v\n%s", err, harness.Tail(r.Log, 30))
		}
	}
	t.Logf("members A %s (node 1), B %s (node 2), C %s (node 3); 12 partitions", keyA, keyB, keyC)
	t.Logf("B frozen before its COMMIT (crash point passed %d times) owning partitions %v (owners %v): taken and resumed by A and C %s later, then woken",
		n, lost, frozenOwners, zombieTakeover.Round(time.Millisecond))
	t.Logf("B's session ended by %s: %s; node 2: %+d local transactions aborted by replicated writes while B was frozen (wsrep_local_bf_aborts), %+d refused by certification after it woke (wsrep_local_cert_failures)",
		how, detail, bf1-bf0, cf2-cf1)
	t.Logf("A SIGKILLed owning %d partitions (%v): taken by B and C %s later; %d good orders",
		killedOwners[keyA], killedOwners, killTakeover.Round(time.Millisecond), totals.Good)
	e.finish(totals, groupMember...)
}
