package crash

// Failover with relay's defaults (issue 39): a member that dies, one that exits on its own fatal
// check, a storm of membership changes, and a session timeout the brokers refuse.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// failoverBound is how soon after a member's SIGKILL, or a storm's end, every partition must be
// decided by a running member with relay's defaults (issue 39): after a kill the group's session
// timeout (config.DefaultGroupSessionTimeout, 6 s), a rebalance round, the take and one checkpoint;
// after a storm up to two session timeouts (see stormLimit) and the same.
const failoverBound = 15 * time.Second

// Members SIGKILLed one after another with relay's defaults (no session.timeout.ms: the group's
// session timeout is 6 s), three running, orders flowing into 16 partitions, both
// modes: each kill's partitions are decided by the others within failoverBound, and the
// survivors' relay_partition_takeover_seconds counts them (group.kill); MariaDB is SIGKILLed and
// restarted half way (only one scripts/services.sh started). Then RELAY_TEST_FAILOVER_STORMS (1)
// storms: members join, leave (SIGTERM) and are SIGKILLed at random for RELAY_TEST_FAILOVER_STORM
// (60s), after which every partition must be decided by a live member within failoverBound (the
// test waits up to stormLimit to print how long it took). Totals exact.
//
// Long (RELAY_TEST_ELASTIC_LONG=1, make crashtest): RELAY_TEST_FAILOVER_KILLS kills per mode
// (default 20; docs/BENCHMARKS.md, "Failover"). TestElasticMembers kills with the same defaults in
// the short suite. RELAY_TEST_SEED replays which members are killed and what the storm does.
func TestElasticFailover(t *testing.T) {
	if os.Getenv("RELAY_TEST_ELASTIC_LONG") != "1" {
		t.Skip("long: RELAY_TEST_ELASTIC_LONG=1 (make crashtest)")
	}
	kills := 20
	if v, err := strconv.Atoi(os.Getenv("RELAY_TEST_FAILOVER_KILLS")); err == nil && v > 0 {
		kills = v
	}
	storm := setting(t, "RELAY_TEST_FAILOVER_STORM", 60*time.Second, time.ParseDuration)
	storms := setting(t, "RELAY_TEST_FAILOVER_STORMS", 1, strconv.Atoi)
	for _, mode := range groupModes {
		t.Run(mode.name, func(t *testing.T) { failover(t, kills, storm, storms, mode.extra...) })
	}
}

func failover(t *testing.T, kills int, storm time.Duration, stormCount int, extra ...string) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 0), 39))
	e := newEnv(t, elasticPartitions, append(slices.Clone(extra), "RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s")...)
	t.Logf("job %s topic %s (%d partitions); %d kills, storm %s, relay's default session timeout", e.job, e.topic, elasticPartitions, kills, storm)
	totals := loadgen.NewTotals()
	stop := e.produceOrders(totals, rng.Uint64())
	g := e.group()
	g.session, g.extra = 0, []string{"RELAY_KAFKA_PROPERTIES="}
	g.join(3, false)
	for k := 0; k < kills; k++ {
		if k == kills/2 {
			if _, err := harness.ServicePID("../..", "mariadb"); err != nil {
				t.Logf("MariaDB not restarted: %v", err)
			} else {
				t0 := time.Now()
				restartService(t, "mariadb")
				g.afterServerRestart(t0)
				t.Logf("MariaDB SIGKILLed and restarted; the group settled again after %s", time.Since(t0).Round(time.Millisecond))
			}
		}
		// A member that has run a while, as in production: not one still taking its partitions.
		time.Sleep(steadyFor)
		g.kill(rng.IntN(len(g.live)))
	}
	var storms []time.Duration
	for range stormCount {
		storms = append(storms, g.storm(rng, storm))
		// The next storm starts from a settled group of three, as the first did.
		if n := 3 - len(g.live); n > 0 {
			g.join(n, false)
		}
	}
	g.end(stop, totals)
	ds := slices.Clone(g.takeovers)
	slices.Sort(ds)
	if len(ds) > 0 {
		t.Logf("takeover after SIGKILL over %d kills: min %s median %s p90 %s max %s", len(ds), ds[0].Round(time.Millisecond),
			ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*9/10].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	if len(storms) > 0 {
		t.Logf("every partition decided by a running member after each storm's end: %v", rounded(storms))
	}
}

// stormLimit bounds how long after a storm's end the test waits for every partition to be decided
// by a running member, to print the time when it is past failoverBound. The classic group protocol
// removes a dead member a session timeout after its last heartbeat, or after the round it rejoined
// completed, and a round completes only once every member that has not rejoined it is removed. A
// member SIGKILLed after it rejoined a round that has not completed (a starting member, here) thus
// holds the next round back for a session timeout of its own (the broker's log shows each "has
// failed, removing it from the group" one session timeout after the previous "Stabilized"): every
// dead member is gone a session timeout after the storm's end, or one after the round they wait
// for completed, at most two session timeouts after the end.
const stormLimit = 2 * time.Minute

// storm changes the group at random for d (a member joins, leaves with SIGTERM or is SIGKILLed
// every 1-4 s; 1 to 5 run), then waits until every partition is decided by a running member since
// the storm's end, and returns how long after its end that was (at most stormLimit).
func (g *group) storm(rng *rand.Rand, d time.Duration) time.Duration {
	t := g.e.t
	t.Helper()
	var leaving []*member
	var events []string
	t0 := time.Now()
	for time.Since(t0) < d {
		time.Sleep(time.Second + time.Duration(rng.Int64N(int64(3*time.Second))))
		at := time.Since(t0).Round(100 * time.Millisecond)
		switch a := rng.IntN(3); {
		case len(g.live) <= 1 || (a == 0 && len(g.live) < 5):
			g.live = append(g.live, g.e.startMember(g.extra...))
			events = append(events, fmt.Sprintf("%s join", at))
		case a == 1:
			i := rng.IntN(len(g.live))
			_ = g.live[i].Signal(syscall.SIGTERM)
			leaving = append(leaving, g.live[i])
			g.live = slices.Delete(g.live, i, i+1)
			events = append(events, fmt.Sprintf("%s leave", at))
		default:
			i := rng.IntN(len(g.live))
			g.live[i].Kill()
			g.dead[g.live[i].key] = true
			g.live = slices.Delete(g.live, i, i+1)
			events = append(events, fmt.Sprintf("%s kill", at))
		}
	}
	end := time.Now()
	t.Logf("storm of %s from %s: %s; %d members left running", d, t0.Format("15:04:05.000"), strings.Join(events, ", "), len(g.live))
	var why string
	var at time.Time
	if !testenv.Poll(stormLimit, func() bool {
		for _, m := range g.live {
			m.exited(t)
		}
		rows, seen := g.w.state()
		if !seen.After(end) {
			why = "no ledger read yet"
			return false
		}
		keys := map[string]bool{}
		for _, m := range g.live {
			keys[m.key] = true
		}
		for p := int32(0); p < elasticPartitions; p++ {
			r := rows[p]
			if !keys[r.member] || !r.decided() || !r.updated.After(end) {
				why = fmt.Sprintf("partition %d: owner %s (running %v), decided by it %v, last decision %s", p, r.member, keys[r.member], r.decided(), r.updated.Format("15:04:05.000"))
				return false
			}
		}
		at = seen
		return true
	}) {
		t.Fatalf("after the storm, not every partition was decided by a running member within %s: %s", stormLimit, why)
	}
	took := at.Sub(end)
	t.Logf("after the storm (ended %s) every partition was decided by a running member %s after its end",
		end.Format("15:04:05.000"), took.Round(time.Millisecond))
	if took > failoverBound {
		t.Errorf("after the storm, every partition was decided by a running member only %s after its end, want within %s", took.Round(time.Millisecond), failoverBound)
	}
	for _, m := range leaving {
		if err := m.wait(t, 60*time.Second); err != nil {
			t.Fatalf("member %s did not stop cleanly on SIGTERM in the storm: %v\n%s", m.key, err, tail(m.Log, 20))
		}
	}
	return took
}

// A member that ends on its own fatal check (here its MySQL gone: every connection reset and
// refused, no failure tolerated) leaves the consumer group before it exits: the other member
// decides its partitions within seconds of its exit, long before the group's session timeout (20 s
// here) would have handed them on. The lease is short (3 s) so that branches the dead member
// left prepared, holding rows the other member writes too, are resolved by then.
func TestFatalMemberLeaves(t *testing.T) {
	const session = 20 * time.Second
	e := newEnv(t, elasticPartitions, "RELAY_JOB_LEASE=3s")
	totals := loadgen.NewTotals()
	stop := e.produceOrders(totals, 3901)
	g := e.group()
	g.session, g.extra = session, []string{fmt.Sprintf("RELAY_KAFKA_PROPERTIES=session.timeout.ms=%d", session.Milliseconds())}
	g.join(1, false)
	cfg, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	px := testenv.NewFaultProxy(t, cfg.Addr)
	cfg.Addr = px.Addr()
	g.live = append(g.live, e.startMember(append(slices.Clone(g.extra), "RELAY_MYSQL_DSN="+cfg.FormatDSN(), "RELAY_CHECKPOINT_TOLERABLE_FAILURES=0")...))
	g.settle(time.Now(), 90*time.Second, "join 1 → 2")
	time.Sleep(steadyFor)
	b := g.live[1]
	rows, _ := g.w.state()
	held := owned(rows, b.key)
	px.Close()
	err = b.wait(t, 60*time.Second)
	exited := time.Now()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("the member whose MySQL went: %v, want a failure\n%s", err, tail(b.Log, 10))
	}
	g.dead[b.key] = true
	g.live = g.live[:1]
	took := g.takenOver(held, b.key, exited, session, "member "+b.key+" after its fatal exit")
	t.Logf("member %s exited (%v); the other member decided its %d partitions %s after (session timeout %s)",
		b.key, err, len(held), took.Round(time.Millisecond), session)
	if took > session/2 {
		t.Fatalf("the partitions of the member that exited were decided %s after its exit: it did not leave the group (session timeout %s)", took, session)
	}
	g.end(stop, totals)
}

// A session timeout the brokers refuse (outside group.min.session.timeout.ms, 6 s by default, and
// group.max.session.timeout.ms, 30 min) ends the member with exit status 2 and a message naming
// the bounds, instead of retrying the join forever with its fence held and nothing read.
func TestSessionTimeoutRefused(t *testing.T) {
	e := newEnv(t, 2)
	// librdkafka wants max.poll.interval.ms at least the session timeout (config refuses less).
	for _, ms := range []int{3000, 1900000} {
		p := e.start("RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1", fmt.Sprintf("RELAY_KAFKA_PROPERTIES=session.timeout.ms=%d,max.poll.interval.ms=%d", ms, max(ms, 600000)))
		err := p.wait(t, 60*time.Second)
		var ee *exec.ExitError
		msg := tail(p.Log, 3)
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(msg, "group.min.session.timeout.ms=6000 to group.max.session.timeout.ms=1800000") ||
			!strings.Contains(msg, fmt.Sprintf("session.timeout.ms=%d", ms)) {
			t.Fatalf("session.timeout.ms=%d: %v, want exit status 2 naming it and the brokers' bounds:\n%s", ms, err, msg)
		}
		t.Logf("session.timeout.ms=%d: %v: %s", ms, err, strings.TrimSpace(tail(p.Log, 1)))
	}
}

// A group job under full load for RELAY_TEST_SOAK (e.g. 10m; skipped unset) with relay's defaults
// (session timeout 6 s): three members, 16 partitions, checkpoint.interval
// RELAY_TEST_SOAK_INTERVAL (default 1s), 4 loads of RELAY_TEST_SOAK_RATE orders a second each
// (default 2500) in transactions of 200. No member may handle a rebalance after the group settled
// (relay_rebalances_total of every kind unchanged, none lost) and none may exit; totals exact.
// docs/BENCHMARKS.md, "Failover", gives the command and the numbers.
func TestElasticSoak(t *testing.T) {
	soak := setting(t, "RELAY_TEST_SOAK", 0, time.ParseDuration)
	if soak <= 0 {
		t.Skip("RELAY_TEST_SOAK=10m runs it")
	}
	interval := setting(t, "RELAY_TEST_SOAK_INTERVAL", time.Second, time.ParseDuration)
	rate := setting(t, "RELAY_TEST_SOAK_RATE", 2500.0, parseFloat)
	for _, mode := range groupModes {
		t.Run(mode.name, func(t *testing.T) { elasticSoak(t, soak, interval, rate, mode.extra...) })
	}
}

func elasticSoak(t *testing.T, soak, interval time.Duration, rate float64, extra ...string) {
	e := newEnv(t, elasticPartitions, append(slices.Clone(extra), "RELAY_CHECKPOINT_INTERVAL="+interval.String())...)
	totals := loadgen.NewTotals()
	// Ten minutes at full load commit ~10 M records, 1-2 GB of payloads: the oracle refolds them
	// all, so the totals keep them (the box has the memory; loadgen's default bound is for short runs).
	totals.Keep(16 << 30)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := make(chan error, producers)
	for i := uint64(0); i < producers; i++ {
		go func() {
			err := e.produce(ctx, totals, loadgen.Options{Orders: 1 << 30, Rate: rate, Batch: 200, AbortRate: 0.05, BadRate: 0.001,
				SKUs: 500, Windows: 20, Seed: 3900 + i, TxnID: fmt.Sprintf("soak%d-%s", i, e.topic)})
			if ctx.Err() != nil {
				err = nil
			}
			produced <- err
		}()
	}
	g := e.group()
	g.interval, g.session, g.extra = interval, 0, []string{"RELAY_KAFKA_PROPERTIES="}
	g.join(3, false)
	// The count starts once the joins' rebalance is over: settled (every partition decided by a
	// running member) can hold while the cooperative protocol's second round still moves a
	// partition, which a soak would otherwise count as its own.
	var before map[string]memberStats
	if !testenv.Poll(time.Minute, func() bool {
		prev := before
		before = map[string]memberStats{}
		for _, m := range g.live {
			before[m.key] = g.scrape(m)
		}
		time.Sleep(5 * time.Second)
		return prev != nil && rebalancesOf(prev) == rebalancesOf(before)
	}) {
		t.Fatalf("the members' rebalances did not stop changing after the joins: %s", rebalancesOf(before))
	}
	t0 := time.Now()
	for time.Since(t0) < soak {
		time.Sleep(10 * time.Second)
		for _, m := range g.live {
			m.exited(t)
		}
	}
	var changed []string
	for _, m := range g.live {
		b, s := before[m.key], g.scrape(m)
		for _, k := range []string{"assigned", "revoked", "lost"} {
			if d := s.rebalances[k] - b.rebalances[k]; d != 0 {
				changed = append(changed, fmt.Sprintf("%s %s +%.0f", m.key, k, d))
			}
		}
	}
	cancel()
	for range producers {
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
	}
	_, bad, good := totals.Snapshot()
	t.Logf("soak of %s at checkpoint.interval %s: %d good orders (%.0f a second), %d bad; rebalances during it: %d %v",
		soak, interval, good, float64(good)/time.Since(t0).Seconds(), len(bad), len(changed), changed)
	if len(changed) > 0 {
		t.Fatalf("the group rebalanced during the soak: %v", changed)
	}
	g.finish(totals)
	g.report()
}

// rebalancesOf lists each member's rebalance counts by kind, in a stable order.
func rebalancesOf(stats map[string]memberStats) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(stats)) {
		out = append(out, fmt.Sprintf("%s %v", k, stats[k].rebalances))
	}
	return strings.Join(out, "; ")
}
