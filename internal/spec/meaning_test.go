package spec

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/order"
)

// recordedFrom is what the ledger holds after a job with plan p committed.
func recordedFrom(p *Plan) Recorded {
	r := Recorded{Meanings: map[string]string{}, Claimed: map[string]bool{}, Committed: true}
	for a, t := range p.Tables() {
		r.Meanings[t] = p.Meaning(a).Encode()
		r.Claimed[t] = true
	}
	return r
}

// changesOf compares now with the meanings recorded from before and renders every table's state
// and changes, one line each.
func changesOf(t *testing.T, before, now *Plan) string {
	t.Helper()
	diffs, err := now.Compare(recordedFrom(before))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, d := range diffs {
		line := d.Table + " " + d.State
		for _, c := range d.Changes {
			line += " | " + c.String()
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

func defaultShape(t *testing.T, table string, window time.Duration, f order.Fields) *Plan {
	t.Helper()
	p, err := Compile(Default(f, order.DefaultLimits(), table, window))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var orderFields = order.DefaultFields()

// The default spec's parts are named by the settings it is built from.
func TestCompareDefault(t *testing.T) {
	five := defaultShape(t, "order_stats_minute", 5*time.Minute, orderFields)
	for _, c := range []struct {
		name string
		now  *Plan
		want string
	}{
		{"same", defaultShape(t, "order_stats_minute", 5*time.Minute, orderFields), "order_stats_minute unchanged"},
		{"window", defaultShape(t, "order_stats_minute", 90*time.Second, orderFields),
			"order_stats_minute changed | input.window: 5m -> 1m30s"},
		{"sku field", defaultShape(t, "order_stats_minute", 5*time.Minute, order.Fields{OrderID: "order_id", SKU: "item", Amount: "amount", TS: "ts"}),
			"order_stats_minute changed | input.sku_field: sku string(64) -> item string(64)"},
		{"amount and ts fields", defaultShape(t, "order_stats_minute", 5*time.Minute, order.Fields{OrderID: "order_id", SKU: "sku", Amount: "price", TS: "at"}),
			"order_stats_minute changed | input.ts_field: ts -> at | input.amount_field: amount decimal(4) -> price decimal(4)"},
		// The order id decides which records are valid, not what a row adds up.
		{"order id field", defaultShape(t, "order_stats_minute", 5*time.Minute, order.Fields{OrderID: "id", SKU: "sku", Amount: "amount", TS: "ts"}),
			"order_stats_minute unchanged"},
		{"table", defaultShape(t, "order_stats_5m", 5*time.Minute, orderFields),
			"order_stats_5m new\norder_stats_minute removed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := changesOf(t, five, c.now); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestComparePipeline(t *testing.T) {
	base := mustParse(t, multi)
	edit := func(old, new string) *Plan {
		t.Helper()
		if !strings.Contains(multi, old) {
			t.Fatalf("%q is not in the spec", old)
		}
		return mustParse(t, strings.Replace(multi, old, new, 1))
	}
	for _, c := range []struct {
		name string
		now  *Plan
		want string
	}{
		{"window", edit("window: 1h", "window: 90s"),
			"sales_by_region_hour changed | pipeline.aggregates[0].window: 1h -> 1m30s\nsales_day unchanged"},
		{"field type", edit("customer.region: string(8)", "customer.region: string(16)"),
			"sales_by_region_hour changed | pipeline.input.fields.customer.region: string(8) -> string(16)\nsales_day unchanged"},
		{"scale", edit("price: decimal(2)", "price: decimal(4)"),
			"sales_by_region_hour changed | pipeline.input.fields.price: decimal(2) -> decimal(4)\n" +
				"sales_day changed | pipeline.input.fields.price: decimal(2) -> decimal(4)"},
		{"event time", edit("format: rfc3339", "format: epoch_ms"),
			"sales_by_region_hour changed | pipeline.input.event_time.format: rfc3339 -> epoch_ms\nsales_day changed | pipeline.input.event_time.format: rfc3339 -> epoch_ms"},
		{"dimension field", edit("{column: region, field: customer.region}", "{column: region, field: status}"),
			"sales_by_region_hour changed | pipeline.aggregates[0].dimensions[0].field: customer.region string(8) -> status string(16)\nsales_day unchanged"},
		{"dimension column", edit("{column: region, field: customer.region}", "{column: area, field: customer.region}"),
			"sales_by_region_hour changed | pipeline.aggregates[0].dimensions[0].column: region -> area\nsales_day unchanged"},
		{"measure kind", edit("{column: cheapest, kind: min, field: price}", "{column: cheapest, kind: max, field: price}"),
			"sales_by_region_hour changed | pipeline.aggregates[0].measures[2].kind: min -> max\nsales_day unchanged"},
		{"measure field", edit("{column: units, kind: sum, field: qty}", "{column: units, kind: sum, field: price}"),
			"sales_by_region_hour changed | pipeline.aggregates[0].measures[4].field: qty int -> price decimal(2)\nsales_day unchanged"},
		{"measure added", edit("      - {column: dearest, kind: max, field: price}", "      - {column: dearest, kind: max, field: price}\n      - {column: revenue, kind: sum, field: price}"),
			"sales_by_region_hour unchanged\nsales_day changed | pipeline.aggregates[1].measures[2]: none -> revenue (sum of price decimal(2))"},
		{"measure removed", edit("      - {column: dearest, kind: max, field: price}\n", ""),
			"sales_by_region_hour unchanged\nsales_day changed | pipeline.aggregates[1].measures: dearest (max of price decimal(2)) -> no column dearest"},
		{"filter values", edit("in: [paid, shipped]", "in: [paid]"),
			"sales_by_region_hour changed | pipeline.aggregates[0].filter.in: [paid, shipped] -> [paid]\nsales_day unchanged"},
		{"filter removed", edit("    filter: {field: status, in: [paid, shipped]}\n", ""),
			"sales_by_region_hour changed | pipeline.aggregates[0].filter: status string(16) in [paid, shipped] -> none\nsales_day unchanged"},
		// Not drift: the order of measures and of filter values, comments, key order, a new table
		// (which is new, not a change of the others).
		{"measure order", edit("      - {column: orders, kind: count}\n      - {column: revenue, kind: sum, field: price}", "      - {column: revenue, kind: sum, field: price}\n      - {column: orders, kind: count}"),
			"sales_by_region_hour unchanged\nsales_day unchanged"},
		{"filter order", edit("in: [paid, shipped]", "in: [shipped, paid, paid]"), "sales_by_region_hour unchanged\nsales_day unchanged"},
		{"comment and key order", edit("  - table: sales_day\n    window: 24h", "  # per day\n  - window: 24h\n    table: sales_day"),
			"sales_by_region_hour unchanged\nsales_day unchanged"},
		{"new table", edit("aggregates:\n", "aggregates:\n  - {table: orders_5m, window: 5m, measures: [{column: orders, kind: count}]}\n"),
			"orders_5m new\nsales_by_region_hour unchanged\nsales_day unchanged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := changesOf(t, base, c.now); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// Writing the YAML otherwise (measures and filter values in another order, duplicates, comments,
// key order) records the same text: the ledger's meaning is canonical, not the YAML's shape.
func TestMeaningCanonical(t *testing.T) {
	base := mustParse(t, multi)
	other := mustParse(t, strings.NewReplacer(
		"      - {column: orders, kind: count}\n      - {column: revenue, kind: sum, field: price}", "      - {column: revenue, field: price, kind: sum}\n      - {kind: count, column: orders}",
		"in: [paid, shipped]}", "in: [shipped, paid, shipped]}  # paid or shipped",
	).Replace(multi))
	for a, table := range base.Tables() {
		if got, want := other.Meaning(a).Encode(), base.Meaning(a).Encode(); got != want {
			t.Errorf("%s: recorded as\n%s\nnot\n%s", table, got, want)
		}
	}
}

// The keys a change names are the keys Compile's own refusals name, so an operator finds them the
// same way; here the window's.
func TestChangePathIsCompilesPath(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(multi, "window: 24h", "window: 7s", 1)), testLimits)
	if err == nil || !strings.HasPrefix(err.Error(), "pipeline.aggregates[1].window: ") {
		t.Fatalf("Compile's refusal: %v", err)
	}
	got := changesOf(t, mustParse(t, multi), mustParse(t, strings.Replace(multi, "window: 24h", "window: 12h", 1)))
	if !strings.Contains(got, "pipeline.aggregates[1].window: 24h -> 12h") {
		t.Fatalf("change: %s", got)
	}
}

// A job that committed nothing records its spec as it starts; a ledger with claims but no
// meanings (from before relay recorded them) records the claimed tables' and holds new ones back.
func TestCompareStates(t *testing.T) {
	base := mustParse(t, multi)
	more := mustParse(t, strings.Replace(multi, "aggregates:\n", "aggregates:\n  - {table: orders_5m, window: 5m, measures: [{column: orders, kind: count}]}\n", 1))
	for _, c := range []struct {
		name string
		now  *Plan
		rec  Recorded
		want string
	}{
		{"never committed", mustParse(t, strings.Replace(multi, "window: 1h", "window: 2h", 1)),
			Recorded{Meanings: recordedFrom(base).Meanings, Committed: false},
			"sales_by_region_hour first_use\nsales_day first_use"},
		{"never committed, removed", mustParse(t, strings.Replace(multi, "  - table: sales_day\n    window: 24h", "  - table: sales_week\n    window: 24h", 1)),
			Recorded{Meanings: recordedFrom(base).Meanings, Committed: false},
			"sales_by_region_hour first_use\nsales_week first_use\nsales_day forgotten"},
		{"upgrade", more, Recorded{Claimed: recordedFrom(base).Claimed, Committed: true},
			"orders_5m new\nsales_by_region_hour unrecorded\nsales_day unrecorded"},
		{"claimed, not recorded, while others are", more,
			Recorded{Meanings: map[string]string{"sales_day": base.Meaning(1).Encode()}, Claimed: map[string]bool{"orders_5m": true, "sales_by_region_hour": true, "sales_day": true}, Committed: true},
			"orders_5m new\nsales_by_region_hour new\nsales_day unchanged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			diffs, err := c.now.Compare(c.rec)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, d := range diffs {
				lines = append(lines, fmt.Sprintf("%s %s", d.Table, d.State))
			}
			if got := strings.Join(lines, "\n"); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}
