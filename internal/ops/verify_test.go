package ops

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

// committedLoad produces o into the job's topic (retrying a producer the broker made fatal: a new
// one with the same transactional.id fences it, and totals hold exactly what committed), writes
// the expected tables into MySQL as relay would have (the plan's own upserts), decides checkpoint
// 3 at the topic's end and writes the totals file. It returns the totals, their tables and the
// file.
func committedLoad(t *testing.T, ctx context.Context, e *Env, o loadgen.Options) (*loadgen.Totals, loadgen.Tables, string) {
	t.Helper()
	topic := e.Config.Kafka.Topics[0]
	o.Brokers, o.Topic, o.TxnID = e.Config.Kafka.Brokers.String(), topic, "lg-"+topic
	totals := loadgen.NewTotals()
	err := loadgen.Run(ctx, o, totals)
	for attempt := 2; err != nil && attempt <= 3; attempt++ {
		t.Logf("producing: %v; again", err)
		err = loadgen.Run(ctx, o, totals)
	}
	if err != nil {
		t.Fatal(err)
	}
	if totals.Aborted == 0 {
		t.Fatal("no aborted transaction: the test would not show that verify skips them")
	}
	want, _, _ := totals.Snapshot()
	for a, rows := range want.Rows {
		if len(rows) == 0 {
			t.Fatalf("no rows expected in %s: the load does not exercise it", want.Plan.Tables()[a])
		}
		if _, err := e.Sink.ExecContext(ctx, string(want.Plan.AppendUpsert(nil, a, rows))); err != nil {
			t.Fatal(err)
		}
	}
	decide(t, ctx, e, 3, highWatermarks(t, e))
	if err := e.Ledger.MarkCommitted(ctx, 3); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "totals.json")
	if err := totals.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	return totals, want, file
}

// row is aggregate a's expected row i as MySQL prints its columns.
func row(t *testing.T, want loadgen.Tables, a, i int) []string {
	t.Helper()
	cols, err := want.Plan.Format(a, want.Rows[a][i])
	if err != nil {
		t.Fatal(err)
	}
	return cols
}

// requireDiffs runs verify recounting and against the file, and requires exactly wantDiffs (in
// any order) and each table's count of them.
func requireDiffs(t *testing.T, ctx context.Context, e *Env, file string, perTable []int, wantDiffs ...KeyDiff) {
	t.Helper()
	for _, o := range []VerifyOptions{{From: "earliest"}, {Expected: file}} {
		r, err := Verify(ctx, e, o)
		if err != nil {
			t.Fatal(err)
		}
		if r.Clean || r.DiffCount != len(wantDiffs) || len(r.Differences) != len(wantDiffs) {
			t.Fatalf("%+v: %d differences %+v, want exactly the %d injected", o, r.DiffCount, r.Differences, len(wantDiffs))
		}
		for _, d := range r.Differences {
			found := false
			for _, w := range wantDiffs {
				found = found || reflect.DeepEqual(d, w)
			}
			if !found {
				t.Fatalf("%+v: difference %+v, want one of %+v", o, d, wantDiffs)
			}
		}
		for a, n := range perTable {
			if r.Tables[a].DiffCount != n {
				t.Fatalf("%+v: table %s reports %d differences, want %d", o, r.Tables[a].Table, r.Tables[a].DiffCount, n)
			}
		}
	}
}

// verify finds nothing when MySQL holds exactly what the committed Kafka transactions carried (up
// to the checkpoint's offsets, transaction markers and aborted records included), and names each
// key that differs when it does not, both recounting and against a totals file.
func TestVerify(t *testing.T) {
	e, ctx := newEnv(t, 2)
	totals, want, file := committedLoad(t, ctx, e, loadgen.Options{Orders: 600, Batch: 50, AbortRate: 0.3, SKUs: 20, Windows: 3, Seed: 7})
	_, _, good := totals.Snapshot()
	keys := len(want.Rows[0])
	r, err := Verify(ctx, e, VerifyOptions{From: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean || r.Good != good || r.Records != good || r.KeysExpected != keys || r.KeysActual != keys || *r.Checkpoint != 3 ||
		len(r.Tables) != 1 || r.Tables[0].Table != "order_stats_minute" || r.Tables[0].KeysExpected != keys {
		t.Fatalf("clean recount reported %+v; want clean, %d good records, %d keys", r, good, keys)
	}
	if r, err = Verify(ctx, e, VerifyOptions{Expected: file}); err != nil || !r.Clean {
		t.Fatalf("clean comparison with the totals file: %+v, %v", r, err)
	}

	// One sum off by the smallest unit, one row gone, one row nothing accounts for. The changed and
	// the deleted key have different skus.
	changed, gone := row(t, want, 0, 0), []string(nil)
	for i := range want.Rows[0] {
		if c := row(t, want, 0, i); c[1] != changed[1] {
			gone = c
			break
		}
	}
	for _, q := range []string{
		fmt.Sprintf(`UPDATE order_stats_minute SET amount_sum = amount_sum + 0.0001 WHERE window_start = '%s' AND sku = '%s'`, changed[0], changed[1]),
		fmt.Sprintf(`DELETE FROM order_stats_minute WHERE window_start = '%s' AND sku = '%s'`, gone[0], gone[1]),
		`INSERT INTO order_stats_minute VALUES ('2030-01-01 00:00:00', 'SKU-extra', 1, 2.5)`,
	} {
		if _, err := e.Sink.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	bumped := want.Rows[0][0].Accs[1].Sum
	bumped.Add(1)
	key := func(c []string) map[string]string { return map[string]string{"window_start": c[0], "sku": c[1]} }
	measures := func(c []string) map[string]string { return map[string]string{"order_count": c[2], "amount_sum": c[3]} }
	requireDiffs(t, ctx, e, file, []int{3},
		KeyDiff{Table: "order_stats_minute", Kind: DiffDiffers, Key: key(changed), Expected: measures(changed),
			Actual: map[string]string{"order_count": changed[2], "amount_sum": bumped.String()}},
		KeyDiff{Table: "order_stats_minute", Kind: DiffMissing, Key: key(gone), Expected: measures(gone)},
		KeyDiff{Table: "order_stats_minute", Kind: DiffExtra, Key: map[string]string{"window_start": "2030-01-01 00:00:00", "sku": "SKU-extra"},
			Actual: map[string]string{"order_count": "1", "amount_sum": "2.5000"}})

	// A dead-letter row no bad record accounts for.
	if _, err := e.Sink.ExecContext(ctx, `INSERT INTO relay_dlq (job, topic, kpartition, koffset, reason, payload, payload_bytes, checkpoint_id)
		VALUES (?, ?, 0, 0, 'not_json', 'x', 1, 3)`, e.Config.Job.Name, e.Config.Kafka.Topics[0]); err != nil {
		t.Fatal(err)
	}
	if r, err = Verify(ctx, e, VerifyOptions{}); err != nil || r.DeadLetter.ExtraCount != 1 || r.DeadLetter.Extra[0].Reason != "not_json" {
		t.Fatalf("extra dead-letter row: %+v, %v", r.DeadLetter, err)
	}
	if r, err = Verify(ctx, e, VerifyOptions{From: "3"}); err != nil || r.Records != 0 || r.DiffCount != r.KeysActual {
		t.Fatalf("recount from the last checkpoint's own offsets: %+v, %v; want nothing counted, every row extra", r, err)
	}

	// A checkpoint whose branches are not all committed yet: no consistent snapshot to compare.
	defer func(p fault.Policy) { snapshotRetry = p }(snapshotRetry)
	snapshotRetry = fault.Policy{Attempts: 2, Initial: time.Millisecond, Max: time.Millisecond}
	decide(t, ctx, e, 4, highWatermarks(t, e), tag(e, 4, 0))
	if _, err = Verify(ctx, e, VerifyOptions{}); err == nil || !strings.Contains(err.Error(), "COMMITTING") {
		t.Fatalf("verify with checkpoint 4 still COMMITTING: %v, want a refusal", err)
	}
}

// verify recounts a job with a pipeline block (testenv.SalesSpec) by its own spec and compares
// every table: clean when
// they hold the fold of what committed, and a difference in the second and in the third table is
// reported there, by column, both recounting and against the totals file.
func TestVerifySpec(t *testing.T) {
	var file struct {
		Pipeline spec.Spec
	}
	if err := yaml.Unmarshal([]byte(testenv.SalesSpec), &file); err != nil {
		t.Fatal(err)
	}
	e, ctx := newEnv(t, 2, func(c *config.Config) { c.Pipeline = &file.Pipeline })
	plan, err := e.Config.Plan()
	if err != nil {
		t.Fatal(err)
	}
	totals, want, totalsFile := committedLoad(t, ctx, e, loadgen.Options{Plan: plan, Orders: 800, Batch: 50, AbortRate: 0.3, SKUs: 12,
		Distinct: map[string]int{"shop": 4, "region": 3}, Windows: 90, Seed: 9})
	_, _, good := totals.Snapshot()
	for _, o := range []VerifyOptions{{From: "earliest"}, {Expected: totalsFile}} {
		r, err := Verify(ctx, e, o)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Clean || r.Good != good || r.KeysExpected != want.Keys() || r.KeysActual != want.Keys() || len(r.Tables) != 3 {
			t.Fatalf("%+v: clean load reported %+v; want clean, %d good records, %d keys in 3 tables", o, r, good, want.Keys())
		}
		for a, tr := range r.Tables {
			if tr.Table != plan.Tables()[a] || tr.KeysExpected != len(want.Rows[a]) || tr.KeysActual != len(want.Rows[a]) {
				t.Fatalf("%+v: table %d reported %+v", o, a, tr)
			}
		}
	}

	// The filtered table's min lowered by the smallest unit; a rollup row gone.
	paid, region := row(t, want, 2, 0), row(t, want, 1, 0)
	for _, q := range []string{
		fmt.Sprintf(`UPDATE paid_sku_hour SET cheapest = cheapest - 0.0001 WHERE window_start = '%s' AND sku = '%s'`, paid[0], paid[1]),
		fmt.Sprintf(`DELETE FROM sales_region_hour WHERE window_start = '%s' AND region = '%s'`, region[0], region[1]),
	} {
		if _, err := e.Sink.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	lowered := want.Rows[2][0]
	lowered.Accs = append([]spec.Acc(nil), lowered.Accs...)
	lowered.Accs[1].N--
	cheaper, err := plan.Format(2, lowered)
	if err != nil {
		t.Fatal(err)
	}
	paidMeasures := func(c []string) map[string]string {
		return map[string]string{"orders": c[2], "cheapest": c[3], "dearest": c[4], "revenue": c[5]}
	}
	requireDiffs(t, ctx, e, totalsFile, []int{0, 1, 1},
		KeyDiff{Table: "paid_sku_hour", Kind: DiffDiffers, Key: map[string]string{"window_start": paid[0], "sku": paid[1]},
			Expected: paidMeasures(paid), Actual: paidMeasures(cheaper)},
		KeyDiff{Table: "sales_region_hour", Kind: DiffMissing, Key: map[string]string{"window_start": region[0], "region": region[1]},
			Expected: map[string]string{"orders": region[2], "revenue": region[3]}})

	var out strings.Builder
	r, err := Verify(ctx, e, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	wantLine := fmt.Sprintf("differs  paid_sku_hour %s %q: expected orders %s, cheapest %s, dearest %s, revenue %s; MySQL has orders %s, cheapest %s, dearest %s, revenue %s\n",
		paid[0], paid[1], paid[2], paid[3], paid[4], paid[5], paid[2], cheaper[3], paid[4], paid[5])
	if !strings.Contains(out.String(), wantLine) || !strings.Contains(out.String(), "table sales_region_hour (window_start, region): ") {
		t.Fatalf("text report\n%s\nwant the line\n%s", out.String(), wantLine)
	}
}

// A job that never committed anything has nothing to verify.
func TestVerifyNoCheckpoint(t *testing.T) {
	e, ctx := newEnv(t, 1)
	if _, err := Verify(ctx, e, VerifyOptions{}); err == nil || !strings.Contains(err.Error(), "no decided checkpoint") {
		t.Fatalf("got %v", err)
	}
}
