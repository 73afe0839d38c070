package loadgen

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/spec"
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

// The default spec's stream is the one loadgen made before it generated for any spec, byte for
// byte: the hash is of 2000 records (seed 5, a fifth bad) as that generator wrote them.
func TestDefaultRecordsUnchanged(t *testing.T) {
	g := NewGenerator(Options{Seed: 5, BadRate: 0.2})
	h := sha256.New()
	for i := range 2000 {
		b, _ := g.Next()
		if i == 0 && string(b) != `{"order_id":"o-5-1","sku":"SKU-38","amount":"7.77","ts":1764000151098}` {
			t.Fatalf("first record %s", b)
		}
		h.Write(b)
		h.Write([]byte{'\n'})
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != "650222e2cf0bb6d3334fde288f652672549dad33d4213d6aafd629ab7382f449" {
		t.Fatalf("the default stream changed: sha256 %s", got)
	}
}

// The summary loadgen prints counts what was sent and the keys of each table that committed.
func TestTotalsSummary(t *testing.T) {
	tot := NewTotals()
	if err := tot.use(DefaultPlan()); err != nil {
		t.Fatal(err)
	}
	rec := func(s string) pendingRec { return pendingRec{payload: []byte(s)} }
	a := rec(`{"order_id":"1","sku":"a","amount":"0.0001","ts":1764000000000}`)
	b := rec(`{"order_id":"2","sku":"a","amount":"9.9999","ts":1764000060000}`)
	if err := tot.record([]pendingRec{a, b, {payload: []byte(badRecords[0].Payload), bad: &badRecords[0]}}, true); err != nil {
		t.Fatal(err)
	}
	if err := tot.record([]pendingRec{a}, false); err != nil {
		t.Fatal(err)
	}
	want := "4 records sent: 2 good orders committed (keys: order_stats_minute 2), 1 bad records, 1 records in aborted transactions"
	if got := tot.Summary(); got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	// A good record the spec refuses is the generator's bug, never a miscount.
	if err := tot.record([]pendingRec{rec(`{"sku":"a"}`)}, true); err == nil {
		t.Fatal("a refused good record was accepted")
	}
}

// The totals keep the payloads of committed records, good and bad, in the order recorded, and
// none of an aborted transaction; past their bound they say so instead of returning a part.
func TestTotalsKeepCommitted(t *testing.T) {
	tot := NewTotals()
	if err := tot.use(DefaultPlan()); err != nil {
		t.Fatal(err)
	}
	rec := func(s string) pendingRec { return pendingRec{payload: []byte(s)} }
	a := rec(`{"order_id":"1","sku":"caf\u00e9","amount":"1.00","ts":1764000000000}`)
	b := rec(`{"order_id":"2","sku":"\u0073ku-A","amount":2,"ts":1764000001000}`)
	bad := pendingRec{payload: []byte(badRecords[0].Payload), bad: &badRecords[0]}
	for _, batch := range []struct {
		recs      []pendingRec
		committed bool
	}{{[]pendingRec{a, bad}, true}, {[]pendingRec{rec(`{"aborted":1}`)}, false}, {[]pendingRec{b}, true}} {
		if err := tot.record(batch.recs, batch.committed); err != nil {
			t.Fatal(err)
		}
	}
	got, err := tot.Committed()
	if err != nil || len(got) != 3 || string(got[0]) != string(a.payload) || string(got[1]) != badRecords[0].Payload || string(got[2]) != string(b.payload) {
		t.Fatalf("committed payloads %q, %v", got, err)
	}
	tot.Keep(int64(len(a.payload) + len(bad.payload) + len(b.payload) + 1))
	if err := tot.record([]pendingRec{a}, true); err != nil {
		t.Fatal(err)
	}
	if got, err := tot.Committed(); err == nil || got != nil {
		t.Fatalf("past the bound: %d payloads, error %v; want none and an error", len(got), err)
	}
}

// randomSpec is a spec drawn from seed: a nested string dimension, an int dimension, a decimal of a
// random scale, an event time in a random format, windows of random sizes, and a filtered
// aggregate with min and max.
func randomSpec(t *testing.T, seed int) (*spec.Plan, int, string) {
	y, scale, format := randomSpecYAML(seed)
	p, err := spec.Parse([]byte(y), spec.Limits{MaxPayloadBytes: 65536, MinTS: 946684800000, MaxTS: 4102444800000, MaxUnits: 999999999999999999})
	if err != nil {
		t.Fatal(err)
	}
	return p, scale, format
}

// randomSpecYAML is randomSpec's YAML (its limits are relay's defaults).
func randomSpecYAML(seed int) (string, int, string) {
	scale := seed % 5
	format := [...]string{"epoch_ms", "rfc3339"}[seed%2]
	window := [...]string{"1m", "15m", "1h"}[seed%3]
	y := fmt.Sprintf(`
input:
  fields:
    id: string(12)
    customer.region: string(6)
    customer.tier: int
    status: string(9)
    qty: int
    price: decimal(%d)
  event_time: {field: meta.at, format: %s}
aggregates:
  - table: by_region
    window: %s
    dimensions: [{column: region, field: customer.region}, {column: tier, field: customer.tier}]
    measures: [{column: n, kind: count}, {column: units, kind: sum, field: qty}]
  - table: paid
    window: 1h
    dimensions: [{column: region, field: customer.region}]
    measures:
      - {column: n, kind: count}
      - {column: revenue, kind: sum, field: price}
      - {column: cheapest, kind: min, field: price}
      - {column: most, kind: max, field: qty}
    filter: {field: status, in: [paid, shipped]}
`, scale, format, window)
	return y, scale, format
}

// Records generated for any spec decode OK through its decoder, and the totals (the spec's fold)
// equal an independent recount of the filtered table: encoding/json, exact rationals, windows by
// hand. The totals file reads back to the same rows. Each spec runs with plain and with escaped
// records (Options.Escape).
func TestGeneratorAnySpec(t *testing.T) {
	for seed := range 12 {
		plan, scale, format := randomSpec(t, seed/2)
		escape := seed%2 == 1
		t.Run(fmt.Sprintf("decimal(%d)/%s/escape=%v", scale, format, escape), func(t *testing.T) {
			g := NewGenerator(Options{Plan: plan, Seed: uint64(seed), SKUs: 4, Distinct: map[string]int{"customer.tier": 3}, Windows: 150, Escape: escape})
			tot := NewTotals()
			if err := tot.use(plan); err != nil {
				t.Fatal(err)
			}
			type acc struct {
				n, most        int64
				revenue, cheap *big.Rat
			}
			recount := map[string]*acc{} // hour | region
			var recs []pendingRec
			statuses := map[string]int{}
			fields := map[string]spec.InputField{}
			for _, f := range plan.InputFields() {
				fields[f.Name] = f
			}
			for range 3000 {
				b, r := g.Next()
				recs = append(recs, r)
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.UseNumber()
				var v any
				if err := dec.Decode(&v); err != nil {
					t.Fatalf("%s: %v", b, err)
				}
				// field reads a field as encoding/json, big.Rat and time see it (jsonMeaning).
				field := func(name string) string {
					f := fields[name]
					jv, ok := lookup(v, f.Path)
					s, err := jsonMeaning(f, jv)
					if !ok || err != nil {
						t.Fatalf("record %s: field %s: %v", b, name, err)
					}
					return s
				}
				status := field("status")
				statuses[status]++
				if status != "paid" && status != "shipped" {
					continue
				}
				ms, _ := strconv.ParseInt(field("meta.at"), 10, 64)
				region := field("customer.region")
				k := time.UnixMilli(ms).UTC().Truncate(time.Hour).Format(time.DateTime) + "|" + region
				price, ok := new(big.Rat).SetString(field("price"))
				qty, err := strconv.ParseInt(field("qty"), 10, 64)
				if !ok || err != nil || len(region) == 0 || len(region) > 6 {
					t.Fatalf("record %s", b)
				}
				if units := new(big.Rat).Mul(price, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))); !units.IsInt() {
					t.Fatalf("price %s of a decimal(%d)", price.FloatString(6), scale)
				}
				a := recount[k]
				if a == nil {
					a = &acc{revenue: new(big.Rat), cheap: price, most: qty}
					recount[k] = a
				}
				a.n++
				a.revenue.Add(a.revenue, price)
				if price.Cmp(a.cheap) < 0 {
					a.cheap = price
				}
				a.most = max(a.most, qty)
			}
			if len(statuses) != 3 || statuses["paid"] == 0 || statuses["shipped"] == 0 {
				t.Fatalf("statuses %v: the filter must both keep and drop records", statuses)
			}
			if err := tot.record(recs, true); err != nil {
				t.Fatal(err) // a generated record the spec's decoder refuses
			}
			x, _, good := tot.Snapshot()
			if good != 3000 || len(x.Rows[0]) >= 3000 || len(x.Rows[0]) == 0 {
				t.Fatalf("%d good, %d keys in by_region: want every record good and keys that collide", good, len(x.Rows[0]))
			}
			if len(x.Rows[1]) != len(recount) {
				t.Fatalf("paid: %d keys, the recount %d", len(x.Rows[1]), len(recount))
			}
			for _, r := range x.Rows[1] {
				cols, err := plan.Format(1, r)
				if err != nil {
					t.Fatal(err)
				}
				a := recount[cols[0]+"|"+cols[1]]
				revenue, _ := new(big.Rat).SetString(cols[3])
				cheap, _ := new(big.Rat).SetString(cols[4])
				if a == nil || cols[2] != fmt.Sprint(a.n) || revenue.Cmp(a.revenue) != 0 || cheap.Cmp(a.cheap) != 0 || cols[5] != fmt.Sprint(a.most) {
					t.Fatalf("paid row %q, the recount %+v", cols, a)
				}
			}
			file := filepath.Join(t.TempDir(), "totals.json")
			if err := tot.WriteFile(file); err != nil {
				t.Fatal(err)
			}
			f, err := ReadFile(file, plan)
			if err != nil {
				t.Fatal(err)
			}
			for a := range x.Rows {
				n := 0
				spec.Compare(x.Rows[a], f.Tables.Rows[a], func(_, _ *spec.Row) { n++ })
				if n != 0 || f.GoodOrders != 3000 {
					t.Fatalf("table %d: the file read back differs in %d keys", a, n)
				}
			}
			if _, err := ReadFile(file, DefaultPlan()); err == nil {
				t.Fatal("a totals file read for another spec")
			}
		})
	}
}
