package sink

import (
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/aggregate"
	"github.com/relay-sh/relay/internal/money"
)

// The rendered upsert is additive, keeps skus that differ only in case or trailing space apart
// (binary, no-pad collation), stores any UTF-8 byte-exactly, and sums exactly to the 4th decimal.
func TestUpsertAgainstServer(t *testing.T) {
	db, ctx, flavor := serverDB(t)
	s := Schema{Table: "order_stats_minute", DLQ: "relay_dlq", Detail: "order_details"}
	if err := s.Create(ctx, db, flavor); err != nil {
		t.Fatal(err)
	}
	w := time.Date(2026, 11, 24, 16, 0, 0, 0, time.UTC).UnixMilli()
	skus := []string{"SKU-1", "sku-1", "sku-1 ", "ü'\\\"; DROP TABLE x; --", "雪"}
	tbl := aggregate.NewTable()
	for _, sku := range skus {
		tbl.Add(w, []byte(sku), 1)            // 0.0001
		tbl.Add(w, []byte(sku), 999999999999) // 99999999.9999
	}
	for round := 0; round < 2; round++ {
		if _, err := db.ExecContext(ctx, string(s.AppendUpsert(nil, tbl.Rows()))); err != nil {
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
		if n != 4 || sum != "200000000.0000" || !ws.Equal(time.UnixMilli(w).UTC()) {
			t.Errorf("%q: count %d sum %s window %s", sku, n, sum, ws)
		}
	}
	for _, sku := range skus {
		if !got[sku] {
			t.Errorf("sku %q was not stored as its own row", sku)
		}
	}
	if len(got) != len(skus) {
		t.Fatalf("%d rows for %d distinct skus", len(got), len(skus))
	}

	dlq := []DLQRow{{Topic: "orders", Partition: 3, Offset: 42, Reason: "not_json", Payload: []byte("\x00\xff{'"), Size: 9}}
	if _, err := db.ExecContext(ctx, string(s.AppendDLQInsert(nil, "job1", 7, dlq))); err != nil {
		t.Fatal(err)
	}
	var payload []byte
	var size int
	if err := db.QueryRowContext(ctx, "SELECT payload, payload_bytes FROM relay_dlq WHERE koffset = 42").Scan(&payload, &size); err != nil {
		t.Fatal(err)
	}
	if string(payload) != "\x00\xff{'" || size != 9 {
		t.Fatalf("dead-letter payload %q size %d", payload, size)
	}
	det := []DetailRow{{OrderID: "o-1", SKU: "sku-1 ", Amount: -55000, TS: w + 1234, Topic: "orders", Partition: 1, Offset: 9}}
	if _, err := db.ExecContext(ctx, string(s.AppendDetailInsert(nil, det))); err != nil {
		t.Fatal(err)
	}
	var amount string
	var et time.Time
	if err := db.QueryRowContext(ctx, "SELECT CAST(amount AS CHAR), event_time FROM order_details WHERE sku = 'sku-1 '").Scan(&amount, &et); err != nil {
		t.Fatal(err)
	}
	if amount != money.FormatUnits(-55000) || !et.Equal(time.UnixMilli(w+1234).UTC()) {
		t.Fatalf("detail row: amount %s event_time %s", amount, et)
	}
}

func TestRenderedSQL(t *testing.T) {
	s := Schema{Table: "t"}
	rows := []aggregate.Row{{WindowMS: 0, SKU: "a'b", Acc: aggregate.Acc{Count: 2, Sum: money.SumOf(15000)}}}
	want := "INSERT INTO `t` (window_start, sku, order_count, amount_sum) VALUES ('1970-01-01 00:00:00',_utf8mb4 X'612762',2,1.5000) ON DUPLICATE KEY UPDATE order_count = order_count + VALUES(order_count), amount_sum = amount_sum + VALUES(amount_sum)"
	if got := string(s.AppendUpsert(nil, rows)); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
