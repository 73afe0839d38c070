package loadgen

import (
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
