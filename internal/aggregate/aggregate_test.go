package aggregate

import (
	"bytes"
	"testing"

	"github.com/relay-sh/relay/internal/money"
)

// Rows come out in primary-key byte order (window, then sku bytes) with exact sums; routing is
// stable and in range.
func TestTableRowsSortedAndExact(t *testing.T) {
	tb := NewTable()
	in := []struct {
		w   int64
		sku string
		amt int64
	}{
		{120000, "b", 1}, {60000, "b", 2}, {60000, "B", 3}, {60000, "b ", 4}, {60000, "b", 5},
		{120000, "a", 6}, {60000, "ü", 7}, {60000, "z", 8},
	}
	for _, r := range in {
		tb.Add(r.w, []byte(r.sku), r.amt)
	}
	rows := tb.Drain()
	if len(rows) != 7 || tb.Len() != 0 || len(tb.Rows()) != 0 {
		t.Fatalf("%d rows (want 7); after Drain the table has %d keys (want 0)", len(rows), tb.Len())
	}
	for i := 1; i < len(rows); i++ {
		a, b := rows[i-1], rows[i]
		if a.WindowMS > b.WindowMS || (a.WindowMS == b.WindowMS && bytes.Compare([]byte(a.SKU), []byte(b.SKU)) >= 0) {
			t.Fatalf("rows %d and %d out of key order: %+v %+v", i-1, i, a, b)
		}
	}
	for _, r := range rows {
		if r.WindowMS == 60000 && r.SKU == "b" && (r.Count != 2 || r.Sum.Cmp(money.SumOf(7)) != 0) {
			t.Fatalf("(60000, b) = %d / %s, want 2 / 0.0007", r.Count, r.Sum)
		}
	}
}

func TestWindowAndRoute(t *testing.T) {
	if got := Window(1764000059999, 60000); got != 1764000000000 {
		t.Fatalf("Window = %d", got)
	}
	seen := map[int]bool{}
	for i := 0; i < 1000; i++ {
		sku := []byte{byte(i), byte(i >> 8)}
		r := Route(60000, sku, 4)
		if r < 0 || r >= 4 || r != Route(60000, sku, 4) {
			t.Fatalf("Route out of range or unstable: %d", r)
		}
		seen[r] = true
	}
	if len(seen) != 4 {
		t.Fatalf("1000 keys reached only subtasks %v", seen)
	}
	if Route(1, []byte("x"), 1) != 0 {
		t.Fatal("one subtask must get every key")
	}
}
