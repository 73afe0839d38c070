package spec

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/order"
)

var testLimits = Limits{MaxPayloadBytes: 65536, MinTS: 946684800000, MaxTS: 4102444800000, MaxUnits: 999999999999999999}

// multi is a two-aggregate spec with every field type, measure kind and a filter.
const multi = `
input:
  fields:
    order_id: string(128)
    status: string(16)
    customer.region: string(8)
    qty: int
    price: decimal(2)
  event_time: {field: meta.at, format: rfc3339}
aggregates:
  - table: sales_by_region_hour
    window: 1h
    dimensions:
      - {column: region, field: customer.region}
      - {column: qty_bucket, field: qty}
    measures:
      - {column: orders, kind: count}
      - {column: revenue, kind: sum, field: price}
      - {column: cheapest, kind: min, field: price}
      - {column: most_qty, kind: max, field: qty}
      - {column: units, kind: sum, field: qty}
    filter: {field: status, in: [paid, shipped]}
  - table: sales_day
    window: 24h
    measures:
      - {column: orders, kind: count}
      - {column: dearest, kind: max, field: price}
`

func mustParse(t testing.TB, y string) *Plan {
	t.Helper()
	p, err := Parse([]byte(y), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	p := mustParse(t, multi)
	if got := p.Tables(); !slices.Equal(got, []string{"sales_by_region_hour", "sales_day"}) {
		t.Fatalf("tables %v", got)
	}
	if f := p.fields[2]; !slices.Equal(f.path, []string{"customer", "region"}) || f.typ != typeString || f.max != 8 {
		t.Fatalf("customer.region compiled to %+v", f)
	}
	if f := p.fields[4]; f.typ != typeDecimal || f.scale != 2 || f.unit != 100 {
		t.Fatalf("price compiled to %+v", f)
	}
	if tf := p.fields[5]; tf.typ != typeRFC3339 || !slices.Equal(tf.path, []string{"meta", "at"}) {
		t.Fatalf("event time compiled to %+v", tf)
	}
	if a := p.aggs[0]; a.windowMS != 3600000 || a.filter == nil || !slices.Equal(a.filter.strs, []string{"paid", "shipped"}) {
		t.Fatalf("aggregate 0 compiled to %+v", a)
	}
}

// Every refusal names the key by its path under pipeline, and says what is wrong with it.
func TestValidationMessages(t *testing.T) {
	base := func(edit func(string) string) string { return edit(multi) }
	repl := func(old, new string) func(string) string {
		return func(s string) string {
			if !strings.Contains(s, old) {
				panic("test edit does not apply: " + old)
			}
			return strings.Replace(s, old, new, 1)
		}
	}
	for _, c := range []struct {
		edit func(string) string
		want string
	}{
		{repl("window: 1h", "window: 7m"), "pipeline.aggregates[0].window: 7m0s does not divide a day into whole seconds"},
		{repl("window: 24h", "window: 1500ms"), "pipeline.aggregates[1].window: 1.5s does not divide a day"},
		{repl("qty: int", "qty: float"), `pipeline.input.fields.qty: unknown type "float" (want string(N), int or decimal(S))`},
		{repl("price: decimal(2)", "price: decimal(6)"), "pipeline.input.fields.price: decimal(6): the scale must be 0..4"},
		{repl("status: string(16)", "status: string(0)"), "pipeline.input.fields.status: string(0): the byte bound must be 1..16383"},
		{repl("customer.region:", "customer..region:"), `pipeline.input.fields.customer..region: "customer..region" is not a dotted path of keys: a key is empty`},
		{repl("{column: units,", "{column: Orders,"), "pipeline.aggregates[0].measures[4].column: Orders collides with aggregates[0].measures[0].column"},
		{repl("{column: qty_bucket,", "{column: window_start,"), "pipeline.aggregates[0].dimensions[1].column: window_start collides with window_start"},
		{repl("{column: region,", "{column: order,"), `pipeline.aggregates[0].dimensions[0].column: "order" is a reserved word in MySQL or MariaDB`},
		{repl("{column: region,", "{column: 1region,"), `pipeline.aggregates[0].dimensions[0].column: "1region" must match [A-Za-z_][A-Za-z0-9_]{0,63}`},
		{repl("table: sales_day", "table: sales-day"), `pipeline.aggregates[1].table: "sales-day" must match`},
		{repl("table: sales_day", "table: Sales_By_Region_Hour"), "pipeline.aggregates[1].table: Sales_By_Region_Hour is also aggregates[0]'s table"},
		{repl("field: customer.region}", "field: customer.city}"), `pipeline.aggregates[0].dimensions[0].field: "customer.city" is not declared in input.fields`},
		{repl("field: customer.region}", "field: price}"), "pipeline.aggregates[0].dimensions[0].field: price must be a string or int field"},
		{repl("kind: sum, field: price", "kind: sum, field: status"), "pipeline.aggregates[0].measures[1].field: status must be a decimal or int field"},
		{repl("kind: sum, field: price", "kind: avg, field: price"), `pipeline.aggregates[0].measures[1].kind: "avg" is not count, sum, min or max`},
		{repl("{column: orders, kind: count}", "{column: orders, kind: count, field: qty}"), "pipeline.aggregates[0].measures[0].field: count takes no field"},
		{repl("in: [paid, shipped]", "in: []"), "pipeline.aggregates[0].filter.in: needs 1 to 16 values"},
		{repl("field: status, in", "field: qty, in"), `pipeline.aggregates[0].filter.in: "paid" is not an int, as qty is`},
		{repl("format: rfc3339", "format: unix"), `pipeline.input.event_time.format: "unix" is not epoch_ms or rfc3339`},
		{repl("field: meta.at", "field: qty"), "pipeline.input.event_time.field: qty is also in input.fields"},
		{repl("customer.region: string(8)", "customer.region: string(800)"), "pipeline.aggregates[0].dimensions: the primary key needs 3213 bytes, InnoDB allows 3072"},
		{repl("    measures:\n      - {column: orders, kind: count}\n      - {column: dearest", "    measures:\n      - {column: dearest"),
			""}, // still valid: one measure is enough
		{func(string) string {
			return "input:\n  fields: {a: int}\n  event_time: {field: ts, format: epoch_ms}\n"
		}, "pipeline.aggregates: at least one aggregate is needed"},
		{repl("window: 24h", "window: 24h\n    colour: red"), "pipeline.aggregates[1].colour: line 25: unknown key"},
	} {
		_, err := Parse([]byte(base(c.edit)), testLimits)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("unexpected refusal: %v", err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("got %v\nwant %s", err, c.want)
		}
	}
}

func TestUnsetLimitsRefused(t *testing.T) {
	if _, err := Parse([]byte(multi), Limits{}); err == nil || !strings.Contains(err.Error(), "pipeline.input: limits are not set") {
		t.Fatalf("got %v", err)
	}
}

// The default spec comes from today's settings and reports exactly order's reasons.
func TestDefault(t *testing.T) {
	p, err := Compile(Default(order.DefaultFields(), order.DefaultLimits(), "order_stats_minute", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var want []Reason
	for _, r := range order.AllReasons() {
		want = append(want, Reason(r))
	}
	if got := p.Reasons(); !slices.Equal(got, want) {
		t.Fatalf("default reasons %v, order's %v", got, want)
	}
	// Configured keys are literal: a dot in RELAY_INPUT_SKU_FIELD is part of the key, as before.
	f := order.Fields{OrderID: "id", SKU: "item.sku", Amount: "amount", TS: "ts"}
	p, err = Compile(Default(f, order.DefaultLimits(), "t", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.fields[1].path, []string{"item.sku"}) {
		t.Fatalf("sku path %q", p.fields[1].path)
	}
	mp := mustParse(t, multi)
	if got := mp.Reasons(); !slices.Contains(got, ReasonTooLong) || !slices.Contains(got, ReasonBadInt) || slices.Contains(got, Reason(order.ReasonSKUTooLong)) {
		t.Fatalf("multi spec reasons %v", got)
	}
	for _, r := range []Reason{ReasonTooLong, ReasonBadText, ReasonBadInt, Reason(order.ReasonBadSKU), 99} {
		if s := r.String(); s == "" || strings.HasPrefix(s, "reason(") != (r == 99) {
			t.Errorf("Reason(%d).String() = %q", r, s)
		}
	}
}
