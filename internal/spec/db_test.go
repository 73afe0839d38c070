package spec

import (
	"fmt"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/testenv"
)

// The rendered DDL and upserts of a two-aggregate spec run on the real server, and after two
// epochs' upserts every column holds what the records add up to: counts and sums added, min and
// max kept across epochs, a row new in the second epoch starting from its own values.
func TestUpsertAgainstServer(t *testing.T) {
	db := testenv.Open(t, testenv.Database(t))
	ctx := testenv.Context(t, time.Minute)
	flavor, _, err := sink.DetectFlavor(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	p := mustParse(t, multi)
	for a := range p.Tables() {
		if _, err := db.ExecContext(ctx, string(p.AppendCreate(nil, a, flavor))); err != nil {
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
	for _, recs := range epochs {
		st := []*Tables{p.NewTables()}
		foldAll(t, p, st, recs...)
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
}
