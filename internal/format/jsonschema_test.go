package format

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/jsonschema"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

// orderJSONV1 is what a producer of orders registers as a draft-07 JSON Schema: the amount a
// number, the event time an integer, the customer an optional object through a definition.
const orderJSONV1 = `{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
  "properties": {
    "order_id": {"type": "string"},
    "sku": {"type": "string"},
    "amount": {"type": "number"},
    "ts": {"type": "integer"},
    "customer": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Customer"}]}},
  "required": ["order_id", "sku", "amount", "ts"],
  "definitions": {"Customer": {"type": "object", "properties": {"region": {"type": "string"}}}}}`

// orderJSONV2 drops customer, as BACKWARD compatibility allows of an open content model (adding
// a property would narrow what v1's records may hold there).
const orderJSONV2 = `{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
  "properties": {
    "order_id": {"type": "string"},
    "sku": {"type": "string"},
    "amount": {"type": "number"},
    "ts": {"type": "integer"}}}`

// jsonRegistered is one registered JSON Schema and confluent-kafka-go's own JSON Schema serializer
// writing records under its id (validating each against the schema, so the records are ones a
// validating producer would send).
type jsonRegistered struct {
	id  int
	ser *jsonschema.Serializer
}

func registerJSON(t testing.TB, c schemaregistry.Client, subject, schema string) jsonRegistered {
	t.Helper()
	id, err := c.Register(subject, schemaregistry.SchemaInfo{Schema: schema, SchemaType: "JSON"}, false)
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	conf := jsonschema.NewSerializerConfig()
	conf.AutoRegisterSchemas = false
	conf.UseSchemaID = id
	conf.EnableValidation = true
	ser, err := jsonschema.NewSerializer(c, serde.ValueSerde, conf)
	if err != nil {
		t.Fatal(err)
	}
	return jsonRegistered{id: id, ser: ser}
}

func (r jsonRegistered) serialize(t testing.TB, topic string, v map[string]any) []byte {
	t.Helper()
	b, err := r.ser.Serialize(topic, v)
	if err != nil {
		t.Fatalf("serialize %v: %v", v, err)
	}
	return b
}

// jsonOrder is an order as a producer's map: amount and ts as JSON numbers of the exact text.
func jsonOrder(id, sku, amount string, ts int64, region any) map[string]any {
	m := map[string]any{"order_id": id, "sku": sku, "amount": json.Number(amount), "ts": ts}
	if region != nil {
		m["customer"] = map[string]any{"region": region}
	}
	return m
}

func newJSONSchema(t *testing.T, url, specText string) (*JSONSchema, *Registry) {
	p, reg := testPlanAndRegistry(t, specText, url)
	return NewJSONSchema(p, reg, 0), reg
}

// Records written by confluent-kafka-go's JSON Schema serializer under schemas registered in a real
// registry are framed byte for byte as the wire format says (magic, id, then encoding/json's text
// of the record, nothing else) and decode to the values the test states, through a schema change;
// what only the bytes or the registry decide (header, unknown id, an id of another schema type)
// comes before the JSON rules, which give the JSON path's reasons.
func TestJSONSchemaReadsConfluentRecords(t *testing.T) {
	url := testenv.Registry(t)
	j, reg := newJSONSchema(t, url, orderSpec)
	topic := "relay_format_js_" + harness.Suffix()
	v1 := registerJSON(t, reg.Client(), topic+"-value", orderJSONV1)
	v2 := registerJSON(t, reg.Client(), topic+"-value", orderJSONV2)
	avroID := register(t, reg.Client(), topic+"-avro-value", orderV1).id
	if v1.id == v2.id {
		t.Fatalf("v1 and v2 share id %d", v1.id)
	}
	const ts = 1764000000123
	good := []struct {
		rec  map[string]any
		want want
	}{
		{jsonOrder("o-1", "sku-A", "12.34", ts, "eu"), want{"o-1", "sku-A", "eu", 123400, ts}},
		// encoding/json escapes <, > and & as \u003c...; relay unescapes them.
		{jsonOrder("o-2", "sku-é€😀<&>\"\\", "0.1", ts+1, "us"), want{"o-2", "sku-é€😀<&>\"\\", "us", 1000, ts + 1}},
		{jsonOrder("o-3", "SKU-1 ", "-0.0001", ts, "eu"), want{"o-3", "SKU-1 ", "eu", -1, ts}},
		{jsonOrder("o-4", "s", "99999999999999.9999", ts, "eu"), want{"o-4", "s", "eu", 999999999999999999, ts}},
		{jsonOrder("o-5", "s", "-99999999999999.999900", ts, "eu"), want{"o-5", "s", "eu", -999999999999999999, ts}},
		{jsonOrder("o-6", "s", "0", ts, "eu"), want{"o-6", "s", "eu", 0, ts}},
		{jsonOrder("o-7", "s", "1.5E2", ts, "\u00e9\u0301"), want{"o-7", "s", "é\u0301", 1500000, ts}},
	}
	var rec spec.Record
	for i, g := range good {
		b := v1.serialize(t, topic, g.rec)
		text, err := json.Marshal(g.rec)
		if err != nil {
			t.Fatal(err)
		}
		if wire := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(v1.id)), text...); !bytes.Equal(b, wire) {
			t.Errorf("record %d: the serializer wrote % x, want the header and encoding/json's text % x", i, b, wire)
		}
		r, field, err := j.Decode(context.Background(), b, &rec)
		if err != nil || r != spec.OK {
			t.Errorf("record %d: %s %s %v", i, r, field, err)
			continue
		}
		if got := gotOf(&rec); got != g.want {
			t.Errorf("record %d: decoded %+v, want %+v", i, got, g.want)
		}
	}
	framed := func(id uint32, text string) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{0}, id), text...)
	}
	ok := v1.serialize(t, topic, jsonOrder("o", "s", "1", ts, "eu"))
	bad := []struct {
		name   string
		in     []byte
		reason spec.Reason
		field  string
	}{
		{"no customer", v1.serialize(t, topic, jsonOrder("o", "s", "1", ts, nil)), spec.ReasonMissingField, "customer.region"},
		{"null customer", v1.serialize(t, topic, map[string]any{"order_id": "o", "sku": "s", "amount": 1, "ts": ts, "customer": nil}), spec.ReasonMissingField, "customer.region"},
		{"v2", v2.serialize(t, topic, map[string]any{"order_id": "o", "sku": "s", "amount": 1, "ts": ts, "channel": "app"}), spec.ReasonMissingField, "customer.region"},
		{"empty sku", v1.serialize(t, topic, jsonOrder("o", "", "1", ts, "eu")), spec.Reason(order.ReasonEmptyField), "sku"},
		{"region too long", v1.serialize(t, topic, jsonOrder("o", "s", "1", ts, "europe-west")), spec.ReasonTooLong, "customer.region"},
		{"sub-unit amount", v1.serialize(t, topic, jsonOrder("o", "s", "0.00001", ts, "eu")), spec.Reason(order.ReasonAmountPrecision), "amount"},
		{"huge amount", v1.serialize(t, topic, jsonOrder("o", "s", "100000000000000", ts, "eu")), spec.Reason(order.ReasonAmountRange), "amount"},
		{"early ts", v1.serialize(t, topic, jsonOrder("o", "s", "1", 946684799999, "eu")), spec.Reason(order.ReasonTSRange), "ts"},
		{"wrong magic", append([]byte{1}, ok[1:]...), spec.ReasonBadHeader, ""},
		{"json", ok[5:], spec.ReasonBadHeader, ""},
		{"short", []byte{0, 0, 0}, spec.ReasonBadHeader, ""},
		{"unknown id", framed(1<<31-2, string(ok[5:])), spec.ReasonUnknownSchema, ""},
		{"an Avro schema's id", framed(uint32(avroID), string(ok[5:])), spec.ReasonBadEncoding, ""},
		{"truncated", ok[:len(ok)-3], spec.Reason(order.ReasonNotJSON), ""},
		{"trailing byte", append(append([]byte(nil), ok...), '}'), spec.Reason(order.ReasonNotJSON), ""},
		{"array", framed(uint32(v1.id), `[1]`), spec.Reason(order.ReasonNotObject), ""},
		{"too large", append(append([]byte(nil), ok...), make([]byte, testLimits.MaxPayloadBytes)...), spec.ReasonTooLarge, ""},
	}
	for _, b := range bad {
		r, field, err := j.Decode(context.Background(), b.in, &rec)
		if err != nil || r != b.reason || field != b.field {
			t.Errorf("%s: %s %q %v, want %s %q", b.name, r, field, err, b.reason, b.field)
		}
	}
	if err := j.CheckSubject(context.Background(), topic+"-value"); err != nil {
		t.Errorf("CheckSubject of v1 and v2: %v", err)
	}
	if err := j.CheckSubject(context.Background(), topic+"-none-value"); !errors.Is(err, ErrNoSubject) {
		t.Errorf("a subject with no schema: %v, want ErrNoSubject", err)
	}
	down, _ := newJSONSchema(t, "http://"+deadAddr(t), orderSpec)
	if err := down.CheckSubject(context.Background(), topic+"-value"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("CheckSubject, registry down: %v, want ErrUnavailable", err)
	}
	if r, field, err := down.Decode(context.Background(), ok, &rec); !errors.Is(err, ErrUnavailable) || r != spec.OK || field != "" {
		t.Errorf("Decode, registry down: %s %q %v, want no verdict and ErrUnavailable", r, field, err)
	}
}

// typedSpec has the two kinds orderSpec lacks: an int and an rfc3339 event time.
const typedSpec = `input:
  fields: {qty: int}
  event_time: {field: at, format: rfc3339}
aggregates:
  - {table: t, window: 1m, dimensions: [{column: q, field: qty}], measures: [{column: n, kind: count}]}
`

// The start-up walk of a subject's JSON Schemas, against hand-written versions: every field found
// through properties, nested objects, local $refs and nullable oneOf/anyOf; each kind refused
// where a version's type cannot hold it, a field no version declares refused by its key, and a
// schema relay cannot follow refused rather than guessed at.
func TestJSONSchemaCheckVersions(t *testing.T) {
	orders, err := spec.Parse([]byte(orderSpec), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	typed, err := spec.Parse([]byte(typedSpec), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	const s = "orders-value"
	prop := func(schema, name, replacement string) string {
		i := strings.Index(schema, `"`+name+`": `)
		if i < 0 {
			t.Fatalf("no %s in the schema", name)
		}
		end := i + strings.Index(schema[i:], "}") + 1
		if name == "customer" {
			end = i + strings.Index(schema[i:], "}]}") + 3
		}
		return schema[:i] + `"` + name + `": ` + replacement + schema[end:]
	}
	typedSchema := func(qty, at string) string {
		return `{"type": "object", "properties": {"qty": ` + qty + `, "at": ` + at + `}}`
	}
	for _, c := range []struct {
		name     string
		plan     *spec.Plan
		versions []string
		want     string // "" for accepted; each refusal, one a line
	}{
		{"v1", orders, []string{orderJSONV1}, ""},
		{"v1 and v2", orders, []string{orderJSONV1, orderJSONV2}, ""},
		{"v2 alone", orders, []string{orderJSONV2}, "pipeline.input.fields.customer.region: no version of orders-value has customer.region"},
		{"$defs, anyOf, type lists", orders, []string{`{"type": "object", "properties": {
		  "order_id": {"type": ["string", "null"]}, "sku": {"anyOf": [{"$ref": "#/$defs/Sku"}, {"type": "null"}]},
		  "amount": {"type": ["integer", "number", "string"]}, "ts": {"type": "string"},
		  "customer": {"$ref": "#/$defs/Customer"}},
		  "$defs": {"Sku": {"type": "string"}, "Customer": {"properties": {"region": {"$ref": "#/$defs/Sku"}}}}}`}, ""},
		{"no type", orders, []string{prop(orderJSONV1, "sku", "{}")}, ""},
		{"anything below", orders, []string{prop(orderJSONV1, "customer", "true")}, ""},
		{"string from integer", orders, []string{prop(orderJSONV1, "sku", `{"type": "integer"}`)},
			"pipeline.input.fields.sku: orders-value version 1 (id 11) has type integer at sku, which cannot hold string exactly"},
		{"decimal from boolean", orders, []string{orderJSONV1, prop(orderJSONV1, "amount", `{"type": ["number", "boolean", "null"]}`)},
			"pipeline.input.fields.amount: orders-value version 2 (id 12) has type number or boolean at amount, which cannot hold decimal exactly"},
		{"epoch_ms from number", orders, []string{prop(orderJSONV1, "ts", `{"type": "number"}`)},
			"pipeline.input.event_time.field: orders-value version 1 (id 11) has type number at ts, which cannot hold epoch_ms exactly"},
		{"a path through a string", orders, []string{prop(orderJSONV1, "customer", `{"type": "string"}`)},
			"pipeline.input.fields.customer.region: orders-value version 1 (id 11) has type string at customer.region, which cannot hold string exactly"},
		{"oneOf of two types", orders, []string{prop(orderJSONV1, "sku", `{"oneOf": [{"type": "string"}, {"type": "integer"}]}`)},
			"pipeline.input.fields.sku: orders-value version 1 (id 11) has oneOf of 2 schemas at sku, which cannot hold string exactly"},
		{"only null", orders, []string{prop(orderJSONV1, "sku", `{"type": "null"}`)},
			"pipeline.input.fields.sku: orders-value version 1 (id 11) has a schema that allows no value but null at sku, which cannot hold string exactly"},
		{"a $ref to another schema", orders, []string{prop(orderJSONV1, "sku", `{"$ref": "sku.json#/Sku"}`)},
			`pipeline.input.fields.sku: orders-value version 1 (id 11) at sku: $ref "sku.json#/Sku" is not a reference inside the schema (#/...), which relay does not follow`},
		{"a $ref cycle", orders, []string{prop(orderJSONV1, "sku", `{"$ref": "#/properties/sku"}`)},
			"pipeline.input.fields.sku: orders-value version 1 (id 11) at sku: more than 32 $refs in a row (a cycle?)"},
		{"int from string and integer", typed, []string{typedSchema(`{"type": ["integer", "string"]}`, `{"type": "string", "format": "date-time"}`)}, ""},
		{"int from number", typed, []string{typedSchema(`{"type": "number"}`, `{"type": "string"}`)},
			"pipeline.input.fields.qty: orders-value version 1 (id 11) has type number at qty, which cannot hold int exactly"},
		{"rfc3339 from integer", typed, []string{typedSchema(`{"type": "integer"}`, `{"type": "integer"}`)},
			"pipeline.input.event_time.field: orders-value version 1 (id 11) has type integer at at, which cannot hold rfc3339 exactly"},
	} {
		var versions []schemaregistry.SchemaMetadata
		for i, text := range c.versions {
			versions = append(versions, schemaregistry.SchemaMetadata{SchemaInfo: schemaregistry.SchemaInfo{Schema: text, SchemaType: "JSON"},
				ID: 11 + i, Version: 1 + i, Subject: s})
		}
		j := NewJSONSchema(c.plan, nil, 0)
		err := checkVersions(j.fields, s, versions, j.resolve)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (!errors.Is(err, ErrSpecUnreadable) || err.Error() != ErrSpecUnreadable.Error()+": "+c.want):
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
	// A version of another schema type is refused: its records are bad_encoding every one.
	avro := []schemaregistry.SchemaMetadata{{SchemaInfo: schemaregistry.SchemaInfo{Schema: orderV1, SchemaType: "AVRO"}, ID: 3, Version: 1}}
	j := NewJSONSchema(orders, nil, 0)
	if err := checkVersions(j.fields, s, avro, j.resolve); !errors.Is(err, ErrSpecUnreadable) ||
		!strings.Contains(err.Error(), `orders-value version 1 (id 3): not a JSON Schema but "AVRO"`) {
		t.Errorf("an Avro version: %v", err)
	}
}
