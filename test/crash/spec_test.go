package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/testenv"
)

// TestSpecRandomKills runs relay with a three-aggregate pipeline spec, SIGKILLs it at random
// moments (and at armed crash points) while orders arrive in Kafka transactions (some aborted, some
// records bad), and requires at the end every table to hold exactly the fold of the committed
// records, each bad record once in the dead-letter table and no branch in XA RECOVER. Meanwhile a
// checker reads all tables in one consistent snapshot, again and again, and finds the hourly
// rollup equal to the sum of its base in every snapshot with no checkpoint half committed. In held
// mode every snapshot must agree: all of a record's aggregates are written by its partition's
// subtask, in one local transaction. RELAY_CRASH_KILLS sets the number of kills (default 10, at
// least two per named crash point: every other run is armed at the next point in turn),
// RELAY_CRASH_MODE one mode (xa or held), RELAY_TEST_SEED the seed of the load and the kills.
func TestSpecRandomKills(t *testing.T) {
	kills := 10
	if v, err := strconv.Atoi(os.Getenv("RELAY_CRASH_KILLS")); err == nil && v > 0 {
		kills = v
	}
	for _, mode := range []struct {
		name  string
		extra []string
	}{
		{"xa", []string{"RELAY_CHECKPOINT_BUFFER_KEYS=300"}},
		{"held", []string{"RELAY_MODE=held"}},
	} {
		if only := os.Getenv("RELAY_CRASH_MODE"); only != "" && only != mode.name {
			continue
		}
		t.Run(mode.name, func(t *testing.T) { specRandomKills(t, kills, mode.extra...) })
	}
}

func specRandomKills(t *testing.T, kills int, extra ...string) {
	cfgPath, plan := salesSpecConfig(t)
	e := newEnv(t, 3, extra...)
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 0), 2))
	t.Logf("job %s topic %s, %d kills asked for (at least two per crash point)", e.job, e.topic, kills)

	totals := loadgen.NewTotals()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := make(chan error, 1)
	go func() {
		// 90 one-minute windows: two hours of rollup rows.
		produced <- e.produce(ctx, totals, loadgen.Options{Plan: plan, Orders: 1 << 30, Rate: 3000, Batch: 40,
			AbortRate: 0.1, BadRate: 0.005, SKUs: 40, Distinct: map[string]int{"shop": 6, "region": 3}, Windows: 90, Seed: rng.Uint64()})
	}()
	var snapshots, halfCommitted atomic.Int64
	checked := make(chan error, 1)
	go func() { checked <- e.checkRollups(ctx, &snapshots, &halfCommitted) }()

	points := []string{crashpoint.AfterFlush, crashpoint.AfterPrepare, crashpoint.AfterDecide,
		crashpoint.BetweenCommits, crashpoint.AfterCommit, crashpoint.RecoveryBetween}
	if e.held {
		// Held mode prepares nothing: its COMMIT is the decision.
		points = []string{crashpoint.AfterFlush, crashpoint.AfterCommit}
	}
	// Every other run is armed, at each named crash point in turn, so every point is hit with the
	// multi-aggregate spec too.
	kills = max(kills, 2*len(points))
	hits := map[string]int{}
	lastMax, progressed := int64(0), 0
	for k := 1; k <= kills; k++ {
		var arm []string
		point := points[(k/2)%len(points)]
		if k%2 == 1 {
			arm = append(arm, fmt.Sprintf("RELAY_CRASH_AT=%s:%d", point, 1+rng.IntN(8)))
		}
		p := e.start(append(arm, "--config="+cfgPath)...)
		if k%2 == 0 && len(arm) == 0 {
			// Killed only once it committed something, so kills land in a working relay.
			deadline := time.Now().Add(60 * time.Second)
			for e.maxCheckpoint() <= lastMax && time.Now().Before(deadline) {
				select {
				case <-p.Done():
					err := p.Err()
					t.Fatalf("run %d exited by itself: %v\n%s", k, err, tail(p.Log, 30))
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		wait := time.Duration(300+rng.IntN(2200)) * time.Millisecond
		if len(arm) > 0 {
			wait = 15 * time.Second // long enough to reach the point's count; the point kills it
		}
		select {
		case <-p.Done():
			err := p.Err()
			if !(len(arm) > 0 && killedBySIGKILL(err)) {
				t.Fatalf("run %d exited by itself: %v\n%s", k, err, tail(p.Log, 30))
			}
			hits[point]++
		case <-time.After(wait):
			p.Kill()
		}
		if m := e.maxCheckpoint(); m > lastMax {
			progressed++
			lastMax = m
		}
	}
	cancel()
	if err := <-produced; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	if progressed < kills/3 {
		t.Fatalf("only %d of %d killed runs committed anything", progressed, kills)
	}
	t.Logf("runs killed at their armed crash point: %v", hits)
	for _, pt := range points {
		// recovery-between needs a branch in doubt when its run starts, which the runs before
		// it may or may not leave.
		if hits[pt] == 0 && pt != crashpoint.RecoveryBetween {
			t.Errorf("no run was killed at crash point %s", pt)
		}
	}
	_, bad, good := totals.Snapshot()
	t.Logf("%d kills, %d runs advanced the ledger; %d good orders, %d bad, %d aborted; %d consistent snapshots checked, %d skipped (relay's tables missing yet, or a checkpoint half committed)",
		kills, progressed, good, len(bad), totals.Aborted, snapshots.Load(), halfCommitted.Load())
	if snapshots.Load() == 0 {
		t.Fatal("the checker saw no snapshot with every checkpoint whole")
	}

	// The expected tables and dead-letter rows are test/oracle's fold of what Kafka committed.
	var err error
	if e.oracle, err = oracleSpec(testenv.SalesSpec); err != nil {
		t.Fatal(err)
	}
	want := e.expected(totals)
	p := e.start("--config=" + cfgPath)
	// Recovery first: the tables may already be whole, and what earlier runs left in doubt must be
	// resolved before the stop.
	if _, err := p.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, 60*time.Second); err != nil {
		t.Fatalf("relay did not finish recovery: %v\n%s", err, tail(p.Log, 30))
	}
	deadline := time.Now().Add(90 * time.Second)
	for e.diffOracle(want) != "" && time.Now().Before(deadline) {
		select {
		case <-p.Done():
			err := p.Err()
			t.Fatalf("relay exited early: %v\n%s", err, tail(p.Log, 30))
		case <-time.After(300 * time.Millisecond):
		}
	}
	e.stopAll([]*proc{p})
	if d := e.diffOracle(want); d != "" {
		t.Fatalf("tables differ from the oracle's fold of what Kafka committed:\n%s", d)
	}
	for _, table := range want.result.Tables {
		if len(table.Rows) == 0 {
			t.Fatalf("%s: no rows expected: the load does not exercise it", table.Table)
		}
	}
	if bs := e.branches(); len(bs) != 0 {
		t.Fatalf("XA RECOVER still lists %d branches of the job: %v", len(bs), bs)
	}
	e.checkDLQ(want.bad)
	e.checkOffsetsAtEnd()
	for id, st := range e.ledgerRows() {
		if st != string(ledger.Committed) {
			t.Fatalf("ledger checkpoint %d is %s after a clean stop", id, st)
		}
	}
}

// checkRollups reads the base table, its rollup and the ledger in one consistent snapshot, again
// and again until ctx ends, and requires the rollup to be the sum of its base whenever no
// checkpoint of the job is COMMITTING in that snapshot (a checkpoint commits its branches one
// after another, after its decision: while one is COMMITTING the snapshot may hold part of it).
// Snapshots that see relay's tables missing (or created after they began) or a checkpoint
// COMMITTING are skipped, counted.
func (e *env) checkRollups(ctx context.Context, checked, skipped *atomic.Int64) error {
	for ctx.Err() == nil {
		ok, err := e.rollupSnapshot(ctx)
		switch {
		// Any error fails but 1146 (no table yet) and 1412 (a table created after the snapshot began).
		case err != nil && ctx.Err() == nil && !fault.IsMySQL(err, 1146) && !fault.IsMySQL(err, 1412):
			return err
		case ok:
			checked.Add(1)
		default:
			skipped.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

type rollupKey struct {
	hour   string
	region string
}

type rollupAcc struct {
	orders  int64
	revenue money.Sum
}

// rollupSnapshot is one check; ok is false when the snapshot was skipped.
func (e *env) rollupSnapshot(ctx context.Context) (ok bool, err error) {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return false, err
		}
	}
	defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
	var committing int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM relay_checkpoints WHERE job = ? AND state = ?", e.job, ledger.Committing).
		Scan(&committing); err != nil {
		return false, err
	}
	if committing > 0 {
		return false, nil
	}
	read := func(q string, key func(ws time.Time, dim string) rollupKey) (map[rollupKey]rollupAcc, error) {
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[rollupKey]rollupAcc{}
		for rows.Next() {
			var ws, dim, sum string
			var n int64
			if err := rows.Scan(&ws, &dim, &n, &sum); err != nil {
				return nil, err
			}
			t, err := time.Parse("2006-01-02 15:04:05", ws)
			if err != nil {
				return nil, err
			}
			k := key(t, dim)
			s, err := money.ParseSum(sum)
			if err != nil {
				return nil, err
			}
			a := out[k]
			a.orders += n
			a.revenue.AddSum(s)
			out[k] = a
		}
		return out, rows.Err()
	}
	base, err := read("SELECT CAST(window_start AS CHAR), region, orders, CAST(revenue AS CHAR) FROM sales_minute",
		func(ws time.Time, region string) rollupKey {
			return rollupKey{ws.Truncate(time.Hour).Format(time.DateTime), region}
		})
	if err != nil {
		return false, err
	}
	rollup, err := read("SELECT CAST(window_start AS CHAR), region, orders, CAST(revenue AS CHAR) FROM sales_region_hour",
		func(ws time.Time, region string) rollupKey {
			return rollupKey{ws.Format(time.DateTime), region}
		})
	if err != nil {
		return false, err
	}
	for k, b := range base {
		r, found := rollup[k]
		if !found || r.orders != b.orders || r.revenue.Cmp(b.revenue) != 0 {
			return false, fmt.Errorf("in one snapshot, sales_region_hour %v holds %d orders / %s (present %v), its base sales_minute sums to %d / %s",
				k, r.orders, r.revenue, found, b.orders, b.revenue)
		}
	}
	for k, r := range rollup {
		if _, found := base[k]; !found {
			return false, fmt.Errorf("in one snapshot, sales_region_hour %v holds %d orders / %s, and sales_minute has no row for it", k, r.orders, r.revenue)
		}
	}
	return true, nil
}
