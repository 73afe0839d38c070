package loadgen

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/relay-sh/relay/internal/order"
)

// Each bad kind the generator makes is filed by relay's decoder under the reason the totals
// expect, and together they cover every reason the decoder knows: a test that feeds them checks
// every kind of bad input.
func TestBadRecordsCoverEveryReason(t *testing.T) {
	d := order.NewDecoder(order.DefaultFields(), order.DefaultLimits())
	seen := map[string]bool{}
	for _, b := range badRecords {
		var o order.Order
		if got := d.Decode([]byte(b.Payload), &o).String(); got != b.Reason {
			t.Errorf("payload for %s decodes as %s", b.Reason, got)
		}
		seen[b.Reason] = true
	}
	for _, r := range order.AllReasons() {
		if !seen[r.String()] {
			t.Errorf("no bad record of kind %s", r)
		}
	}
}

// Bad records come in turn: any run of len(badRecords) of them holds each kind once.
func TestGeneratorCyclesBadKinds(t *testing.T) {
	g := NewGenerator(Options{BadRate: 0.5, Seed: 3})
	var reasons []string
	for len(reasons) < 2*len(badRecords) {
		if _, r := g.Next(); r.bad != nil {
			reasons = append(reasons, r.bad.Reason)
		}
	}
	for i, r := range reasons {
		if want := badRecords[i%len(badRecords)].Reason; r != want {
			t.Fatalf("bad record %d is %s, want %s", i, r, want)
		}
	}
}

// The summary loadgen prints counts what was sent and sums exactly what committed.
func TestTotalsSummary(t *testing.T) {
	tot := NewTotals()
	k1, k2 := Key{WindowMS: 0, SKU: "a"}, Key{WindowMS: 60000, SKU: "a"}
	tot.record([]pendingRec{{key: k1, amount: 1}, {key: k2, amount: 99999}, {bad: &badRecords[0]}}, true) // 0.0001 + 9.9999
	tot.record([]pendingRec{{key: k1, amount: 5}}, false)
	want := "4 records sent: 2 good orders committed (2 (window, sku) keys, amounts summing to 10.0000), 1 bad records, 1 records in aborted transactions"
	if got := tot.Summary(); got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
}

// With Options.Shops, good records carry a shop, its region and a status and are kept once
// committed; the default stream is unchanged by the option's existence (same seed, same bytes).
func TestShopRecords(t *testing.T) {
	plain, shops := NewGenerator(Options{Seed: 5}), NewGenerator(Options{Seed: 5, Shops: 4})
	p, _ := plain.Next()
	if want := `{"order_id":"o-5-1","sku":"SKU-`; string(p[:len(want)]) != want {
		t.Fatalf("default record %s", p)
	}
	tot := NewTotals()
	var recs []pendingRec
	for range 50 {
		b, r := shops.Next()
		var v struct{ Shop, Region, Status string }
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		var n int
		if _, err := fmt.Sscanf(v.Shop, "shop-%d", &n); err != nil || n >= 4 || v.Region != ShopRegion(n) || v.Status == "" {
			t.Fatalf("record %s", b)
		}
		recs = append(recs, r)
	}
	tot.record(recs[:20], false)
	tot.record(recs[20:], true)
	if got := len(tot.CommittedRecords()); got != 30 {
		t.Fatalf("%d records kept, want the 30 committed", got)
	}
}
