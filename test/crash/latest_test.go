package crash

// With kafka.start_offset latest, "latest" is where the job first saw a partition: the position
// is recorded in the ledger before the partition is read, and no later session, process or member
// resolves it again. A session that fails, a process SIGKILLed, a partition added, a partition
// moved to another member, each before the partition's first checkpoint, must not skip a record.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// latestEnv starts partitions at latest, discovers added partitions within a second, and fails a
// checkpoint that waits 2 s for a row lock (the test's way to fail sessions before any checkpoint)
// without ever exiting for it.
var latestEnv = []string{"RELAY_START_OFFSET=latest", "RELAY_KAFKA_DISCOVERY_INTERVAL=1s",
	"RELAY_MYSQL_LOCK_WAIT_TIMEOUT=2s", "RELAY_CHECKPOINT_TOLERABLE_FAILURES=1000"}

// latestLoad is a load whose every record has one key (one sku, one window), so that lockKeyRow's
// row holds back every checkpoint with a record in it, whichever member cuts it and however few
// records it holds (a member cuts one at the first record of a partition it gained).
func latestLoad(orders int, seed uint64, txn string) loadgen.Options {
	return loadgen.Options{Orders: orders, Batch: 50, SKUs: 1, Windows: 1, StartTS: 1764000000000, Seed: seed, TxnID: txn}
}

// sessionFailures counts the in-process restarts of a session that failed on the held row lock.
func sessionFailures(t *testing.T, p *proc) int {
	n := 0
	for _, ev := range logEvents(t, p.Log, "session failed; restarting in-process through recovery") {
		if ev["cause"] == "lock_conflict" {
			n++
		}
	}
	return n
}

// TestLatestNeverSkips: records produced before the job's first start are not counted; everything
// after is, exactly, through (1) sessions failing before the first checkpoint (restarted
// in-process), (2) partitions added while it runs and a session failure before their first
// checkpoint, (3) a SIGKILL before any checkpoint. No checkpoint commits until the end: every
// start position must come from the ledger's start rows.
func TestLatestNeverSkips(t *testing.T) {
	for _, mode := range []string{"xa", "held"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, 2, append([]string{"RELAY_MODE=" + mode}, latestEnv...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			if err := e.produce(ctx, loadgen.NewTotals(), latestLoad(400, 1, "")); err != nil {
				t.Fatal(err) // before the job's first start: never counted
			}
			p := e.start()
			testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, p.Log, "recovered")) > 0 }, "relay running")
			holder := e.lockKeyRow(ctx, latestLoad(0, 0, ""))
			totals := loadgen.NewTotals()
			if err := e.produce(ctx, totals, latestLoad(600, 2, "")); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 60*time.Second, func() bool { return sessionFailures(t, p) >= 1 }, "a session to fail on the row lock")
			// Two partitions added while it runs, read from their start, then a session failure.
			testenv.AddPartitions(t, e.topic, 4)
			if err := e.produce(ctx, totals, latestLoad(600, 3, "lg2-"+e.topic)); err != nil {
				t.Fatal(err)
			}
			// Discovery or a session restarted since (whichever comes first) reads them, each
			// once its start is recorded.
			testenv.Eventually(t, 60*time.Second, func() bool { return readsAll(t, p, 4) }, "relay reading the two new partitions")
			failed := sessionFailures(t, p)
			testenv.Eventually(t, 60*time.Second, func() bool { return sessionFailures(t, p) > failed }, "a session to fail after the new partitions were assigned")
			p.Kill()
			if id := e.maxCheckpoint(); id != 0 {
				t.Fatalf("checkpoint %d committed while the row lock was held: the test did not fail before the first checkpoint", id)
			}
			if err := e.produce(ctx, totals, latestLoad(600, 4, "lg3-"+e.topic)); err != nil {
				t.Fatal(err)
			}
			if err := holder.Rollback(); err != nil {
				t.Fatal(err)
			}
			e.finish(totals)
		})
	}
}

// TestLatestMovedMember: with membership group, a partition another member takes before its first
// checkpoint starts where the job first saw it, not where it is when taken.
func TestLatestMovedMember(t *testing.T) {
	for _, mode := range []string{"xa", "held"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, 4, append([]string{"RELAY_MODE=" + mode}, append(latestEnv, groupEnv...)...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			if err := e.produce(ctx, loadgen.NewTotals(), latestLoad(400, 1, "")); err != nil {
				t.Fatal(err)
			}
			a := e.startMember()
			testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, a.Log, "recovered")) > 0 }, "the first member running")
			holder := e.lockKeyRow(ctx, latestLoad(0, 0, ""))
			totals := loadgen.NewTotals()
			if err := e.produce(ctx, totals, latestLoad(800, 2, "")); err != nil {
				t.Fatal(err)
			}
			// A second member takes half the partitions, none ever decided.
			b := e.startMember()
			testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, b.Log, "partitions taken")) > 0 && e.takenBy(b.key) > 0 },
				"the second member to take partitions")
			if id := e.maxCheckpoint(); id != 0 {
				t.Fatalf("checkpoint %d committed while the row lock was held", id)
			}
			if err := e.produce(ctx, totals, latestLoad(400, 3, "lg2-"+e.topic)); err != nil {
				t.Fatal(err)
			}
			if err := holder.Rollback(); err != nil {
				t.Fatal(err)
			}
			x := e.expected(totals)
			if !testenv.Poll(90*time.Second, func() bool { a.exited(t); b.exited(t); return e.diffOracle(x) == "" }) {
				t.Fatalf("totals differ from the oracle's fold of what Kafka committed after the job's first start:\n%s", e.diffOracle(x))
			}
			e.stopAll([]*proc{a.proc, b.proc})
			e.checkEnd(totals, x, nil)
		})
	}
}

// readsAll reports whether p reads n partitions: two discovered while it ran, or a session
// (re)started since with all of them.
func readsAll(t *testing.T, p *proc, n int) bool {
	if len(logEvents(t, p.Log, "new partition assigned")) >= n-2 {
		return true
	}
	for _, ev := range logEvents(t, p.Log, "recovered") {
		offs, _ := ev["offsets"].(map[string]any)
		for _, ps := range offs {
			if m, _ := ps.(map[string]any); len(m) == n {
				return true
			}
		}
	}
	return false
}

// takenBy counts the partitions the ledger says member key holds.
func (e *env) takenBy(key string) int {
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM relay_partition_owners WHERE job = ? AND member = ?`, e.job, key).Scan(&n); err != nil {
		e.t.Fatal(fmt.Errorf("partition owners: %w", err))
	}
	return n
}
