package crash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/test/oracle"
)

// refusedAtStart starts relay with extra, requires it to exit non-zero by itself and returns its
// log.
func (e *env) refusedAtStart(extra ...string) string {
	e.t.Helper()
	p := e.start(extra...)
	if err := p.wait(e.t, 30*time.Second); err == nil {
		e.t.Fatalf("relay started with %v", extra)
	}
	b, err := os.ReadFile(p.Log)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// sumOf is SUM(column) of a table (0 when empty or not created yet).
func (e *env) sumOf(table, column string) int64 {
	e.t.Helper()
	var n int64
	err := e.db.QueryRow("SELECT COALESCE(SUM(" + column + "), 0) FROM `" + table + "`").Scan(&n)
	if err != nil && !fault.IsMySQL(err, 1146) { // 1146: relay has not created it yet
		e.t.Fatal(err)
	}
	return n
}

// The default spec's window is changed from 5m to 90s on a job that committed: relay run, spec diff
// and preflight refuse it, naming input.window and both values, and nothing is written. The
// unchanged spec restarts and counts on. A ledger from before relay recorded meanings (as main's
// code left it: claims, no relay_table_specs) gets the meaning recorded at the next start, and
// from then on the change is refused too.
// Both modes: held mode commits offsets with the data, XA mode with the decision, and either
// counts as committed.
func TestSpecDriftDefault(t *testing.T) {
	t.Run("xa", func(t *testing.T) { specDriftDefault(t) })
	t.Run("held", func(t *testing.T) { specDriftDefault(t, "RELAY_MODE=held") })
}

func specDriftDefault(t *testing.T, extra ...string) {
	e := newEnv(t, 2, append([]string{"RELAY_INPUT_WINDOW=5m"}, extra...)...)
	e.oracle = oracle.Default()
	e.oracle.Tables[0].Window = 5 * time.Minute
	cfg := config.Default()
	cfg.Input.Window = 5 * time.Minute
	plan, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	totals := loadgen.NewTotals()
	opts := loadgen.Options{Plan: plan, Orders: 200, Batch: 50, SKUs: 5, Windows: 3, Window: 5 * time.Minute, Seed: 23}
	if err := e.produce(context.Background(), totals, opts); err != nil {
		t.Fatal(err)
	}
	e.finish(totals)
	if !strings.Contains(tail(e.logs[0], 200), "recorded the table's meaning (the job has committed nothing yet") {
		t.Errorf("the first run does not log the meaning it recorded:\n%s", tail(e.logs[0], 20))
	}

	refuse := func(when string) {
		t.Helper()
		log := e.refusedAtStart("RELAY_INPUT_WINDOW=90s")
		if !strings.Contains(log, "spec drift") || !strings.Contains(log, "input.window: 5m -> 1m30s") {
			t.Fatalf("%s: the refusal does not name input.window, 5m and 1m30s:\n%s", when, log)
		}
		out, stderr, code := e.cli([]string{"RELAY_INPUT_WINDOW=90s"}, "spec", "diff")
		if code != 4 || !lineHas(out, "order_stats_minute", "mysql.table", "CHANGED") || !strings.Contains(out, "input.window: 5m -> 1m30s") {
			t.Fatalf("%s: spec diff: exit %d\n%s%s", when, code, out, stderr)
		}
		out, stderr, code = e.cli([]string{"RELAY_INPUT_WINDOW=90s"}, "preflight")
		if code != 1 || !lineHas(out, "FAIL spec", "input.window: 5m -> 1m30s") {
			t.Fatalf("%s: preflight: exit %d\n%s%s", when, code, out, stderr)
		}
		out, stderr, code = e.cli([]string{"RELAY_INPUT_WINDOW=90s"}, "spec", "accept", "--yes")
		if code != 1 || !strings.Contains(stderr, "input.window: 5m -> 1m30s") {
			t.Fatalf("%s: spec accept of a changed window: exit %d\n%s%s", when, code, out, stderr)
		}
	}
	refuse("recorded at first use")
	// Nothing was written by the refused runs: the table still holds exactly the 5m totals.
	want, _, _ := totals.Snapshot()
	if d := diff(want, e.actual(plan)); d != "" {
		t.Fatalf("a refused start changed the table:\n%s", d)
	}
	if out, stderr, code := e.cli(nil, "spec", "diff"); code != 0 || !lineHas(out, "order_stats_minute", "unchanged") {
		t.Fatalf("spec diff of the unchanged spec: exit %d\n%s%s", code, out, stderr)
	}

	// A ledger as main's code left it: relay_tables claims the table, relay_table_specs does not exist.
	if _, err := e.db.Exec("DROP TABLE relay_table_specs"); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := e.cli(nil, "spec", "diff"); code != 0 || !lineHas(out, "order_stats_minute", "recorded at the next start", "from before relay recorded meanings") {
		t.Fatalf("spec diff of a ledger without meanings: exit %d\n%s%s", code, out, stderr)
	}
	opts.Seed, opts.Orders = 24, 100
	if err := e.produce(context.Background(), totals, opts); err != nil {
		t.Fatal(err)
	}
	e.finish(totals)
	if !strings.Contains(tail(e.logs[len(e.logs)-1], 200), "the ledger is from before relay recorded meanings") {
		t.Errorf("the upgrading run does not log the meaning it recorded:\n%s", tail(e.logs[len(e.logs)-1], 20))
	}
	refuse("recorded on upgrade")
}

const driftSpec = `
pipeline:
  input:
    fields:
      sku: string(64)
      amount: decimal(4)
    event_time: {field: ts, format: epoch_ms}
  aggregates:
    - table: sales_5m
      window: 5m
      dimensions: [{column: sku, field: sku}]
      measures: [{column: orders, kind: count}, {column: revenue, kind: sum, field: amount}]
`

// A pipeline spec: a changed window is refused with pipeline.aggregates[0].window; a new table is
// refused at start until relay spec accept --yes, whose plan names the committed offsets it starts
// from, and then counts only the records after them; a removed table is refused until accepted.
func TestSpecDriftPipeline(t *testing.T) {
	e := newEnv(t, 2)
	dir := t.TempDir()
	write := func(name, y string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return "--config=" + p
	}
	one := write("one.yaml", driftSpec)
	changed := write("changed.yaml", strings.Replace(driftSpec, "window: 5m", "window: 90s", 1))
	two := write("two.yaml", driftSpec+`    - table: orders_hour
      window: 1h
      measures: [{column: orders, kind: count}]
`)
	cfg, err := config.Load(strings.TrimPrefix(one, "--config="), nil)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	totals := loadgen.NewTotals()
	if err := e.produce(context.Background(), totals, loadgen.Options{Plan: plan, Orders: 150, Batch: 50, SKUs: 5, Windows: 2, Seed: 31}); err != nil {
		t.Fatal(err)
	}
	p := e.start(one)
	testenv.Eventually(t, 60*time.Second, func() bool { p.exited(t); return e.sumOf("sales_5m", "orders") == 150 }, "the first 150 orders")
	e.stopAll([]*proc{p})

	if log := e.refusedAtStart(changed); !strings.Contains(log, "pipeline.aggregates[0].window: 5m -> 1m30s") {
		t.Fatalf("a changed window is not refused with its YAML path:\n%s", log)
	}
	if log := e.refusedAtStart(two); !strings.Contains(log, "spec not accepted") || !strings.Contains(log, "table orders_hour (pipeline.aggregates[1]) is new") {
		t.Fatalf("a new table is not refused at start:\n%s", log)
	}
	offs, last, err := ledger.New(e.db, e.job).PartitionOffsets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	start := fmt.Sprintf("%s:0=%d,%s:1=%d", e.topic, offs[e.topic][0], e.topic, offs[e.topic][1])
	out, stderr, code := e.cli(nil, "spec", "accept", two)
	if code != 5 || !lineHas(out, "orders_hour", "pipeline.aggregates[1]", "NEW") || !strings.Contains(out, "committed offsets "+start) ||
		!strings.Contains(out, "not comparable") || !strings.Contains(out, fmt.Sprintf("last checkpoint %d", last)) {
		t.Fatalf("spec accept without --yes: exit %d, want 5 and a plan naming offsets %s\n%s%s", code, start, out, stderr)
	}
	if log := e.refusedAtStart(two); !strings.Contains(log, "spec not accepted") {
		t.Fatalf("a plan shown without --yes accepted the table:\n%s", log)
	}
	out, stderr, code = e.cli(nil, "spec", "accept", "--yes", two)
	if code != 0 || !strings.Contains(out, "spec accepted; new tables start from offsets "+start) {
		t.Fatalf("spec accept --yes: exit %d\n%s%s", code, out, stderr)
	}
	entries, err := ledger.New(e.db, e.job).AuditLog(context.Background(), 1000)
	var audit string
	for i := len(entries) - 1; i >= 0 && audit == ""; i-- { // oldest first, as the row read was
		if entries[i].Action == ledger.AuditSpecAccept {
			audit = entries[i].Detail
		}
	}
	if err != nil || !strings.Contains(audit, "+orders_hour") {
		t.Fatalf("audit row: %q, %v", audit, err)
	}
	if out, stderr, code := e.cli(nil, "spec", "diff", two); code != 0 || !lineHas(out, "orders_hour", "unchanged") {
		t.Fatalf("spec diff after accept: exit %d\n%s%s", code, out, stderr)
	}

	// The new table counts the records after the offsets it was accepted at, the old one all.
	if err := e.produce(context.Background(), totals, loadgen.Options{Plan: plan, Orders: 60, Batch: 20, SKUs: 5, Windows: 2, Seed: 32}); err != nil {
		t.Fatal(err)
	}
	p = e.start(two)
	testenv.Eventually(t, 60*time.Second, func() bool { p.exited(t); return e.sumOf("sales_5m", "orders") == 210 }, "all 210 orders in sales_5m")
	testenv.Eventually(t, 60*time.Second, func() bool { p.exited(t); return e.sumOf("orders_hour", "orders") == 60 }, "the 60 later orders in orders_hour")
	if out, stderr, code := e.cli(nil, "spec", "accept", "--yes", one); code != 3 {
		t.Fatalf("spec accept while relay runs: exit %d, want 3 (fenced)\n%s%s", code, out, stderr)
	}
	e.stopAll([]*proc{p})

	// Taking the table out again is a removal, refused until accepted.
	if log := e.refusedAtStart(one); !strings.Contains(log, "table orders_hour is no longer in the spec") {
		t.Fatalf("a removed table is not refused at start:\n%s", log)
	}
	if out, stderr, code := e.cli(nil, "spec", "diff", one); code != 4 || !lineHas(out, "orders_hour", "REMOVED") {
		t.Fatalf("spec diff of a removed table: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := e.cli(nil, "spec", "accept", "--yes", one); code != 0 || !strings.Contains(out, "spec accepted") {
		t.Fatalf("spec accept --yes of a removal: exit %d\n%s%s", code, out, stderr)
	}
	p = e.start(one)
	if _, err := p.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, 60*time.Second); err != nil {
		t.Fatalf("relay did not start after the removal was accepted: %v\n%s", err, tail(p.Log, 20))
	}
	e.stopAll([]*proc{p})
	// Adding it back is a new table again, and the plan says it already holds rows.
	if log := e.refusedAtStart(two); !strings.Contains(log, "table orders_hour (pipeline.aggregates[1]) is new") {
		t.Fatalf("a table added back is not refused as new:\n%s", log)
	}
	if out, stderr, code := e.cli(nil, "spec", "accept", two); code != 5 || !strings.Contains(out, "new tables that already hold rows: orders_hour") {
		t.Fatalf("the plan for a table added back: exit %d\n%s%s", code, out, stderr)
	}
}

// A second relay run with another window starts while the job (which committed nothing yet) runs:
// the fence refuses it (exit 3) before it records anything, so the ledger keeps the running spec's
// meaning, and once the running job committed, its restart is accepted and the other spec refused.
func TestSpecDriftFenced(t *testing.T) {
	e := newEnv(t, 1, "RELAY_INPUT_WINDOW=5m")
	a := e.start()
	testenv.Eventually(t, 30*time.Second, func() bool { a.exited(t); return len(logEvents(t, a.Log, "recovered")) > 0 }, "the first relay running")
	b := e.start("RELAY_INPUT_WINDOW=90s")
	err := b.wait(t, 30*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("relay with another spec next to the running one: %v, want exit status 3\n%s", err, tail(b.Log, 10))
	}
	sinkDSN, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	meanings, err := ledger.New(e.db, e.job).Meanings(context.Background(), sinkDSN.DBName)
	for table, meaning := range meanings {
		if !strings.Contains(meaning, `"window_seconds":300`) {
			t.Errorf("the fenced relay recorded its meaning for %s: %s", table, meaning)
		}
	}
	if n := len(meanings); err != nil || n == 0 {
		t.Fatalf("recorded meanings: %d, %v", n, err)
	}
	cfg := config.Default()
	cfg.Input.Window = 5 * time.Minute
	plan, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	opts := loadgen.Options{Plan: plan, Orders: 20, Batch: 10, SKUs: 2, Windows: 1, Window: 5 * time.Minute, Seed: 41}
	if err := e.produce(context.Background(), loadgen.NewTotals(), opts); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		a.exited(t)
		_, last, err := ledger.New(e.db, e.job).PartitionOffsets(context.Background())
		return err == nil && last > 0
	}, "the first relay's first checkpoint")
	e.stopAll([]*proc{a})
	a = e.start()
	if _, err := a.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, 60*time.Second); err != nil {
		t.Fatalf("the job's own spec is refused after the fenced start: %v\n%s", err, tail(a.Log, 20))
	}
	e.stopAll([]*proc{a})
	if log := e.refusedAtStart("RELAY_INPUT_WINDOW=90s"); !strings.Contains(log, "input.window: 5m -> 1m30s") {
		t.Fatalf("the other spec is not refused as drift:\n%s", log)
	}
}
