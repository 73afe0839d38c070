package sink_test

import (
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/sink"
)

// Dead-letter and append-sink rows are stored byte-exactly (aggregate upserts: internal/spec).
func TestRowsAgainstServer(t *testing.T) {
	db, ctx, flavor := serverDB(t)
	s := schema(t, "order_stats_minute", "relay_dlq", "order_details")
	if err := s.Create(ctx, db, flavor); err != nil {
		t.Fatal(err)
	}
	w := time.Date(2026, 11, 24, 16, 0, 0, 0, time.UTC).UnixMilli()
	dlq := []sink.DLQRow{{Topic: "orders", Partition: 3, Offset: 42, Reason: "not_json", Payload: []byte("\x00\xff{'"), Size: 9}}
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
	det := []sink.DetailRow{{OrderID: "o-1", SKU: "sku-1 ", Amount: -55000, TS: w + 1234, Topic: "orders", Partition: 1, Offset: 9}}
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
