package format

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/avrov2"
	"github.com/linkedin/goavro/v2"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

const orderSpec = `input:
  fields:
    order_id: string(128)
    sku: string(64)
    amount: decimal(4)
    customer.region: string(8)
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - table: t
    window: 1m
    dimensions: [{column: sku, field: sku}]
    measures: [{column: n, kind: count}, {column: s, kind: sum, field: amount}]
`

var testLimits = spec.Limits{MaxPayloadBytes: 65536, MinTS: 946684800000, MaxTS: 4102444800000, MaxUnits: 999999999999999999}

// orderV1 is what a Java or Go producer of orders registers: the amount a bytes decimal, the event
// time a timestamp-millis, the customer an optional nested record.
const orderV1 = `{"type": "record", "name": "Order", "namespace": "shop", "fields": [
  {"name": "order_id", "type": "string"},
  {"name": "sku", "type": "string"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 6}},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "customer", "type": ["null", {"type": "record", "name": "Customer", "fields": [
    {"name": "region", "type": "string"}]}], "default": null}
]}`

// orderV2 evolves v1 as BACKWARD allows: customer dropped, a field with a default added.
const orderV2 = `{"type": "record", "name": "Order", "namespace": "shop", "fields": [
  {"name": "order_id", "type": "string"},
  {"name": "sku", "type": "string"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 6}},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "channel", "type": "string", "default": "web"}
]}`

// registered is one registered schema and a serializer that writes records under its id, with
// confluent-kafka-go's own Avro serde (hamba/avro inside): the wire format as producers write it.
type registered struct {
	id     int
	schema string
	ser    *avrov2.Serializer
}

func register(t testing.TB, c schemaregistry.Client, subject, schema string) registered {
	t.Helper()
	id, err := c.Register(subject, schemaregistry.SchemaInfo{Schema: schema}, false)
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	conf := avrov2.NewSerializerConfig()
	conf.AutoRegisterSchemas = false
	conf.UseSchemaID = id
	ser, err := avrov2.NewSerializer(c, serde.ValueSerde, conf)
	if err != nil {
		t.Fatal(err)
	}
	return registered{id: id, schema: schema, ser: ser}
}

func (r registered) serialize(t testing.TB, topic string, v map[string]any) []byte {
	t.Helper()
	b, err := r.ser.Serialize(topic, &v)
	if err != nil {
		t.Fatalf("serialize %v: %v", v, err)
	}
	return b
}

func rat(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic(s)
	}
	return r
}

func orderRec(id, sku, amount string, ts int64, region any) map[string]any {
	m := map[string]any{"order_id": id, "sku": sku, "amount": rat(amount), "ts": time.UnixMilli(ts).UTC(), "customer": nil}
	if region != nil {
		m["customer"] = map[string]any{"shop.Customer": map[string]any{"region": region}}
	}
	return m
}

func newAvro(t *testing.T, url string) (*Avro, *Registry, *spec.Plan) {
	p, reg := testPlanAndRegistry(t, orderSpec, url)
	return NewAvro(p, reg, 0), reg, p
}

// testPlanAndRegistry is the plan of specText and a client of the registry at url that takes an
// id as unknown after two asks 10 ms apart.
func testPlanAndRegistry(t *testing.T, specText, url string) (*spec.Plan, *Registry) {
	t.Helper()
	p, err := spec.Parse([]byte(specText), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(RegistryConfig{URL: url, UnknownAsks: 2, UnknownWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return p, reg
}

// want is a decoded record as the test states it: the strings, the amount in money units, the
// event time.
type want struct {
	orderID, sku, region string
	units, ts            int64
}

func gotOf(rec *spec.Record) want {
	return want{string(rec.Vals[0].Bytes), string(rec.Vals[1].Bytes), string(rec.Vals[3].Bytes), rec.Vals[2].Int, rec.TS}
}

// Records written by confluent-kafka-go's Avro serializer under schemas registered in a real
// registry decode to exact values, through a schema change mid-stream; each value is checked
// against what linkedin/goavro (a decoder that shares nothing with hamba/avro) reads from the same
// bytes.
func TestAvroReadsConfluentRecords(t *testing.T) {
	url := testenv.Registry(t)
	a, reg, _ := newAvro(t, url)
	topic := "relay_format_" + harness.Suffix()
	v1 := register(t, reg.Client(), topic+"-value", orderV1)
	v2 := register(t, reg.Client(), topic+"-value", orderV2)
	if v1.id == v2.id {
		t.Fatalf("v1 and v2 share id %d", v1.id)
	}
	const ts = 1764000000123
	good := []struct {
		in   []byte
		want want
	}{
		{v1.serialize(t, topic, orderRec("o-1", "sku-A", "12.34", ts, "eu")), want{"o-1", "sku-A", "eu", 123400, ts}},
		{v1.serialize(t, topic, orderRec("o-2", "sku-é€😀", "0.1", ts+1, "us")), want{"o-2", "sku-é€😀", "us", 1000, ts + 1}},
		{v1.serialize(t, topic, orderRec("o-3", "SKU-1 ", "-0.0001", ts, "eu")), want{"o-3", "SKU-1 ", "eu", -1, ts}},
		{v1.serialize(t, topic, orderRec("o-4", "s", "99999999999999.9999", ts, "eu")), want{"o-4", "s", "eu", 999999999999999999, ts}},
		{v1.serialize(t, topic, orderRec("o-5", "s", "-99999999999999.999900", ts, "eu")), want{"o-5", "s", "eu", -999999999999999999, ts}},
		{v1.serialize(t, topic, orderRec("o-6", "s", "0", ts, "eu")), want{"o-6", "s", "eu", 0, ts}},
	}
	var rec spec.Record
	for i, g := range good {
		r, field, err := a.Decode(context.Background(), g.in, &rec)
		if err != nil || r != spec.OK {
			t.Errorf("record %d: %s %s %v", i, r, field, err)
			continue
		}
		if got := gotOf(&rec); got != g.want {
			t.Errorf("record %d: decoded %+v, want %+v", i, got, g.want)
		}
		if oracle := goavroRead(t, v1.schema, g.in); oracle != g.want {
			t.Errorf("record %d: goavro reads %+v, want %+v", i, oracle, g.want)
		}
	}
	bad := []struct {
		name   string
		in     []byte
		reason spec.Reason
		field  string
	}{
		{"no customer", v1.serialize(t, topic, orderRec("o", "s", "1", ts, nil)), spec.ReasonMissingField, "customer.region"},
		// v2 has no customer at all: the spec's field is missing from the writer schema.
		{"v2", v2.serialize(t, topic, map[string]any{"order_id": "o", "sku": "s", "amount": rat("1"), "ts": time.UnixMilli(ts), "channel": "app"}),
			spec.ReasonMissingField, "customer.region"},
		{"empty sku", v1.serialize(t, topic, orderRec("o", "", "1", ts, "eu")), spec.Reason(order.ReasonEmptyField), "sku"},
		{"region too long", v1.serialize(t, topic, orderRec("o", "s", "1", ts, "europe-west")), spec.ReasonTooLong, "customer.region"},
		{"sub-unit amount", v1.serialize(t, topic, orderRec("o", "s", "0.00001", ts, "eu")), spec.Reason(order.ReasonAmountPrecision), "amount"},
		{"huge amount", v1.serialize(t, topic, orderRec("o", "s", "100000000000000", ts, "eu")), spec.Reason(order.ReasonAmountRange), "amount"},
		{"early ts", v1.serialize(t, topic, orderRec("o", "s", "1", 946684799999, "eu")), spec.Reason(order.ReasonTSRange), "ts"},
		{"wrong magic", append([]byte{1}, v1.serialize(t, topic, orderRec("o", "s", "1", ts, "eu"))[1:]...), spec.ReasonBadHeader, ""},
		{"json", []byte(`{"order_id":"o","sku":"s","amount":"1","ts":1764000000000}`), spec.ReasonBadHeader, ""},
		{"short", []byte{0, 0, 0}, spec.ReasonBadHeader, ""},
		{"unknown id", append([]byte{0, 0x7f, 0xff, 0xff, 0xfe}, v1.serialize(t, topic, orderRec("o", "s", "1", ts, "eu"))[5:]...), spec.ReasonUnknownSchema, ""},
		{"truncated", func() []byte { b := v1.serialize(t, topic, orderRec("o", "s", "1", ts, "eu")); return b[:len(b)-3] }(), spec.ReasonBadEncoding, ""},
		{"trailing byte", append(v1.serialize(t, topic, orderRec("o", "s", "1", ts, "eu")), 0), spec.ReasonBadEncoding, ""},
		{"too large", append(v1.serialize(t, topic, orderRec("o", "s", "1", ts, "eu")), make([]byte, testLimits.MaxPayloadBytes)...), spec.ReasonTooLarge, ""},
	}
	for _, b := range bad {
		r, field, err := a.Decode(context.Background(), b.in, &rec)
		if err != nil || r != b.reason || field != b.field {
			t.Errorf("%s: %s %q %v, want %s %q", b.name, r, field, err, b.reason, b.field)
		}
	}
}

// goavroRead decodes a framed record with linkedin/goavro from the schema's text.
func goavroRead(t *testing.T, schema string, framed []byte) want {
	t.Helper()
	codec, err := goavro.NewCodec(schema)
	if err != nil {
		t.Fatal(err)
	}
	native, rest, err := codec.NativeFromBinary(framed[5:])
	if err != nil || len(rest) != 0 {
		t.Fatalf("goavro: %v, %d bytes left", err, len(rest))
	}
	m := native.(map[string]any)
	var w want
	w.orderID, w.sku = m["order_id"].(string), m["sku"].(string)
	units := new(big.Rat).Mul(m["amount"].(*big.Rat), new(big.Rat).SetInt64(10000))
	if !units.IsInt() {
		t.Fatalf("goavro: amount %s is not whole in 10^-%d units", m["amount"].(*big.Rat).FloatString(8), money.Scale)
	}
	w.units = units.Num().Int64()
	w.ts = m["ts"].(time.Time).UnixMilli()
	if c, ok := m["customer"].(map[string]any); ok {
		w.region = c["shop.Customer"].(map[string]any)["region"].(string)
	}
	return w
}

// Every Avro type that holds a spec field's value exactly is read: an enum as a string, a fixed
// decimal, a long as a decimal, timestamp-micros (floored to the millisecond) or a plain long as the
// event time, a nested record outside a union. A float or double where the spec wants a decimal is
// wrong_type, never rounded; so is a long with a timestamp type where it wants a decimal.
func TestAvroWriterTypes(t *testing.T) {
	url := testenv.Registry(t)
	a, reg, _ := newAvro(t, url)
	topic := "relay_format_" + harness.Suffix()
	schema := func(amount, ts string) string {
		return `{"type": "record", "name": "Order", "fields": [
  {"name": "order_id", "type": "string"},
  {"name": "sku", "type": {"type": "enum", "name": "Sku", "symbols": ["A", "B"]}},
  {"name": "amount", "type": ` + amount + `},
  {"name": "ts", "type": ` + ts + `},
  {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [{"name": "region", "type": "string"}]}}]}`
	}
	const ts = 1764000000123
	rec := func(amount, ts any) map[string]any {
		return map[string]any{"order_id": "o", "sku": "B", "amount": amount, "ts": ts, "customer": map[string]any{"region": "eu"}}
	}
	for i, c := range []struct {
		amount, ts string
		value      map[string]any
		reason     spec.Reason
		units, ms  int64
	}{
		{`{"type": "fixed", "name": "Money", "size": 12, "logicalType": "decimal", "precision": 20, "scale": 2}`,
			`{"type": "long", "logicalType": "timestamp-micros"}`, rec(rat("-12.5"), time.UnixMicro(ts*1000+999).UTC()), spec.OK, -125000, ts},
		{`"long"`, `"long"`, rec(int64(-7), int64(ts)), spec.OK, -70000, ts},
		{`"int"`, `"int"`, rec(3, 2000000000), spec.Reason(order.ReasonTSRange), 0, 0}, // an int of epoch milliseconds is 1970
		{`"double"`, `"long"`, rec(0.5, int64(ts)), spec.ReasonWrongType, 0, 0},
		{`"float"`, `"long"`, rec(float32(0.5), int64(ts)), spec.ReasonWrongType, 0, 0},
		{`{"type": "long", "logicalType": "timestamp-millis"}`, `"long"`, rec(time.UnixMilli(ts).UTC(), int64(ts)), spec.ReasonWrongType, 0, 0},
		{`"string"`, `"long"`, rec("1.5", int64(ts)), spec.ReasonWrongType, 0, 0},
		// Its units do not fit an int64: past the amount limit, however the product wraps.
		{`"long"`, `"long"`, rec(int64(math.MaxInt64), int64(ts)), spec.Reason(order.ReasonAmountRange), 0, 0},
		{`"long"`, `"long"`, rec(int64(-99999999999999), int64(ts)), spec.OK, -999999999999990000, ts},
		// A bytes decimal of more than 8 bytes (scale 12): exact at money.Scale or amount_precision.
		{`{"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 12}`, `"long"`,
			rec(rat("-12345678.000000000001"), int64(ts)), spec.ReasonAmountPrecision, 0, 0},
		{`{"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 12}`, `"long"`,
			rec(rat("-12345678.123400000000"), int64(ts)), spec.OK, -123456781234, ts},
		// Only a union of null and one type is read: which branch a record took would change the rows.
		{`["null", "long", "string"]`, `"long"`, rec(map[string]any{"long": int64(1)}, int64(ts)), spec.ReasonWrongType, 0, 0},
		{`["null", "long"]`, `"long"`, rec(nil, int64(ts)), spec.ReasonMissingField, 0, 0},
		{`["long", "null"]`, `"long"`, rec(map[string]any{"long": int64(2)}, int64(ts)), spec.OK, 20000, ts},
		{`"long"`, `"string"`, rec(int64(1), "2024-01-01T00:00:00Z"), spec.ReasonWrongType, 0, 0},
	} {
		s := register(t, reg.Client(), topic+"-"+string(rune('a'+i))+"-value", schema(c.amount, c.ts))
		var got spec.Record
		r, field, err := a.Decode(context.Background(), s.serialize(t, topic+"-"+string(rune('a'+i)), c.value), &got)
		if err != nil || r != c.reason {
			t.Errorf("amount %s, ts %s: %s %q %v, want %s", c.amount, c.ts, r, field, err, c.reason)
			continue
		}
		if r != spec.OK {
			continue
		}
		if w := (want{"o", "B", "eu", c.units, c.ms}); gotOf(&got) != w {
			t.Errorf("amount %s, ts %s: %+v, want %+v", c.amount, c.ts, gotOf(&got), w)
		}
	}
}

// An id the registry does not know is asked for UnknownAsks times, then remembered: later records
// of it cost no request.
func TestAvroUnknownIDIsRemembered(t *testing.T) {
	url := testenv.Registry(t)
	base, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	var asks atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(&neturl.URL{Scheme: base.Scheme, Host: base.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asks.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p, err := spec.Parse([]byte(orderSpec), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(RegistryConfig{URL: srv.URL + base.Path, UnknownAsks: 3, UnknownWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAvro(p, reg, 0)
	var rec spec.Record
	for i, want := range []int32{3, 3} {
		r, _, err := a.Decode(context.Background(), []byte{0, 0x7f, 0xff, 0xff, 0xfd, 2, 'o'}, &rec)
		if err != nil || r != spec.ReasonUnknownSchema || asks.Load() != want {
			t.Errorf("record %d: %s %v after %d requests in all, want unknown_schema after %d", i, r, err, asks.Load(), want)
		}
	}
}

// A registry that cannot be reached is an error, never a reason: the record is not bad input.
func TestAvroRegistryDownIsNoVerdict(t *testing.T) {
	a, _, _ := newAvro(t, "http://"+deadAddr(t))
	var rec spec.Record
	r, field, err := a.Decode(context.Background(), []byte{0, 0, 0, 0, 1, 2, 'o'}, &rec)
	if !errors.Is(err, ErrUnavailable) || r != spec.OK || field != "" {
		t.Errorf("registry down: %s %q %v, want no verdict and ErrUnavailable", r, field, err)
	}
}

// Only an http or https URL is a registry: confluent-kafka-go's client would take mock:// for its
// in-memory fake, and a comma-separated list for failover URLs.
func TestRegistryURL(t *testing.T) {
	for _, u := range []string{"mock://x", "ftp://h/x", "h:8081", "http://a:1,http://b:1", "", "http://"} {
		if _, err := NewRegistry(RegistryConfig{URL: u}); err == nil {
			t.Errorf("NewRegistry(%q) accepted it", u)
		}
	}
	if _, err := NewRegistry(RegistryConfig{URL: "https://h:8081/apis/ccompat/v7", CAFile: "/nonexistent/ca.pem"}); err == nil {
		t.Error("a CA file that does not exist was accepted")
	}
	if _, err := NewRegistry(RegistryConfig{URL: "https://h:8081/apis/ccompat/v7"}); err != nil {
		t.Error(err)
	}
}

// At start the spec is resolved against every version of the topic's subject: a field no version
// has, or one a version gives an inexact type, is refused by the spec's key, before any record.
func TestAvroCheckSubject(t *testing.T) {
	url := testenv.Registry(t)
	a, reg, _ := newAvro(t, url)
	topic := "relay_format_" + harness.Suffix()
	ctx := context.Background()
	// v1 has customer.region, v2 dropped it: some version has every field.
	register(t, reg.Client(), topic+"-evolved-value", orderV1)
	register(t, reg.Client(), topic+"-evolved-value", orderV2)
	if err := a.CheckSubject(ctx, topic+"-evolved-value"); err != nil {
		t.Errorf("v1 and v2: %v", err)
	}
	register(t, reg.Client(), topic+"-v2-value", orderV2)
	double := register(t, reg.Client(), topic+"-double-value", strings.Replace(orderV1,
		`{"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 6}`, `["null", "double"]`, 1))
	union := register(t, reg.Client(), topic+"-union-value", strings.Replace(orderV1, `"name": "sku", "type": "string"`, `"name": "sku", "type": ["null", "string", "long"]`, 1))
	for _, c := range []struct{ subject, want string }{
		{topic + "-union-value", fmt.Sprintf("pipeline.input.fields.sku: %s-union-value version 1 (id %d) has union of null, string and long at sku, which cannot hold string exactly", topic, union.id)},
		{topic + "-v2-value", "pipeline.input.fields.customer.region: no version of " + topic + "-v2-value has customer.region"},
		{topic + "-double-value", fmt.Sprintf("pipeline.input.fields.amount: %s-double-value version 1 (id %d) has double at amount, which cannot hold decimal exactly", topic, double.id)},
	} {
		err := a.CheckSubject(ctx, c.subject)
		if !errors.Is(err, ErrSpecUnreadable) || err.Error() != ErrSpecUnreadable.Error()+": "+c.want {
			t.Errorf("%s: %v, want %s", c.subject, err, c.want)
		}
	}
	// A subject nobody registered yet is waited for at start, not refused.
	if err := a.CheckSubject(ctx, topic+"-none-value"); !errors.Is(err, ErrNoSubject) || errors.Is(err, ErrSpecUnreadable) {
		t.Errorf("a subject with no schema: %v, want ErrNoSubject", err)
	}
	down, _, _ := newAvro(t, "http://"+deadAddr(t))
	if err := down.CheckSubject(ctx, topic+"-v2-value"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("registry down: %v, want ErrUnavailable", err)
	}
}

// deadAddr is a loopback address where nothing listens: every request to it is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestAvroReferences reads records whose writer schema names a type another subject defines (a
// schema reference, as Confluent's serializers register one), in both ways relay fetches writer
// schemas: by a record's id, and every version of the subject at start.
func TestAvroReferences(t *testing.T) {
	url := testenv.Registry(t)
	a, reg, _ := newAvro(t, url)
	topic := "relay_format_ref_" + harness.Suffix()
	// The Customer a record names is defined in a subject of its own, and that one names a
	// Region defined in a third: references are followed all the way down.
	const region = `{"type": "record", "name": "Region", "namespace": "geo", "fields": [{"name": "code", "type": "string"}]}`
	const customer = `{"type": "record", "name": "Customer", "namespace": "shop", "fields": [{"name": "region", "type": "string"}, {"name": "home", "type": "geo.Region"}]}`
	order := strings.Replace(orderV1, `{"type": "record", "name": "Customer", "fields": [
    {"name": "region", "type": "string"}]}`, `"shop.Customer"`, 1)
	if order == orderV1 {
		t.Fatal("orderV1 has no Customer to reference")
	}
	c := reg.Client()
	if _, err := c.Register(topic+"-region", schemaregistry.SchemaInfo{Schema: region}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(topic+"-customer", schemaregistry.SchemaInfo{Schema: customer,
		References: []schemaregistry.Reference{{Name: "geo.Region", Subject: topic + "-region", Version: 1}}}, false); err != nil {
		t.Fatal(err)
	}
	id, err := c.Register(topic+"-value", schemaregistry.SchemaInfo{Schema: order,
		References: []schemaregistry.Reference{{Name: "shop.Customer", Subject: topic + "-customer", Version: 1}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	conf := avrov2.NewSerializerConfig()
	conf.AutoRegisterSchemas, conf.UseSchemaID = false, id
	ser, err := avrov2.NewSerializer(c, serde.ValueSerde, conf)
	if err != nil {
		t.Fatal(err)
	}
	const ts = 1764000000123
	rec := orderRec("o-1", "sku-A", "12.34", ts, nil)
	rec["customer"] = map[string]any{"shop.Customer": map[string]any{"region": "eu", "home": map[string]any{"code": "FR"}}}
	framed := registered{id: id, ser: ser}.serialize(t, topic, rec)
	var got spec.Record
	if r, field, err := a.Decode(context.Background(), framed, &got); err != nil || r != spec.OK {
		t.Fatalf("decode: %s %q %v", r, field, err)
	}
	if g, w := gotOf(&got), (want{"o-1", "sku-A", "eu", 123400, ts}); g != w {
		t.Fatalf("decoded %+v, want %+v", g, w)
	}
	if err := a.CheckSubject(context.Background(), topic+"-value"); err != nil {
		t.Fatalf("CheckSubject: %v", err)
	}
}
