package crash

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
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

// Partitions added to a topic while relay runs are picked up, read from their beginning, and
// recorded in the ledger's offsets.
func TestNewPartitionsPickedUp(t *testing.T) {
	e := newEnv(t, 2, "RELAY_KAFKA_DISCOVERY_INTERVAL=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 2000, Batch: 100, Seed: 21}); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	testenv.Eventually(t, 60*time.Second, func() bool { return e.maxCheckpoint() > 0 }, "a first checkpoint")
	testenv.AddPartitions(t, e.topic, 5)
	// A new producer sees the five partitions at once.
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 3000, Batch: 100, Seed: 22, TxnID: "lg2-" + e.topic}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, p.Log, "new partition assigned")) == 3 }, "three new partitions assigned")
	p.Kill()
	e.finish(totals) // checks every partition has a ledger offset and nothing is left unread
}

// Checkpoints that keep failing stop relay with a non-zero exit after the tolerated number; once
// the cause is fixed, a restart finishes the work exactly once.
func TestCheckpointFailuresExit(t *testing.T) {
	e := newEnv(t, 2, "RELAY_CHECKPOINT_TOLERABLE_FAILURES=2")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 2000, Batch: 100, Seed: 31}); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	testenv.Eventually(t, 60*time.Second, func() bool { return e.maxCheckpoint() > 0 }, "a first checkpoint")
	// Take the aggregate table away: every flush now fails.
	if _, err := e.db.ExecContext(ctx, "RENAME TABLE order_stats_minute TO order_stats_away"); err != nil {
		t.Fatal(err)
	}
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 1000, Batch: 100, Seed: 32}); err != nil {
		t.Fatal(err)
	}
	err := p.wait(t, 90*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("relay exit: %v, want status 1\n%s", err, tail(p.Log, 10))
	}
	if out := tail(p.Log, 3); !strings.Contains(out, "3 consecutive failures without a committed checkpoint") {
		t.Fatalf("exit reason not stated:\n%s", out)
	}
	if bs := e.branches(); len(bs) != 0 {
		t.Fatalf("failed checkpoints left branches: %v", bs)
	}
	if _, err := e.db.ExecContext(ctx, "RENAME TABLE order_stats_away TO order_stats_minute"); err != nil {
		t.Fatal(err)
	}
	e.finish(totals)
}

// bad_input_policy=skip counts bad records without writing them; =fail stops relay at the first
// one, naming its reason and position, without committing the epoch that holds it.
func TestBadInputPolicies(t *testing.T) {
	t.Run("skip", func(t *testing.T) {
		e := newEnv(t, 2, "RELAY_INPUT_BAD_INPUT_POLICY=skip")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		totals := loadgen.NewTotals()
		if err := e.produce(ctx, totals, loadgen.Options{Orders: 3000, Batch: 100, BadRate: 0.05, Seed: 41}); err != nil {
			t.Fatal(err)
		}
		_, bad, _ := totals.Snapshot()
		if len(bad) == 0 {
			t.Fatal("the stream has no bad records")
		}
		e.finish(totals) // skipped records must not reach the dead-letter table (e.skipBad)
	})
	t.Run("fail", func(t *testing.T) {
		e := newEnv(t, 1, "RELAY_INPUT_BAD_INPUT_POLICY=fail")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		totals := loadgen.NewTotals()
		if err := e.produce(ctx, totals, loadgen.Options{Orders: 500, Batch: 100, Seed: 42}); err != nil {
			t.Fatal(err)
		}
		p := e.start()
		testenv.Eventually(t, 60*time.Second, func() bool { return e.actual(loadgen.DefaultPlan()).Keys() > 0 }, "the good records to commit")
		badTotals := loadgen.NewTotals()
		if err := e.produce(ctx, badTotals, loadgen.Options{Orders: 50, Batch: 50, BadRate: 1, Seed: 43, TxnID: "bad-" + e.topic}); err != nil {
			t.Fatal(err)
		}
		err := p.wait(t, 60*time.Second)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("relay exit: %v, want status 1\n%s", err, tail(p.Log, 5))
		}
		if out := tail(p.Log, 3); !strings.Contains(out, "bad input") || !strings.Contains(out, e.topic+"/0@") {
			t.Fatalf("exit does not name the bad record:\n%s", out)
		}
		if d := e.diffOracle(e.expected(totals)); d != "" {
			t.Fatalf("totals after the stop:\n%s", d)
		}
		if bs := e.branches(); len(bs) != 0 {
			t.Fatalf("branches left: %v", bs)
		}
	})
}

// When traffic pauses, what was read becomes visible after checkpoint.idle_after, not after the
// (here 30 s) interval; with idle_after off it waits for the interval.
func TestIdleCutCommitsWhenTrafficPauses(t *testing.T) {
	e := newEnv(t, 2, "RELAY_CHECKPOINT_INTERVAL=30s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	off := e.start("RELAY_CHECKPOINT_IDLE_AFTER=0")
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, off.Log, "recovered")) > 0 }, "relay running")
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 500, Batch: 100, Seed: 41}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the scenario: nothing may commit in these 3 s, there is no event to wait for
	if n := e.maxCheckpoint(); n != 0 {
		t.Fatalf("with idle_after off, checkpoint %d committed within 3s of a 30s interval", n)
	}
	off.Kill()

	p := e.start("RELAY_CHECKPOINT_IDLE_AFTER=100ms")
	start := time.Now()
	testenv.Eventually(t, 10*time.Second, func() bool { return e.maxCheckpoint() > 0 }, "an idle cut well before the 30s interval")
	t.Logf("first checkpoint %s after start", time.Since(start).Round(time.Millisecond))
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 500, Batch: 100, Seed: 42}); err != nil {
		t.Fatal(err)
	}
	_, _, good := totals.Snapshot()
	testenv.Eventually(t, 10*time.Second, func() bool { return e.committedOrders() == good }, "the second burst to become visible")
	p.Kill()
	e.finish(totals)
}

// A trickle of records is committed while it is still arriving: 250 records, one every 5 ms
// (fewer than one poll batch, never a 20 ms pause), and with idle cuts off. The poll loop used to
// hand a batch over only when it was full or librdkafka had been empty for 20 ms, so nothing of
// this trickle reached an epoch before the producer stopped (at 200 records/s a record waited up
// to 1.3 s: produce→visible p50 707 ms, p99 1354 ms in the latency bench; 112/213 ms after).
func TestTrickleVisibleWhileArriving(t *testing.T) {
	e := newEnv(t, 1, "RELAY_CHECKPOINT_INTERVAL=200ms", "RELAY_CHECKPOINT_IDLE_AFTER=0")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := e.start()
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, p.Log, "recovered")) > 0 }, "relay running")
	totals := loadgen.NewTotals()
	produced := make(chan error, 1)
	go func() {
		// Not e.produce: without transactions, so the records become readable one by one.
		produced <- loadgen.Run(ctx, loadgen.Options{Brokers: e.brokers, Topic: e.topic, Orders: 250, Batch: 250, Rate: 200,
			SKUs: 20, Windows: 2, Seed: 43, Escape: true}, totals)
	}()
	var during int64
	for done := false; !done; {
		select {
		case err := <-produced:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		case <-time.After(20 * time.Millisecond):
			during = max(during, e.maxCheckpoint())
		}
	}
	if during == 0 {
		t.Fatalf("no checkpoint committed during the 1.25 s trickle; relay log:\n%s", tail(p.Log, 20))
	}
	t.Logf("%d checkpoints committed while the trickle was arriving", during)
	_, _, good := totals.Snapshot()
	testenv.Eventually(t, 30*time.Second, func() bool { return e.committedOrders() == good }, "the whole trickle to become visible")
	p.Kill()
	e.finish(totals)
}

// Secrets never reach the log: not the MySQL password (relay logs its DSN at start, and the
// driver's errors when the password is refused), not librdkafka's SASL password.
func TestSecretsNotLogged(t *testing.T) {
	e := newEnv(t, 1)
	const mysqlSecret, kafkaSecret = "Pw-mysql-7f3a9c", "Pw-kafka-51be2d"
	cfg, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Passwd = mysqlSecret // wrong: relay stops at its first query
	refused := e.start("RELAY_MYSQL_DSN=" + cfg.FormatDSN())
	if err := refused.wait(t, 90*time.Second); err == nil {
		t.Fatalf("relay ran with a wrong MySQL password\n%s", tail(refused.Log, 10))
	}
	ok := e.start("RELAY_KAFKA_PROPERTIES=sasl.username=relay,sasl.password=" + kafkaSecret)
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, ok.Log, "recovered")) > 0 }, "relay running with SASL properties")
	ok.Kill()
	for _, p := range []*proc{refused, ok} {
		b, err := os.ReadFile(p.Log)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{mysqlSecret, kafkaSecret} {
			if strings.Contains(string(b), secret) {
				t.Errorf("%s holds the secret %s:\n%s", p.Log, secret, b)
			}
		}
	}
	if !strings.Contains(tail(refused.Log, 50), "Access denied") {
		t.Errorf("the refused run does not say why:\n%s", tail(refused.Log, 10))
	}
	if !strings.Contains(tail(refused.Log, 200), "xxxxx") {
		t.Errorf("the refused run does not log its (redacted) DSN:\n%s", tail(refused.Log, 10))
	}
}

// A checkpoint whose statement waits past mysql.lock_wait_timeout for an outside transaction's
// lock fails the session with cause lock_conflict; relay restarts in-process, and once the lock is
// released the same records commit exactly once, on every subtask (no replay on one connection:
// the subtasks' own branches cannot block each other at READ COMMITTED).
func TestLockWaitTimeoutRestarts(t *testing.T) {
	e := newEnv(t, 2, "RELAY_MYSQL_LOCK_WAIT_TIMEOUT=2s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := loadgen.Options{Orders: 3000, Batch: 100, SKUs: 40, Windows: 2, StartTS: 1764000000000, Seed: 41}
	p := e.start() // creates the table
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, p.Log, "recovered")) > 0 }, "relay running")
	holder := e.lockKeyRow(ctx, opts)
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, opts); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		for _, ev := range logEvents(t, p.Log, "session failed; restarting in-process through recovery") {
			if s, _ := ev["error"].(string); strings.Contains(s, "1205") && ev["cause"] == "lock_conflict" {
				return true
			}
		}
		return false
	}, "a checkpoint to fail with a lock wait timeout (cause lock_conflict)")
	led := ledger.New(e.db, e.job)
	var failedBefore int64
	if last, _ := led.LastDecided(ctx); last != nil {
		failedBefore = last.ID
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		after, _ := led.Since(ctx, failedBefore)
		subtask := func(n string) func(string) bool {
			return func(tag string) bool { return strings.HasSuffix(tag, "-"+n) }
		}
		for _, c := range after {
			if slices.ContainsFunc(c.Tags, subtask("0")) && slices.ContainsFunc(c.Tags, subtask("1")) {
				return true
			}
		}
		return false
	}, "a checkpoint after the release with branches of both subtasks")
	p.Kill()
	e.finish(totals)
}

// SIGTERM while relay is still starting (connecting, checking the server, creating its tables:
// a rolling restart that comes early) is a clean stop, exit status 0, not a failure.
func TestSIGTERMWhileStarting(t *testing.T) {
	e := newEnv(t, 2)
	for i := 0; i < 5; i++ {
		p := e.start()
		if _, err := p.WaitLog(func(l harness.LogLine) bool { return l.Msg == "starting" }, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		_ = p.Signal(syscall.SIGTERM)
		if err := p.wait(t, 30*time.Second); err != nil {
			t.Fatalf("run %d: SIGTERM while starting: %v\n%s", i, err, tail(p.Log, 10))
		}
	}
}
