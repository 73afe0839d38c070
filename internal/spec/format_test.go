package spec

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/order"
)

const formatSpec = `input:
  format: %s
  fields: {sku: string(8), amount: decimal(2)}
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - {table: t, window: 1m, dimensions: [{column: sku, field: sku}], measures: [{column: s, kind: sum, field: amount}]}
`

func parseFormat(t *testing.T, format string) (*Plan, error) {
	t.Helper()
	return Parse([]byte(strings.Replace(formatSpec, "%s", format, 1)), testLimits)
}

// input.format picks the format; its reasons are the plan's (JSON Schema's are JSON's and the wire
// format's).
func TestInputFormat(t *testing.T) {
	for _, c := range []struct{ format, want string }{{`""`, FormatJSON}, {"json", FormatJSON}, {"avro", FormatAvro},
		{"protobuf", FormatProtobuf}, {"json_schema", FormatJSONSchema}} {
		p, err := parseFormat(t, c.format)
		if err != nil {
			t.Fatalf("format %s: %v", c.format, err)
		}
		if p.InputFormat() != c.want {
			t.Errorf("format %s: InputFormat %s, want %s", c.format, p.InputFormat(), c.want)
		}
		wire := slices.Contains(p.Reasons(), ReasonBadHeader) && slices.Contains(p.Reasons(), ReasonUnknownSchema) &&
			slices.Contains(p.Reasons(), ReasonBadEncoding)
		json := slices.Contains(p.Reasons(), Reason(order.ReasonNotJSON))
		if wire != (c.want != FormatJSON) || json != (c.want == FormatJSON || c.want == FormatJSONSchema) {
			t.Errorf("format %s: reasons %v", c.format, p.Reasons())
		}
	}
	for _, c := range []struct{ format, want string }{
		{"xml", `pipeline.input.format: "xml" is not json, avro, protobuf or json_schema`},
		{"AVRO", `pipeline.input.format: "AVRO" is not`},
	} {
		if _, err := parseFormat(t, c.format); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("format %s: %v, want %s", c.format, err, c.want)
		}
	}
}

// The format is part of a table's meaning, so changing it is drift; JSON's meaning has no format
// key, so what relay recorded before there were formats still matches.
func TestFormatIsMeaning(t *testing.T) {
	json, err := parseFormat(t, "json")
	if err != nil {
		t.Fatal(err)
	}
	avro, err := parseFormat(t, "avro")
	if err != nil {
		t.Fatal(err)
	}
	if m := json.Meaning(0).Encode(); strings.Contains(m, "format\":\"json") || !strings.HasPrefix(m, `{"window_seconds"`) {
		t.Errorf("JSON's meaning names a format: %s", m)
	}
	if got, want := changesOf(t, json, avro), "t changed | pipeline.input.format: json -> avro"; got != want {
		t.Errorf("json to avro: %s, want %s", got, want)
	}
	if got, want := changesOf(t, avro, json), "t changed | pipeline.input.format: avro -> json"; got != want {
		t.Errorf("avro to json: %s, want %s", got, want)
	}
	// JSON Schema records hold the same JSON text, but the framing is another meaning all the same.
	jsonSchema, err := parseFormat(t, "json_schema")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := changesOf(t, json, jsonSchema), "t changed | pipeline.input.format: json -> json_schema"; got != want {
		t.Errorf("json to json_schema: %s, want %s", got, want)
	}
	if got, want := changesOf(t, jsonSchema, avro), "t changed | pipeline.input.format: json_schema -> avro"; got != want {
		t.Errorf("json_schema to avro: %s, want %s", got, want)
	}
	s := Default(order.DefaultFields(), order.DefaultLimits(), "order_stats_minute", time.Minute)
	before, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	s.Input.Format = FormatAvro
	after, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := changesOf(t, before, after), "order_stats_minute changed | input.format: json -> avro"; got != want {
		t.Errorf("the default spec: %s, want %s", got, want)
	}
}

// Each input field names the key that declares it, as refusals name it: the pipeline block's, or
// for the default spec the setting it comes from.
func TestInputFieldKeys(t *testing.T) {
	p, err := parseFormat(t, "avro")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range p.InputFields() {
		got = append(got, f.Key)
	}
	if want := []string{"pipeline.input.fields.sku", "pipeline.input.fields.amount", "pipeline.input.event_time.field"}; !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	d, err := Compile(Default(order.DefaultFields(), order.DefaultLimits(), "t", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, f := range d.InputFields() {
		got = append(got, f.Key)
	}
	if want := []string{"input.order_id_field", "input.sku_field", "input.amount_field", "input.ts_field"}; !slices.Equal(got, want) {
		t.Errorf("default keys %v, want %v", got, want)
	}
}
