// Package galera runs the real relay binary (built with the crashpoints tag) against a real
// 3-node MariaDB Galera cluster (scripts/galera.sh) and the real Kafka, and compares exact totals.
//
// Invariant of every test here: what the cluster holds at the end, read with causal reads on a
// node the test never faults, equals what the committed Kafka transactions carried; each test
// leaves the cluster with every node running and synced, for the next one.
package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

var relayBin string

func TestMain(m *testing.M) { testenv.MainWithRelay(m, &relayBin) }

// long reports whether the long version runs (make crashtest sets RELAY_TEST_GALERA_LONG=1).
func long() bool { return os.Getenv("RELAY_TEST_GALERA_LONG") == "1" }

// scaled is n in the short version, n*k in the long one.
func scaled(n, k int) int {
	if long() {
		return n * k
	}
	return n
}

// env is one job on the cluster.
type env struct {
	t       *testing.T
	job     string
	topic   string
	brokers string
	dsns    []string // the job's database through node 1, 2, 3
	check   *sql.DB  // node 3, causal reads: the test's view of the cluster
	dir     string
	logs    []string
}

func newEnv(t *testing.T, partitions int) *env {
	admin := testenv.Galera(t)
	e := &env{t: t, job: "g" + testenv.Suffix(), topic: testenv.Topic(t, partitions), brokers: testenv.Brokers(t), dir: t.TempDir()}
	// Every node back and synced, for the next test, whatever this one did to them.
	t.Cleanup(func() { testenv.GaleraScript(t, "up") })
	t.Cleanup(e.keepLogsIfFailed)
	d, err := harness.CreateDatabase(admin[2], "relay_g_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Drop() })
	for _, a := range admin {
		cfg, err := mysql.ParseDSN(a)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = d.Name
		e.dsns = append(e.dsns, cfg.FormatDSN())
		// DDL replicates like the rest: wait until this node has the database.
		db, err := harness.Open(cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		if !testenv.Poll(20*time.Second, func() bool { return db.Ping() == nil }) {
			t.Fatalf("database %s did not reach %s: %v", d.Name, cfg.Addr, db.Ping())
		}
		db.Close()
	}
	cfg, err := mysql.ParseDSN(e.dsns[2])
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = map[string]string{"wsrep_sync_wait": "1"}
	if e.check, err = harness.Open(cfg.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.check.Close() })
	return e
}

// keepLogsIfFailed keeps the relay logs of a failed test (of every test with RELAY_TEST_KEEP_LOGS=1).
func (e *env) keepLogsIfFailed() {
	if (!e.t.Failed() && os.Getenv("RELAY_TEST_KEEP_LOGS") != "1") || len(e.logs) == 0 {
		return
	}
	dst := filepath.Join(os.TempDir(), "relay-galera-logs", strings.NewReplacer("/", "_").Replace(e.t.Name())+"-"+e.job)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return
	}
	for _, l := range e.logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(l)), b, 0o644)
		}
	}
	e.t.Logf("relay logs kept in %s", dst)
}

// start runs relay run against node (1-based); extra holds RELAY_* variables.
func (e *env) start(node int, extra ...string) *harness.Relay {
	logPath := filepath.Join(e.dir, fmt.Sprintf("relay-%d-node%d.log", len(e.logs)+1, node))
	e.logs = append(e.logs, logPath)
	env := append(os.Environ(),
		"RELAY_JOB_NAME="+e.job,
		"RELAY_KAFKA_BROKERS="+e.brokers,
		"RELAY_KAFKA_TOPICS="+e.topic,
		"RELAY_MYSQL_DSN="+e.dsns[node-1],
		"RELAY_SUBTASKS=2",
		"RELAY_CHECKPOINT_INTERVAL=100ms",
		"RELAY_CHECKPOINT_TIMEOUT=20s",
		"RELAY_MYSQL_LOCK_WAIT_TIMEOUT=10s",
		"RELAY_HTTP_ADDR=127.0.0.1:0",
		"RELAY_LOG_LEVEL=info",
		"RELAY_MODE=held",
	)
	r, err := harness.Start(harness.Options{Bin: relayBin, Args: []string{"run"}, Log: logPath, Env: append(env, extra...)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(r.Kill)
	return r
}

// streamOrders produces orders in Kafka transactions (some aborted, some bad) at rate until the
// returned stop is called; stop returns the producer's error. opts change the load's options.
func (e *env) streamOrders(totals *loadgen.Totals, rate float64, seed uint64, opts ...func(*loadgen.Options)) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := loadgen.Options{Brokers: e.brokers, Topic: e.topic, TxnID: "lg-" + e.topic + fmt.Sprint(seed),
		Orders: 1 << 30, Rate: rate, Batch: 40, AbortRate: 0.1, BadRate: 0.005, SKUs: 300, Windows: 30, Seed: seed}
	for _, f := range opts {
		f(&o)
	}
	go func() { done <- loadgen.Run(ctx, o, totals) }()
	return func() error {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
}

// mismatch compares the aggregate tables with the totals: the keys that differ, the first few of
// them as MySQL prints them, and the sum over all keys of got - want in the first measure (the
// order count of the default spec: > 0 doubled, < 0 missing).
func (e *env) mismatch(want loadgen.Tables) (keys int, first []string, delta float64) {
	p := want.Plan
	for a, table := range p.Tables() {
		rows, err := p.Read(context.Background(), e.check, a)
		if err != nil {
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1146 { // no table yet: relay never started
				e.t.Fatal(err)
			}
		}
		key, _ := p.ColumnNames(a)
		measure := func(r *spec.Row) float64 {
			if r == nil {
				return 0
			}
			cols, err := p.Format(a, *r)
			if err != nil || len(cols) <= len(key) {
				return 0
			}
			v, _ := strconv.ParseFloat(cols[len(key)], 64)
			return v
		}
		spec.Compare(want.Rows[a], rows, func(w, g *spec.Row) {
			keys++
			delta += measure(g) - measure(w)
			if len(first) < 8 {
				show := func(r *spec.Row) string {
					if r == nil {
						return "none"
					}
					cols, err := p.Format(a, *r)
					if err != nil {
						return err.Error()
					}
					return fmt.Sprint(cols)
				}
				first = append(first, fmt.Sprintf("%s: want %s, got %s", table, show(w), show(g)))
			}
		})
	}
	return keys, first, delta
}

// finish runs relay on node 3 (with extra RELAY_* variables: a group job's member) until the
// cluster holds the totals (or a deadline), stops it with SIGTERM and fails the test on any
// difference.
func (e *env) finish(totals *loadgen.Totals, extra ...string) {
	t := e.t
	want, _, _ := totals.Snapshot()
	r := e.start(3, extra...)
	// SIGTERM before its handler is installed would kill it: wait until it runs.
	if _, err := r.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, 120*time.Second); err != nil {
		t.Fatalf("relay on node 3 did not recover: %v\n%s", err, harness.Tail(r.Log, 30))
	}
	testenv.Poll(120*time.Second, func() bool {
		if n, _, _ := e.mismatch(want); n == 0 {
			return true
		}
		if !r.Alive() {
			t.Fatalf("relay exited while finishing: %v\n%s", r.Err(), harness.Tail(r.Log, 30))
		}
		return false
	})
	if err := r.Stop(60 * time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, harness.Tail(r.Log, 30))
	}
	if n, first, delta := e.mismatch(want); n != 0 {
		var read int64
		offs, _, _ := ledger.New(e.check, e.job).PartitionOffsets(context.Background())
		for _, parts := range offs {
			read += harness.Total(parts)
		}
		end, _ := harness.EndOffsets(e.brokers, e.topic)
		t.Fatalf("totals differ from what Kafka committed in %d keys, %+.0f in the first measure (%d good records committed to Kafka; the ledger's offsets reach %d of the topic's %d):\n%s",
			n, delta, totals.Good, read, harness.Total(end), strings.Join(first, "\n"))
	}
}

// exitCode is the process's exit status (-1 when killed by a signal).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1
		}
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -2
}

// count is how many log lines of every relay run so far carry msg.
func (e *env) count(msg string) int {
	n := 0
	for _, l := range e.logs {
		lines, _ := harness.Events(l, msg)
		n += len(lines)
	}
	return n
}

// TestTwoNodesOneJob runs two processes of one job at once, one on node 1 and one on node 2, each
// restarted 0.3 s after it exits, while orders stream in (100 ms checkpoints). GET_LOCK is local to
// a node, so the second process is not refused by the lock: the fence must hold through the
// written owner row (one of two deciders fails certification, or reads a newer epoch), and the
// second process is refused at start while the first renews its lease. Totals stay exact.
func TestTwoNodesOneJob(t *testing.T) {
	e := newEnv(t, 4)
	totals := loadgen.NewTotals()
	stop := e.streamOrders(totals, 3000, testenv.Seed(t, "RELAY_TEST_SEED", 0))
	ss := []*supervised{e.supervise(1), e.supervise(2)}
	runFor(time.Duration(scaled(25, 8))*time.Second, ss...)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Counted before the stop: once the owner stops (cleanly), the other node's latest start may
	// take the job, as it should.
	fenced, took := e.count("job fenced"), e.count("took the job over")
	for _, s := range ss {
		_ = s.r.Stop(60 * time.Second)
		t.Logf("node %d: %d starts, exits by status %v", s.node, s.starts, s.exits)
	}
	t.Logf("%d good orders committed to Kafka; the job was taken %d times, %d of them by lease; %d starts refused (another node renews)",
		totals.Good, fenced, took, e.refusedElsewhere())
	e.finish(totals)
	// The second process is refused while the first renews: the job is taken once at the start
	// (the two first processes start together: one wins, the other is refused), then changes hands
	// only when an owner stops (by lease), not at every restart of the other (which would be a
	// process restart per hand-over, and two owners racing each time).
	if fenced > 1+took {
		t.Fatalf("the job was taken %d times (%d by lease): the second process was not refused at start", fenced, took)
	}
}

// refusedElsewhere counts the runs that exited because the job runs on another Galera node.
func (e *env) refusedElsewhere() int {
	n := 0
	for _, l := range e.logs {
		for _, line := range logLines(e.t, l, "relay stopped") {
			if strings.Contains(fmt.Sprint(line.Fields["error"]), "running on another Galera node") {
				n++
			}
		}
	}
	return n
}

// admin runs a statement as the cluster's admin user on node (1-based).
func admin(t *testing.T, node int, q string) {
	t.Helper()
	db, err := harness.Open(testenv.Galera(t)[node-1])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("node %d: %s: %v", node, q, err)
	}
}

// lastCheckpoint is the highest checkpoint id among the job's offset rows (0: none yet).
func (e *env) lastCheckpoint() int64 {
	_, id, err := ledger.New(e.check, e.job).PartitionOffsets(context.Background())
	var me *mysql.MySQLError
	if err != nil && !(errors.As(err, &me) && me.Number == 1146) {
		e.t.Fatal(err)
	}
	return id
}

// waitCheckpointAbove waits until the job committed a checkpoint above id.
func (e *env) waitCheckpointAbove(r *harness.Relay, id int64, d time.Duration) {
	e.t.Helper()
	if !testenv.Poll(d, func() bool {
		if r != nil && !r.Alive() {
			e.t.Fatalf("relay exited: %v\n%s", r.Err(), harness.Tail(r.Log, 30))
		}
		return e.lastCheckpoint() > id
	}) {
		e.t.Fatalf("no checkpoint above %d within %s", id, d)
	}
}

// waitDecided waits until the job committed a decision after this call: the offsets its ledger
// holds, summed, grow. (A group's members take checkpoint ids from blocks of their own, so a
// decision of a member whose block lies below a dead member's is no checkpoint "above" it.)
func (e *env) waitDecided(r *harness.Relay, d time.Duration) {
	e.t.Helper()
	total := func() int64 {
		offs, _, err := ledger.New(e.check, e.job).PartitionOffsets(context.Background())
		if err != nil {
			return -1
		}
		return harness.Total(offs[e.topic])
	}
	base := total()
	if !testenv.Poll(d, func() bool {
		if r != nil && !r.Alive() {
			e.t.Fatalf("relay exited: %v\n%s", r.Err(), harness.Tail(r.Log, 30))
		}
		return total() > base
	}) {
		e.t.Fatalf("no decision advanced the offsets (%d) within %s", base, d)
	}
}

// TestXARefused: mode xa on a Galera node is refused by relay run within seconds, before anything
// is written, and by preflight, both naming held mode. With mode unset relay picks held and says so.
func TestXARefused(t *testing.T) {
	e := newEnv(t, 2)
	start := time.Now()
	r := e.start(1, "RELAY_MODE=xa")
	err := r.Wait(30 * time.Second)
	took := time.Since(start)
	if err == nil || errors.Is(err, harness.ErrNoExit) {
		t.Fatalf("relay run with mode xa on Galera: %v, want a refusal\n%s", err, harness.Tail(r.Log, 20))
	}
	if took > 10*time.Second {
		t.Fatalf("relay took %s to refuse mode xa", took)
	}
	log := harness.Tail(r.Log, 5)
	for _, want := range []string{"Galera", "mode held", "1235"} {
		if !strings.Contains(log, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, log)
		}
	}
	var tables int
	if err := e.check.QueryRow(`SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("relay refused mode xa but created %d tables", tables)
	}
	t.Logf("relay run refused mode xa in %s (exit %d)", took.Round(time.Millisecond), exitCode(err))

	pf := exec.Command(relayBin, "preflight")
	pf.Env = append(os.Environ(), "RELAY_JOB_NAME="+e.job, "RELAY_KAFKA_BROKERS="+e.brokers, "RELAY_KAFKA_TOPICS="+e.topic,
		"RELAY_MYSQL_DSN="+e.dsns[0], "RELAY_MODE=xa")
	out, perr := pf.CombinedOutput()
	if perr == nil || !strings.Contains(string(out), "FAIL galera: Galera node") || !strings.Contains(string(out), "use mode held") {
		t.Fatalf("preflight with mode xa on Galera: %v\n%s", perr, out)
	}

	totals := loadgen.NewTotals()
	stop := e.streamOrders(totals, 500, testenv.Seed(t, "RELAY_TEST_SEED", 0))
	r = e.start(1, "RELAY_MODE=")
	if _, err := r.WaitLog(func(l harness.LogLine) bool { return strings.HasPrefix(l.Msg, "mode unset: held") }, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitCheckpointAbove(r, 0, 60*time.Second)
	// An operator command through node 2 must see the relay running on node 1 (its GET_LOCK is
	// there): it refuses, changing nothing.
	reset := exec.Command(relayBin, "offsets", "reset", "--to", "earliest", "--yes")
	reset.Env = append(os.Environ(), "RELAY_JOB_NAME="+e.job, "RELAY_KAFKA_BROKERS="+e.brokers, "RELAY_KAFKA_TOPICS="+e.topic,
		"RELAY_MYSQL_DSN="+e.dsns[1])
	if out, err := reset.CombinedOutput(); err == nil || !strings.Contains(string(out), "running on another Galera node") {
		t.Fatalf("offsets reset through node 2 while relay runs on node 1: %v\n%s", err, out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(30 * time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v", err)
	}
	e.finish(totals)
}

// supervised keeps one relay running on node, restarted 0.3 s after each exit, as a container
// runtime would, until stop; it counts the starts and the exits by status.
type supervised struct {
	e      *env
	node   int
	extra  []string
	r      *harness.Relay
	starts int
	exits  map[int]int
}

func (e *env) supervise(node int, extra ...string) *supervised {
	s := &supervised{e: e, node: node, extra: extra, exits: map[int]int{}}
	s.r, s.starts = e.start(node, extra...), 1
	return s
}

// tick restarts the process if it exited.
func (s *supervised) tick() {
	if s.r.Alive() {
		return
	}
	s.exits[exitCode(s.r.Err())]++
	time.Sleep(300 * time.Millisecond) // the scenario: a supervisor's pause before the restart
	s.r = s.e.start(s.node, s.extra...)
	s.starts++
}

// runFor ticks the processes for d.
func runFor(d time.Duration, ss ...*supervised) {
	until := time.Now().Add(d)
	for time.Now().Before(until) {
		for _, s := range ss {
			s.tick()
		}
		time.Sleep(50 * time.Millisecond) // the supervisor's pace: runFor lets time pass, it awaits nothing
	}
}

// TestHeldThroughKills: held mode (picked, mode unset) on node 1 while orders stream in; relay is
// SIGKILLed every 1-3 s, and node 1 itself is SIGKILLed once and restarted (it rejoins by IST)
// while relay keeps trying it. Totals stay exact.
func TestHeldThroughKills(t *testing.T) {
	e := newEnv(t, 4)
	totals := loadgen.NewTotals()
	sd := testenv.Seed(t, "RELAY_TEST_SEED", 0)
	stop := e.streamOrders(totals, 1500, sd)
	s := e.supervise(1, "RELAY_MODE=")
	kills := scaled(8, 10)
	nodeKillAt := kills / 2
	for i := 0; i < kills; i++ {
		runFor(time.Duration(1000+int((sd>>uint(i%40))%2000))*time.Millisecond, s)
		if i == nodeKillAt {
			testenv.GaleraScript(t, "kill", "1")
			runFor(2*time.Second, s)
			testenv.GaleraScript(t, "start", "1")
			continue
		}
		if s.r.Alive() {
			s.r.Kill()
		}
	}
	runFor(time.Second, s) // restarted after the last kill
	e.waitCheckpointAbove(s.r, e.lastCheckpoint(), 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.r.Stop(60 * time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, harness.Tail(s.r.Log, 30))
	}
	t.Logf("%d relay SIGKILLs, node 1 killed and rejoined once; %d starts, exits by status %v; %d good orders",
		kills-1, s.starts, s.exits, totals.Good)
	e.finish(totals)
}

// startFrozen starts relay on node with the crash point held-before-commit set to freeze it
// (SIGSTOP) the n-th time a subtask passes it, and waits until it froze there.
func (e *env) startFrozen(node, n int, extra ...string) *harness.Relay {
	e.t.Helper()
	r := e.start(node, append([]string{fmt.Sprintf("RELAY_CRASH_AT=held-before-commit:%d", n), "RELAY_CRASH_ACTION=stop"}, extra...)...)
	reached := func() bool {
		return strings.Contains(harness.Tail(r.Log, 50), "crashpoint: stopping at held-before-commit")
	}
	if !testenv.Poll(90*time.Second, func() bool { return reached() || !r.Alive() }) || !reached() {
		e.t.Fatalf("relay never reached the crash point (alive %v)\n%s", r.Alive(), harness.Tail(r.Log, 30))
	}
	return r
}

// rounds runs fn as subtests 0..n-1, each with a fresh job, its totals and orders streaming in at
// 1500/s from the subtest's seed (stop ends the stream).
func rounds(t *testing.T, n int, fn func(t *testing.T, e *env, totals *loadgen.Totals, sd uint64, stop func() error)) {
	for round := 0; round < n; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			e := newEnv(t, 4)
			totals := loadgen.NewTotals()
			sd := testenv.Seed(t, "RELAY_TEST_SEED", 0)
			fn(t, e, totals, sd, e.streamOrders(totals, 1500, sd))
		})
	}
}

// TestNodeKilledDuringCommit freezes relay (held mode, node 1) just before its COMMIT, lets it go
// and SIGKILLs node 1 within a few milliseconds, so the COMMIT may or may not have been certified:
// nobody knows. relay is then moved to node 2 (a short lease, so the takeover waits 3 s), node 1
// rejoins, and the totals must be exact: the new owner resumes from what the cluster committed,
// read with causal reads.
func TestNodeKilledDuringCommit(t *testing.T) {
	rounds(t, scaled(2, 5), func(t *testing.T, e *env, totals *loadgen.Totals, sd uint64, stop func() error) {
		n := 5 + int(sd%20)
		r := e.startFrozen(1, n, "RELAY_JOB_LEASE=3s")
		// The process stopped itself; make sure it is stopped before racing the node's death.
		testenv.Eventually(t, 10*time.Second, r.Stopped, "relay to stop itself at the crash point")
		if err := r.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(sd%3000) * time.Microsecond) // the scenario: kill the node a drawn instant later
		testenv.GaleraKill(t, 1)
		time.Sleep(time.Second) // the scenario: relay runs a while against the dead node before its own kill
		r.Kill()
		r2 := e.start(2, "RELAY_JOB_LEASE=3s")
		e.waitCheckpointAbove(r2, e.lastCheckpoint(), 60*time.Second)
		testenv.GaleraScript(t, "start", "1")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if err := r2.Stop(60 * time.Second); err != nil {
			t.Fatalf("relay on node 2 did not stop cleanly: %v\n%s", err, harness.Tail(r2.Log, 30))
		}
		// What relay on node 1 saw of its COMMIT (the first error after the crash point), for the log.
		seen := "no error"
		if ls := logLines(t, r.Log, "session failed; restarting in-process through recovery"); len(ls) > 0 {
			seen = fmt.Sprint(ls[0].Fields["error"])
		}
		t.Logf("node 1 killed under a COMMIT (crash point passed %d times); relay on node 1 then saw: %s; %d good orders", n, seen, totals.Good)
		e.finish(totals)
	})
}

// TestNonPrimaryWaits isolates node 1 from the cluster (gmcast.isolate=1: it falls into a
// non-primary component, which refuses queries with error 1047) under a running relay: relay must
// stop deciding and wait without exiting, and resume by itself when node 1 rejoins. Totals exact.
func TestNonPrimaryWaits(t *testing.T) {
	rounds(t, scaled(1, 5), func(t *testing.T, e *env, totals *loadgen.Totals, _ uint64, stop func() error) {
		r := e.start(1)
		e.waitCheckpointAbove(r, 10, 60*time.Second)
		t.Cleanup(func() { admin(t, 1, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'") })
		admin(t, 1, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'")
		// Once node 1 left the primary component, nothing more commits.
		var before int64
		stable := time.Now()
		for time.Since(stable) < 5*time.Second {
			if c := e.lastCheckpoint(); c != before {
				before, stable = c, time.Now()
			}
			time.Sleep(100 * time.Millisecond) // the sampling pace: the loop waits for 5 s without a new checkpoint
		}
		// Longer than checkpoint.tolerable_failures (10) restarts would last, were they counted.
		wait := time.Duration(scaled(30, 3)) * time.Second
		time.Sleep(wait) // the scenario: nothing may commit for this long, there is no event to wait for
		if c := e.lastCheckpoint(); c != before {
			t.Fatalf("checkpoint %d committed while node 1 was outside the primary component (last before: %d)", c, before)
		}
		if !r.Alive() {
			t.Fatalf("relay exited while node 1 was outside the primary component: %v\n%s", r.Err(), harness.Tail(r.Log, 30))
		}
		restarts, counted := 0, 0.0
		for _, l := range logLines(t, r.Log, "session failed; restarting in-process through recovery") {
			if l.Fields["cause"] == "cluster_not_ready" {
				restarts++
			}
			counted = max(counted, l.Num("consecutive_failures"))
		}
		if restarts == 0 || counted > 3 {
			t.Fatalf("while node 1 was outside the primary component: %d restarts with cause cluster_not_ready, up to %v counted as failures in a row; want some, and at most 3 counted\n%s",
				restarts, counted, harness.Tail(r.Log, 20))
		}
		admin(t, 1, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'")
		e.waitCheckpointAbove(r, before, 90*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if err := r.Stop(60 * time.Second); err != nil {
			t.Fatalf("relay did not stop cleanly: %v\n%s", err, harness.Tail(r.Log, 30))
		}
		t.Logf("node 1 isolated %s: no checkpoint above %d, %d restarts with cause cluster_not_ready (at most %v failures counted in a row), then resumed; %d good orders",
			wait, before, restarts, counted, totals.Good)
		e.finish(totals)
	})
}

func logLines(t *testing.T, path, msg string) []harness.LogLine {
	t.Helper()
	lines, err := harness.Events(path, msg)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestFrozenOwnerTakenOver freezes relay on node 1 just before a COMMIT (its data, offsets and
// owner row written), past its lease (3 s): relay on node 2 waits the lease out, takes the job over
// and commits; then the frozen owner wakes to send its COMMIT. It must not count: its lease
// deadline has passed, so the COMMIT is not even sent (had it been, its transaction conflicts with
// the takeover's owner row: aborted by node 1 applying the takeover, error 1213, or fenced by the
// epoch), and the woken process stands down (exit 3: the job runs on another node). Totals exact.
func TestFrozenOwnerTakenOver(t *testing.T) {
	rounds(t, scaled(1, 5), func(t *testing.T, e *env, totals *loadgen.Totals, sd uint64, stop func() error) {
		n := 5 + int(sd%20)
		a := e.startFrozen(1, n, "RELAY_JOB_LEASE=3s")
		frozenAt := e.lastCheckpoint()
		b := e.start(2, "RELAY_JOB_LEASE=3s")
		if _, err := b.WaitLog(func(l harness.LogLine) bool { return l.Msg == "took the job over" }, 60*time.Second); err != nil {
			t.Fatalf("relay on node 2 did not take the job over: %v\n%s", err, harness.Tail(b.Log, 30))
		}
		e.waitCheckpointAbove(b, frozenAt, 60*time.Second)
		if err := a.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		err := a.Wait(60 * time.Second)
		if code := exitCode(err); code != 3 {
			t.Fatalf("the woken owner exited with %v (status %d), want status 3 (fenced)\n%s", err, code, harness.Tail(a.Log, 30))
		}
		woke := "no session failure"
		if ls := logLines(t, a.Log, "session failed; restarting in-process through recovery"); len(ls) > 0 {
			woke = fmt.Sprintf("%v (cause %v)", ls[0].Fields["error"], ls[0].Fields["cause"])
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if err := b.Stop(60 * time.Second); err != nil {
			t.Fatalf("relay on node 2 did not stop cleanly: %v\n%s", err, harness.Tail(b.Log, 30))
		}
		t.Logf("owner on node 1 frozen before its COMMIT (crash point passed %d times), taken over from node 2; on waking: %s; %d good orders",
			n, woke, totals.Good)
		e.finish(totals)
	})
}

// TestFrozenInstanceLayoutChanged runs a job as 2 instances on node 1, freezes instance 1/2 just
// before a COMMIT past its lease (3 s) and stops instance 0/2 cleanly; the job is then started as
// one instance on node 2 (a rescale: nothing renews a lease any more, so it goes through) and
// decides. Instance 1/2 still holds its lock on node 1, where node 2 cannot see it: woken, it must
// not decide its partitions beside the new layout. The rescale moved its epoch, so its renewal and
// its next decision fail and it stands down (exit 3). Totals exact.
func TestFrozenInstanceLayoutChanged(t *testing.T) {
	rounds(t, scaled(1, 3), func(t *testing.T, e *env, totals *loadgen.Totals, sd uint64, stop func() error) {
		lease := "RELAY_JOB_LEASE=3s"
		zero := e.start(1, "RELAY_INSTANCE=0/2", "RELAY_SUBTASKS=1", lease)
		one := e.startFrozen(1, 5+int(sd%20), "RELAY_INSTANCE=1/2", "RELAY_SUBTASKS=1", lease)
		if err := zero.Stop(60 * time.Second); err != nil {
			t.Fatalf("instance 0/2 did not stop cleanly: %v\n%s", err, harness.Tail(zero.Log, 30))
		}
		time.Sleep(4 * time.Second) // past the frozen instance's lease
		b := e.start(2, lease)
		e.waitDecided(b, 60*time.Second)
		if err := one.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		err := one.Wait(60 * time.Second)
		if code := exitCode(err); code != 3 {
			t.Fatalf("the woken instance 1/2 exited with %v (status %d), want status 3 (fenced)\n%s", err, code, harness.Tail(one.Log, 30))
		}
		t.Logf("woken instance 1/2 stood down: %s", harness.Tail(one.Log, 1))
		e.waitDecided(b, 60*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if err := b.Stop(60 * time.Second); err != nil {
			t.Fatalf("relay on node 2 did not stop cleanly: %v\n%s", err, harness.Tail(b.Log, 30))
		}
		e.finish(totals)
	})
}
