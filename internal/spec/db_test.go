package spec

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/testenv"
)

// serverDB is a fresh database of the test server, a context and the server's flavor.
func serverDB(t *testing.T) (*sql.DB, context.Context, sink.Flavor) {
	t.Helper()
	db := testenv.Open(t, testenv.Database(t))
	ctx := testenv.Context(t, time.Minute)
	flavor, _, err := sink.DetectFlavor(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return db, ctx, flavor
}

// The rendered DDL and upserts of a two-aggregate spec run on the real server, and after two
// epochs' upserts every column holds what the records add up to: counts and sums added, min and
// max kept across epochs, a row new in the second epoch starting from its own values.
func TestUpsertAgainstServer(t *testing.T) {
	db, ctx, flavor := serverDB(t)
	p := mustParse(t, multi)
	for a := range p.Tables() {
		if _, err := db.ExecContext(ctx, p.SinkTable(a).CreateSQL(flavor)); err != nil {
			t.Fatalf("create %s: %v", p.Tables()[a], err)
		}
	}
	h := time.Date(2025, 11, 24, 16, 0, 0, 0, time.UTC)
	epochs := [][][]byte{{
		record("paid", "eu", 2, "10.50", h.Add(time.Minute)),
		record("paid", "eu", 2, "-3", h.Add(2*time.Minute)),
		record("paid", "eu ", 1, "99999999999999.99", h), // trailing space: its own row
		record("paid", "EU", 1, "1", h),                  // case: its own row
	}, {
		record("shipped", "eu", 2, "-7.01", h.Add(30*time.Minute)), // new min
		record("paid", "eu", 2, "20", h.Add(31*time.Minute)),
		record("paid", "eu", -4, "0.01", h.Add(32*time.Minute)), // new key in epoch 2
		record("cancelled", "eu", 2, "1000", h),                 // daily table only
	}}
	all := []*Tables{p.NewTables()}
	for _, recs := range epochs {
		st := []*Tables{p.NewTables()}
		foldAll(t, p, st, recs...)
		foldAll(t, p, all, recs...)
		for a := range p.Tables() {
			if _, err := db.ExecContext(ctx, string(p.AppendUpsert(nil, a, st[0].Rows(a)))); err != nil {
				t.Fatalf("upsert %s: %v", p.Tables()[a], err)
			}
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT window_start, region, qty_bucket, orders, CAST(revenue AS CHAR),
		CAST(cheapest AS CHAR), most_qty, CAST(units AS CHAR) FROM sales_by_region_hour ORDER BY window_start, region, qty_bucket`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var ws time.Time
		var region, revenue, cheapest, units string
		var bucket, orders, mostQty int64
		if err := rows.Scan(&ws, &region, &bucket, &orders, &revenue, &cheapest, &mostQty, &units); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %q %d: %d %s %s %d %s", ws.UTC().Format("15:04"), region, bucket, orders, revenue, cheapest, mostQty, units))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`16:00 "EU" 1: 1 1.00 1.00 1 1`,
		`16:00 "eu" -4: 1 0.01 0.01 -4 -4`,
		`16:00 "eu" 2: 4 20.49 -7.01 2 8`,
		`16:00 "eu " 1: 1 99999999999999.99 99999999999999.99 1 1`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sales_by_region_hour\n%v\nwant\n%v", got, want)
	}
	var orders int64
	var dearest string
	if err := db.QueryRowContext(ctx, "SELECT orders, CAST(dearest AS CHAR) FROM sales_day").Scan(&orders, &dearest); err != nil {
		t.Fatal(err)
	}
	if orders != 8 || dearest != "99999999999999.99" {
		t.Fatalf("sales_day: %d orders, dearest %s", orders, dearest)
	}
	// Read back, every table is the fold of all the records, key for key.
	for a := range p.Tables() {
		got := readBack(t, db, p, a)
		want := all[0].Rows(a)
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows read back, %d folded", p.Tables()[a], len(got), len(want))
		}
		for i := range want {
			if !Same(got[i], want[i]) {
				t.Fatalf("%s: read back %+v, folded %+v", p.Tables()[a], got[i], want[i])
			}
		}
	}
}

// readBack reads aggregate a with Select and ParseRow, in key order.
func readBack(t *testing.T, db *sql.DB, p *Plan, a int) []Row {
	t.Helper()
	rows, err := db.Query(p.Select(a))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []Row
	cols := make([][]byte, p.Columns(a))
	ptrs := make([]any, len(cols))
	for i := range cols {
		ptrs[i] = &cols[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		r, err := p.ParseRow(a, cols)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(out, func(x, y Row) int { return strings.Compare(x.Key, y.Key) })
	return out
}

// sink.Schema.Check holds an existing spec table to the plan's definition: what Create made passes;
// a min column of another scale, a dimension in a collation that ignores case and a missing
// measure are refused, each named.
func TestSchemaCheckCoversSpecTables(t *testing.T) {
	db, ctx, flavor := serverDB(t)
	s := mustParse(t, multi).Schema("relay_dlq", "")
	if err := s.Create(ctx, db, flavor); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"ALTER TABLE sales_by_region_hour MODIFY cheapest DECIMAL(38,4) NOT NULL",
		"ALTER TABLE sales_by_region_hour MODIFY region VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL",
		"ALTER TABLE sales_day DROP COLUMN dearest",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Check(ctx, db, flavor)
	for _, want := range []string{
		".sales_by_region_hour: ", "column cheapest is decimal(38,4), want decimal(38,2)",
		"column region has collation utf8mb4_general_ci",
		".sales_day: column dearest is missing (want DECIMAL(38,2) NOT NULL)",
	} {
		if !errors.Is(err, sink.ErrTableDiffers) || !strings.Contains(err.Error(), want) {
			t.Errorf("check: %v\nwant %q", err, want)
		}
	}
}

// The default spec's upsert is additive, keeps skus that differ only in case or trailing space
// apart (binary, no-pad collation), stores any UTF-8 byte-exactly, and sums exactly to the 4th
// decimal.
func TestDefaultUpsertAgainstServer(t *testing.T) {
	db, ctx, flavor := serverDB(t)
	p := defaultPlan(t, "order_stats_minute")
	if err := p.Schema("relay_dlq", "").Create(ctx, db, flavor); err != nil {
		t.Fatal(err)
	}
	w := time.Date(2026, 11, 24, 16, 0, 0, 0, time.UTC)
	skus := []string{"SKU-1", "sku-1", "sku-1 ", "ü'\\\"; DROP TABLE x; --", "雪"}
	st := []*Tables{p.NewTables()}
	d := p.NewDecoder()
	var r Record
	for i, sku := range skus {
		for _, amount := range []string{"0.0001", "99999999.9999"} {
			b, _ := json.Marshal(map[string]any{"order_id": fmt.Sprint(i), "sku": sku, "amount": amount, "ts": w.UnixMilli()})
			if reason, field := d.Decode(b, &r); reason != OK {
				t.Fatalf("%s: %v %s", b, reason, field)
			}
			p.Fold(&r, st)
		}
	}
	for range 2 {
		if _, err := db.ExecContext(ctx, string(p.AppendUpsert(nil, 0, st[0].Rows(0)))); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.QueryContext(ctx, "SELECT sku, order_count, CAST(amount_sum AS CHAR), window_start FROM order_stats_minute")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var sku, sum string
		var n int64
		var ws time.Time
		if err := rows.Scan(&sku, &n, &sum, &ws); err != nil {
			t.Fatal(err)
		}
		got[sku] = true
		// Two rounds of two orders each: 4 orders, 2 × (0.0001 + 99999999.9999) = 200000000.0000.
		if n != 4 || sum != "200000000.0000" || !ws.Equal(w) {
			t.Errorf("%q: count %d sum %s window %s", sku, n, sum, ws)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, sku := range skus {
		if !got[sku] {
			t.Errorf("sku %q was not stored as its own row", sku)
		}
	}
	if len(got) != len(skus) {
		t.Fatalf("%d rows for %d distinct skus", len(got), len(skus))
	}
}
