package crash

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

// TestReaderGuarantee checks, in consistent snapshots taken while relay is SIGKILLed again and
// again at 100 ms checkpoints, exactly what docs/PIPELINES.md ("What a reader sees") promises a
// reader of the sink database:
//
//   - at a checkpoint boundary (the snapshot holds no ledger row of the job in COMMITTING; in held
//     mode, always), every table is the exact fold of the records below relay_offsets: the base
//     table and its rollup each count exactly Σ next_offset orders (every record is good, and a
//     non-transactional producer leaves no gaps in the offsets), and each rollup row equals the sum
//     of its base rows, in orders and revenue;
//   - while checkpoints are COMMITTING (XA mode), each table counts between the last boundary and
//     the decided offsets: Σ next_offset − their records ≤ Σ orders ≤ Σ next_offset; with one
//     subtask and one checkpoint COMMITTING exactly one of the two, and with one subtask the rollup
//     is the sum of its base in every snapshot.
//
// Runs: XA with 4 subtasks, XA with 1, held with 4, each SIGKILLed every 0.3-1.5 s while 24 000
// orders arrive at 2 000/s (RELAY_TEST_READER_ORDERS sets the number, for a longer run).
// RELAY_TEST_READER_SEED replays a run's kill schedule and load; RELAY_CRASH_MODE=xa4|xa1|held picks one.
func TestReaderGuarantee(t *testing.T) {
	for _, run := range []struct {
		name     string
		subtasks int
		extra    []string
	}{
		{"xa4", 4, nil},
		{"xa1", 1, nil},
		{"held", 4, []string{"RELAY_MODE=held"}},
	} {
		if only := os.Getenv("RELAY_CRASH_MODE"); only != "" && only != run.name {
			continue
		}
		t.Run(run.name, func(t *testing.T) {
			readerGuarantee(t, testenv.Seed(t, "RELAY_TEST_READER_SEED", 0), run.subtasks, run.extra...)
		})
	}
}

// readerCounts are what the checker saw.
type readerCounts struct {
	snapshots   int // taken with relay's tables present
	boundary    int // of them, with no checkpoint COMMITTING
	midCommit   int // with one COMMITTING
	midUnequal  int // mid-commit snapshots whose rollup was not the sum of its base (allowed, XA N>1)
	maxOffsets  int64
	noTablesYet int
}

func readerGuarantee(t *testing.T, seed uint64, subtasks int, extra ...string) {
	cfgPath, plan := salesSpecConfig(t)
	e := newEnv(t, 4, append([]string{"RELAY_SUBTASKS=" + strconv.Itoa(subtasks), "RELAY_CHECKPOINT_INTERVAL=100ms",
		"RELAY_START_OFFSET=earliest"}, extra...)...)
	rng := rand.New(rand.NewPCG(seed, 23))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Every record good, no Kafka transactions: offsets have no gaps, so Σ next_offset is the
	// number of records a snapshot must count.
	totals := loadgen.NewTotals()
	orders := 24000 // 12 s at 2 000/s
	if v, err := strconv.Atoi(os.Getenv("RELAY_TEST_READER_ORDERS")); err == nil && v > 0 {
		orders = v
	}
	produced := make(chan error, 1)
	go func() {
		produced <- loadgen.Run(ctx, loadgen.Options{Brokers: e.brokers, Topic: e.topic, Plan: plan, Orders: orders, Rate: 2000,
			Batch: 200, SKUs: 40, Distinct: map[string]int{"shop": 6, "region": 3}, Windows: 90, Seed: rng.Uint64()}, totals)
	}()
	var counts readerCounts
	checked := make(chan error, 1)
	cctx, stopChecker := context.WithCancel(ctx)
	go func() { checked <- e.checkReader(cctx, subtasks, &counts) }()

	// SIGKILL relay at random moments while the orders arrive.
	kills := 0
	for done := false; !done; {
		p := e.start("--config=" + cfgPath)
		wait := time.Duration(300+rng.IntN(1200)) * time.Millisecond
		select {
		case <-p.Done():
			t.Fatalf("run %d exited by itself: %v\n%s", kills+1, p.Err(), tail(p.Log, 30))
		case err := <-produced:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		case err := <-checked:
			t.Fatalf("checker: %v", err)
		case <-time.After(wait):
		}
		p.Kill()
		<-p.Done()
		kills++
	}
	_, _, good := totals.Snapshot()
	if good != int64(orders) {
		t.Fatalf("loadgen delivered %d of %d orders", good, orders)
	}

	// A last run takes everything; the checker keeps checking until relay's offsets cover it all.
	p := e.start("--config=" + cfgPath)
	if _, err := p.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, 60*time.Second); err != nil {
		t.Fatalf("relay did not finish recovery: %v\n%s", err, tail(p.Log, 30))
	}
	deadline := time.Now().Add(120 * time.Second)
	for e.offsetSum() < good && time.Now().Before(deadline) {
		select {
		case <-p.Done():
			t.Fatalf("relay exited early: %v\n%s", p.Err(), tail(p.Log, 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
	e.stopAll([]*proc{p})
	if got := e.offsetSum(); got != good {
		t.Fatalf("relay_offsets cover %d records after the last run, %d were produced", got, good)
	}
	stopChecker()
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	// One more snapshot after the clean stop: a boundary holding every record.
	final := readerCounts{}
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = e.readerSnapshot(ctx, conn, subtasks, &final)
	_, _ = conn.ExecContext(ctx, "ROLLBACK")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kills, %d orders; %d consistent snapshots (and %d before relay's tables existed): %d at a checkpoint boundary, %d with a checkpoint COMMITTING, of which %d had a rollup row ≠ the sum of its base",
		kills, good, counts.snapshots, counts.noTablesYet, counts.boundary, counts.midCommit, counts.midUnequal)
	if final.boundary != 1 || final.maxOffsets != good {
		t.Fatalf("after the clean stop the snapshot is no boundary covering all %d records: %+v", good, final)
	}
	if counts.boundary < 50 {
		t.Fatalf("only %d snapshots at a checkpoint boundary: the check saw too little", counts.boundary)
	}
}

// offsetSum is Σ next_offset of the job's partitions.
func (e *env) offsetSum() int64 {
	offs, _, _ := ledger.New(e.db, e.job).PartitionOffsets(context.Background())
	var n int64
	for _, parts := range offs {
		n += harness.Total(parts)
	}
	return n
}

// checkReader takes consistent snapshots one after another until ctx ends, checking each.
func (e *env) checkReader(ctx context.Context, subtasks int, c *readerCounts) error {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for ctx.Err() == nil {
		err := e.readerSnapshot(ctx, conn, subtasks, c)
		if _, rerr := conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil && err == nil {
			err = rerr
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case fault.IsMySQL(err, 1146), fault.IsMySQL(err, 1412):
			// relay has not created its tables yet, or created one after the snapshot began
			c.noTablesYet++
		case err != nil:
			return err
		}
	}
	return nil
}

// hourRegion is a rollup row's key.
type hourRegion struct{ hour, region string }

// readerSnapshot reads the ledger, the base table and its rollup in one consistent snapshot and
// checks them against the guarantee.
func (e *env) readerSnapshot(ctx context.Context, conn *sql.Conn, subtasks int, c *readerCounts) error {
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	var committing, records, offs int64
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(records), 0) FROM relay_checkpoints WHERE job = ? AND state = ?",
		e.job, ledger.Committing).Scan(&committing, &records); err != nil {
		return err
	}
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(SUM(next_offset), 0) FROM relay_offsets WHERE job = ?", e.job).Scan(&offs); err != nil {
		return err
	}
	// Grouped by MariaDB, exact DECIMAL sums; both sides print with the column's scale.
	read := func(q string) (map[hourRegion][2]string, int64, error) {
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			return nil, 0, err
		}
		defer rows.Close()
		out, total := map[hourRegion][2]string{}, int64(0)
		for rows.Next() {
			var k hourRegion
			var n int64
			var rev string
			if err := rows.Scan(&k.hour, &k.region, &n, &rev); err != nil {
				return nil, 0, err
			}
			out[k] = [2]string{strconv.FormatInt(n, 10), rev}
			total += n
		}
		return out, total, rows.Err()
	}
	base, baseN, err := read(`SELECT DATE_FORMAT(window_start, '%Y-%m-%d %H:00:00'), region, SUM(orders), CAST(SUM(revenue) AS CHAR)
		FROM sales_minute GROUP BY 1, 2`)
	if err != nil {
		return err
	}
	rollup, rollupN, err := read(`SELECT DATE_FORMAT(window_start, '%Y-%m-%d %H:00:00'), region, orders, CAST(revenue AS CHAR)
		FROM sales_region_hour`)
	if err != nil {
		return err
	}
	c.snapshots++
	equal := len(base) == len(rollup)
	var unequal string
	for k, b := range base {
		if r := rollup[k]; r != b {
			equal, unequal = false, fmt.Sprintf("sales_region_hour %v holds %v, its base sales_minute sums to %v", k, r, b)
			break
		}
	}
	if unequal == "" && !equal {
		unequal = fmt.Sprintf("sales_region_hour has %d rows, sales_minute sums to %d", len(rollup), len(base))
	}
	state := fmt.Sprintf("(%d COMMITTING, Σ next_offset %d, records of the COMMITTING checkpoints %d; Σ orders: sales_minute %d, sales_region_hour %d)",
		committing, offs, records, baseN, rollupN)
	switch {
	case committing == 0:
		// A boundary: every table exactly as of the offsets.
		c.boundary++
		c.maxOffsets = offs
		if !equal {
			return fmt.Errorf("at a checkpoint boundary %s: %s", state, unequal)
		}
		if baseN != offs || rollupN != offs {
			return fmt.Errorf("at a checkpoint boundary the tables do not count the records below the offsets %s", state)
		}
	default:
		// Mid-commit: each table between the last boundary and the decided offsets. (Two rows are
		// COMMITTING when recovery left a branch in doubt to the resolver.)
		c.midCommit++
		if !equal {
			c.midUnequal++
		}
		for _, n := range []int64{baseN, rollupN} {
			if n < offs-records || n > offs {
				return fmt.Errorf("while checkpoints commit, a table counts outside [last boundary, decided offsets] %s", state)
			}
		}
		if subtasks == 1 {
			if !equal {
				return fmt.Errorf("one subtask, checkpoint COMMITTING %s: %s", state, unequal)
			}
			if committing == 1 && baseN != offs && baseN != offs-records {
				return fmt.Errorf("one subtask: the checkpoint's one branch is partly visible %s", state)
			}
		}
	}
	return nil
}

// salesSpecConfig writes a configuration file holding testenv.SalesSpec and returns its path and
// the spec's plan.
func salesSpecConfig(t *testing.T) (string, *spec.Plan) { return specConfig(t, testenv.SalesSpec) }

// specConfig writes a relay configuration file of text and returns its path and the plan of its
// pipeline.
func specConfig(t *testing.T, text string) (string, *spec.Plan) {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	return cfgPath, plan
}
