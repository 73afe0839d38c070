package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// specBase is a valid pipeline block every case below breaks in one place.
const specBase = `  input:
    fields:
      order_id: string(32)
      shop: string(16)
      customer.region: string(8)
      qty: int
      price: decimal(2)
    event_time: {field: at, format: epoch_ms}
  aggregates:
    - table: sales_hour
      window: 1h
      dimensions:
        - {column: region, field: customer.region}
        - {column: shop, field: shop}
      measures:
        - {column: orders, kind: count}
        - {column: revenue, kind: sum, field: price}
      filter: {field: shop, in: [a, b]}
    - table: sales_day
      window: 24h
      measures:
        - {column: units, kind: sum, field: qty}
`

// Every refusal of an invalid spec names the offending key by its YAML path under pipeline
// (docs/PIPELINES.md, "Validation"), whatever the mistake: an unknown key, a value of the wrong
// YAML type, or a value the spec's rules refuse. Each case is checked as a pipeline: block and as a
// pipeline_file (whose errors name the file and the same path).
func TestSpecErrorsNameTheYAMLPath(t *testing.T) {
	for _, tc := range []struct {
		name, old, new, path string
	}{
		{"unknown top-level key", "  aggregates:\n", "  outputs: []\n  aggregates:\n", "pipeline.outputs"},
		{"unknown input key", "    event_time:", "    key: order_id\n    event_time:", "pipeline.input.key"},
		{"unknown aggregate key", "      window: 1h\n", "      window: 1h\n      windows: 2\n", "pipeline.aggregates[0].windows"},
		{"unknown measure key", "{column: orders, kind: count}", "{column: orders, kind: count, as: n}", "pipeline.aggregates[0].measures[0].as"},
		{"unknown dimension key", "{column: shop, field: shop}", "{column: shop, field: shop, type: int}", "pipeline.aggregates[0].dimensions[1].type"},
		{"unknown filter key", "{field: shop, in: [a, b]}", "{field: shop, in: [a, b], not_in: [c]}", "pipeline.aggregates[0].filter.not_in"},
		{"unknown event_time key", "{field: at, format: epoch_ms}", "{field: at, format: epoch_ms, tz: UTC}", "pipeline.input.event_time.tz"},
		{"fields is a list", "    fields:\n      order_id: string(32)\n", "    fields:\n      - order_id\n    other:\n      order_id: string(32)\n", "pipeline.input.fields"},
		{"field type is a mapping", "      qty: int\n", "      qty: {type: int}\n", "pipeline.input.fields.qty"},
		{"aggregates is a mapping", "  aggregates:\n    - table: sales_hour\n", "  aggregates:\n    x: 1\n  y:\n    - table: sales_hour\n", "pipeline.aggregates"},
		{"window is not a duration", "window: 1h", "window: hourly", "pipeline.aggregates[0].window"},
		{"window is a list", "window: 1h", "window: [1h]", "pipeline.aggregates[0].window"},
		{"window does not divide a day", "window: 1h", "window: 7m", "pipeline.aggregates[0].window"},
		{"window with a fraction", "window: 1h", "window: 1500ms", "pipeline.aggregates[0].window"},
		{"window zero", "window: 24h", "window: 0s", "pipeline.aggregates[1].window"},
		{"measures is a string", "      measures:\n        - {column: units", "      measures: units\n      x:\n        - {column: units", "pipeline.aggregates[1].measures"},
		{"filter in is a string", "in: [a, b]", "in: a", "pipeline.aggregates[0].filter.in"},
		{"unknown type", "qty: int", "qty: float", "pipeline.input.fields.qty"},
		{"string too long", "shop: string(16)", "shop: string(99999)", "pipeline.input.fields.shop"},
		{"decimal scale", "price: decimal(2)", "price: decimal(9)", "pipeline.input.fields.price"},
		{"empty path key", "customer.region: string(8)", "customer..region: string(8)", "pipeline.input.fields.customer..region"},
		{"duplicate field", "      qty: int\n", "      qty: int\n      qty: decimal(2)\n", "pipeline.input.fields.qty"},
		{"event time format", "format: epoch_ms", "format: unix", "pipeline.input.event_time.format"},
		{"event time declared twice", "{field: at,", "{field: qty,", "pipeline.input.event_time.field"},
		{"no aggregates", specBase[strings.Index(specBase, "  aggregates:"):], "  aggregates: []\n", "pipeline.aggregates"},
		{"bad table name", "table: sales_day", "table: sales-day", "pipeline.aggregates[1].table"},
		{"table name too long", "table: sales_day", "table: " + strings.Repeat("t", 65), "pipeline.aggregates[1].table"},
		{"reserved table name", "table: sales_day", "table: select", "pipeline.aggregates[1].table"},
		{"duplicate table", "table: sales_day", "table: SALES_HOUR", "pipeline.aggregates[1].table"},
		{"reserved column", "{column: shop, field: shop}", "{column: order, field: shop}", "pipeline.aggregates[0].dimensions[1].column"},
		{"column named window_start", "{column: orders, kind: count}", "{column: window_start, kind: count}", "pipeline.aggregates[0].measures[0].column"},
		{"duplicate column", "{column: revenue, kind: sum", "{column: ORDERS, kind: sum", "pipeline.aggregates[0].measures[1].column"},
		{"dimension on a missing field", "{column: shop, field: shop}", "{column: shop, field: city}", "pipeline.aggregates[0].dimensions[1].field"},
		{"dimension on a decimal", "{column: shop, field: shop}", "{column: shop, field: price}", "pipeline.aggregates[0].dimensions[1].field"},
		{"measure on a missing field", "{column: revenue, kind: sum, field: price}", "{column: revenue, kind: sum, field: cost}", "pipeline.aggregates[0].measures[1].field"},
		{"sum of a string", "{column: revenue, kind: sum, field: price}", "{column: revenue, kind: sum, field: shop}", "pipeline.aggregates[0].measures[1].field"},
		{"count with a field", "{column: orders, kind: count}", "{column: orders, kind: count, field: qty}", "pipeline.aggregates[0].measures[0]"},
		{"unknown measure kind", "{column: orders, kind: count}", "{column: orders, kind: avg}", "pipeline.aggregates[0].measures[0].kind"},
		{"no measures", "      measures:\n        - {column: units, kind: sum, field: qty}\n", "      measures: []\n", "pipeline.aggregates[1].measures"},
		{"filter on an unknown field", "{field: shop, in: [a, b]}", "{field: city, in: [a, b]}", "pipeline.aggregates[0].filter.field"},
		{"filter on a decimal", "{field: shop, in: [a, b]}", "{field: price, in: [a, b]}", "pipeline.aggregates[0].filter.field"},
		{"filter without values", "in: [a, b]", "in: []", "pipeline.aggregates[0].filter.in"},
		{"filter int value not an int", "{field: shop, in: [a, b]}", "{field: qty, in: [1, x]}", "pipeline.aggregates[0].filter.in"},
		{"key too long", "customer.region: string(8)", "customer.region: string(800)", "pipeline.aggregates[0].dimensions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(specBase, tc.old) {
				t.Fatalf("the base spec has no %q", tc.old)
			}
			block := strings.Replace(specBase, tc.old, tc.new, 1)
			head := "job: {name: j}\nkafka: {brokers: k:9092, topics: [t]}\nmysql: {dsn: \"u:p@tcp(h:3306)/d\"}\n"
			check := func(how, cfg string) {
				t.Helper()
				c, err := Load(writeConfig(t, cfg), nil)
				if err == nil {
					err = c.Validate()
				}
				if err == nil {
					t.Fatalf("%s: accepted:\n%s", how, block)
				}
				if !strings.Contains(err.Error(), tc.path+":") && !strings.Contains(err.Error(), tc.path+".") && !strings.Contains(err.Error(), tc.path+"[") {
					t.Errorf("%s: %v\nwant the path %s", how, err, tc.path)
				}
			}
			check("block", head+"pipeline:\n"+block)
			file := filepath.Join(t.TempDir(), "spec.yaml")
			if err := os.WriteFile(file, []byte(strings.ReplaceAll("\n"+block, "\n  ", "\n")), 0o600); err != nil {
				t.Fatal(err)
			}
			check("file", head+"pipeline_file: "+file+"\n")
		})
	}
}
