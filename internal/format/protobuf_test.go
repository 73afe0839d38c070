package format

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/protobuf"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

const pbSpec = `input:
  format: protobuf
  fields:
    order_id: string(128)
    sku: string(64)
    amount: decimal(4)
    customer.region: string(8)
    qty: int
    channel: string(8)
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - {table: t, window: 1m, dimensions: [{column: sku, field: sku}], measures: [{column: s, kind: sum, field: amount}]}
`

// The writer schema as it evolves: v2 widens qty to int64, adds coupon, makes sku optional
// (explicit presence: absent is missing_field, no longer "") and puts customer and channel in
// oneofs (a later member clears them); v3 drops customer, writes qty as sint64 and the amount as
// google.type.Decimal text.
var pbSchemas = []string{`syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "confluent/type/decimal.proto";
message Order {
  string order_id = 1;
  string sku = 2;
  confluent.type.Decimal amount = 3;
  google.protobuf.Timestamp ts = 4;
  Customer customer = 5;
  int32 qty = 6;
  Channel channel = 7;
  message Customer { string region = 1; }
  enum Channel { WEB = 0; APP = 1; STORE = 2; }
}
`, `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "confluent/type/decimal.proto";
message Order {
  string order_id = 1;
  optional string sku = 2;
  confluent.type.Decimal amount = 3;
  google.protobuf.Timestamp ts = 4;
  oneof who { Customer customer = 5; string anonymous_id = 12; }
  int64 qty = 6;
  oneof via { Channel channel = 7; string partner = 11; }
  string coupon = 8;
  message Customer { string region = 1; }
  enum Channel { WEB = 0; APP = 1; STORE = 2; }
}
`, `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/type/decimal.proto";
message Order {
  string order_id = 1;
  optional string sku = 2;
  google.type.Decimal amount = 9;
  google.protobuf.Timestamp ts = 4;
  reserved 5;
  sint64 qty = 10;
  Channel channel = 7;
  string coupon = 8;
  enum Channel { WEB = 0; APP = 1; STORE = 2; }
}
`}

// pbMessageOf compiles a schema (with the built-in imports relay resolves) and returns its first
// message type, for dynamicpb to write and read records of.
func pbMessageOf(t testing.TB, schema string) protoreflect.MessageDescriptor {
	t.Helper()
	file, err := compileProto(context.Background(), nil, schemaregistry.SchemaInfo{Schema: schema, SchemaType: "PROTOBUF"})
	if err != nil {
		t.Fatal(err)
	}
	return file.Messages().Get(0)
}

// pbExpect is what a record must decode to, stated from google.golang.org/protobuf's own
// proto.Unmarshal into a dynamic message of the writer type (not relay's walk, which reads only the
// spec's fields off the wire) and the spec's rules written out here: the verdict, the field, and
// the values.
func pbExpect(t testing.TB, md protoreflect.MessageDescriptor, body []byte, limits spec.Limits) (spec.Reason, string, string) {
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(body, m); err != nil {
		return spec.ReasonBadEncoding, "", ""
	}
	get := func(path ...string) (protoreflect.Value, protoreflect.FieldDescriptor, bool) {
		msg := protoreflect.Message(m)
		for i, k := range path {
			fd := msg.Descriptor().Fields().ByName(protoreflect.Name(k))
			if fd == nil {
				return protoreflect.Value{}, nil, false
			}
			if i == len(path)-1 {
				if fd.HasPresence() && !msg.Has(fd) {
					return protoreflect.Value{}, nil, false
				}
				return msg.Get(fd), fd, true
			}
			if !msg.Has(fd) {
				return protoreflect.Value{}, nil, false
			}
			msg = msg.Get(fd).Message()
		}
		panic("empty path")
	}
	str := func(name string, max int, path ...string) (string, spec.Reason) {
		v, fd, ok := get(path...)
		if !ok {
			return "", spec.ReasonMissingField
		}
		s := v.String()
		if fd.Kind() == protoreflect.EnumKind {
			ev := fd.Enum().Values().ByNumber(v.Enum())
			if ev == nil {
				return "", spec.ReasonWrongType
			}
			s = string(ev.Name())
		}
		switch {
		case s == "":
			return "", spec.Reason(order.ReasonEmptyField)
		case !utf8.ValidString(s):
			return "", spec.ReasonBadText
		case len(s) > max:
			return "", spec.ReasonTooLong
		}
		return s, spec.OK
	}
	var vals []string
	for _, f := range []struct {
		name string
		max  int
	}{{"order_id", 128}, {"sku", 64}} {
		s, r := str(f.name, f.max, f.name)
		if r != spec.OK {
			return r, f.name, ""
		}
		vals = append(vals, s)
	}
	// The amount: confluent.type.Decimal's unscaled bytes and scale, or google.type.Decimal's text.
	v, fd, ok := get("amount")
	if !ok {
		return spec.ReasonMissingField, "amount", ""
	}
	am := v.Message()
	var amount *big.Rat
	if fd.Message().FullName() == "google.type.Decimal" {
		text := am.Get(fd.Message().Fields().ByNumber(1)).String()
		// decimal.proto's grammar: a sign, digits on at least one side of an optional point,
		// an exponent.
		m := decimalText.FindStringSubmatch(text)
		if m == nil || m[2]+m[3] == "" {
			return spec.Reason(order.ReasonBadAmount), "amount", ""
		}
		if amount, ok = new(big.Rat).SetString(strings.TrimPrefix(text, "+")); !ok {
			// An exponent too large for big.Rat decides alone: zero digits are 0, any other
			// value is past the amount limit or has a digit below 10^-4.
			switch {
			case strings.Trim(m[2]+m[3], "0") == "":
				amount = new(big.Rat)
			case !strings.HasPrefix(m[4], "-"):
				return spec.Reason(order.ReasonAmountRange), "amount", ""
			default:
				return spec.ReasonAmountPrecision, "amount", ""
			}
		}
	} else {
		b := am.Get(fd.Message().Fields().ByNumber(1)).Bytes()
		n := new(big.Int).SetBytes(b)
		if len(b) > 0 && b[0]&0x80 != 0 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
		}
		// n × 10^-scale: past ±(digits of n + 30) places no amount could come of a non-zero n,
		// and 10^scale would cost too much to compute.
		scale := am.Get(fd.Message().Fields().ByNumber(3)).Int()
		digits := int64(len(n.String()))
		switch {
		case n.Sign() == 0:
			amount = new(big.Rat)
		case scale > digits+30:
			return spec.ReasonAmountPrecision, "amount", ""
		case scale < -30:
			return spec.Reason(order.ReasonAmountRange), "amount", ""
		case scale < 0:
			amount = new(big.Rat).SetInt(new(big.Int).Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil)))
		default:
			amount = new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil))
		}
	}
	units := new(big.Rat).Mul(amount, big.NewRat(10000, 1))
	switch {
	case !units.IsInt():
		return spec.ReasonAmountPrecision, "amount", ""
	case units.Num().CmpAbs(big.NewInt(limits.MaxUnits)) > 0:
		return spec.Reason(order.ReasonAmountRange), "amount", ""
	}
	vals = append(vals, units.Num().String())
	region, r := str("region", 8, "customer", "region")
	if r != spec.OK {
		return r, "customer.region", ""
	}
	vals = append(vals, region)
	q, _, ok := get("qty")
	if !ok {
		return spec.ReasonMissingField, "qty", ""
	}
	vals = append(vals, fmt.Sprint(q.Int()))
	channel, r := str("channel", 8, "channel")
	if r != spec.OK {
		return r, "channel", ""
	}
	vals = append(vals, channel)
	ts, fd, ok := get("ts")
	if !ok {
		return spec.ReasonMissingField, "ts", ""
	}
	tm := ts.Message()
	// seconds × 1000 + ⌊nanos / 10^6⌋, exactly: past int64 it is bad_ts, as a JSON epoch past it.
	exact := new(big.Int).Mul(big.NewInt(tm.Get(fd.Message().Fields().ByNumber(1)).Int()), big.NewInt(1000))
	exact.Add(exact, new(big.Int).Div(big.NewInt(tm.Get(fd.Message().Fields().ByNumber(2)).Int()), big.NewInt(1e6)))
	if !exact.IsInt64() {
		return spec.ReasonBadTS, "ts", ""
	}
	ms := exact.Int64()
	if ms < limits.MinTS || ms >= limits.MaxTS {
		return spec.Reason(order.ReasonTSRange), "ts", ""
	}
	vals = append(vals, fmt.Sprint(ms))
	return spec.OK, "", strings.Join(vals, "|")
}

var decimalText = regexp.MustCompile(`^([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?$`)

// pbGot is a decoded record's values, as pbExpect states them.
func pbGot(rec *spec.Record) string {
	return fmt.Sprintf("%s|%s|%d|%s|%d|%s|%d", rec.Vals[0].Bytes, rec.Vals[1].Bytes, rec.Vals[2].Int, rec.Vals[3].Bytes, rec.Vals[4].Int, rec.Vals[5].Bytes, rec.TS)
}

// pbDraw builds one random record of writer type md (version v) with dynamicpb and encodes it,
// then sometimes edits the encoding as protobuf allows a writer to: a field repeated (the last
// wins, a message merges), an unknown field, a known field with another wire type (an unknown
// field to protobuf), or breaks it (cut short, a proto3 string not UTF-8).
func pbDraw(t testing.TB, r *rand.Rand, md protoreflect.MessageDescriptor, v int, limits spec.Limits) []byte {
	m := dynamicpb.NewMessage(md)
	fields := md.Fields()
	set := func(name string, val protoreflect.Value) { m.Set(fields.ByName(protoreflect.Name(name)), val) }
	if r.IntN(10) > 0 {
		set("order_id", protoreflect.ValueOfString(drawString(r, 40)))
	}
	if s := drawString(r, 20); r.IntN(10) > 0 && (s != "" || v > 0) {
		set("sku", protoreflect.ValueOfString(s)) // v2 and v3 write "" (sku has presence there)
	}
	un := drawUnscaled(r)
	if fd := fields.ByName("amount"); fd.Message().FullName() == "google.type.Decimal" {
		dm := dynamicpb.NewMessage(fd.Message())
		text := new(big.Rat).SetFrac(un, big.NewInt(1e6)).FloatString(6)
		if r.IntN(10) == 0 {
			// JSON's grammar, decimal.proto's wider one, and neither's.
			texts := []string{"1e3", "", "abc", "-0.00001", "12.3400", " 1", "+1.5", ".25", "-.5", "7.", "5.e2", "1E+2",
				"+-1", "-+1", ".", "+", "-.", "1e", "1.5e+", "0012.50", "+.0", "1..2", "1e2.5", "++1"}
			text = texts[r.IntN(len(texts))]
		}
		dm.Set(fd.Message().Fields().ByNumber(1), protoreflect.ValueOfString(text))
		m.Set(fd, protoreflect.ValueOfMessage(dm))
	} else if r.IntN(20) > 0 {
		dm := dynamicpb.NewMessage(fd.Message())
		dm.Set(fd.Message().Fields().ByNumber(1), protoreflect.ValueOfBytes(twosComplement(un)))
		dm.Set(fd.Message().Fields().ByNumber(3), protoreflect.ValueOfInt32(int32(r.IntN(9))))
		m.Set(fd, protoreflect.ValueOfMessage(dm))
	}
	ts := limits.MinTS + r.Int64N(limits.MaxTS-limits.MinTS)
	if r.IntN(5) == 0 {
		ts = []int64{limits.MinTS - 1, limits.MinTS, limits.MaxTS - 1, limits.MaxTS}[r.IntN(4)]
	}
	if fd := fields.ByName("ts"); r.IntN(20) > 0 {
		tm := dynamicpb.NewMessage(fd.Message())
		tm.Set(fd.Message().Fields().ByNumber(1), protoreflect.ValueOfInt64(ts/1000))
		tm.Set(fd.Message().Fields().ByNumber(2), protoreflect.ValueOfInt32(int32(ts%1000)*1_000_000+int32(r.IntN(1_000_000))))
		m.Set(fd, protoreflect.ValueOfMessage(tm))
	}
	if fd := fields.ByName("customer"); fd != nil && r.IntN(4) > 0 {
		cm := dynamicpb.NewMessage(fd.Message())
		if r.IntN(8) > 0 {
			cm.Set(fd.Message().Fields().ByName("region"), protoreflect.ValueOfString(drawString(r, 4)))
		}
		m.Set(fd, protoreflect.ValueOfMessage(cm))
	}
	if fd := fields.ByName("qty"); fd.Kind() == protoreflect.Int32Kind {
		set("qty", protoreflect.ValueOfInt32(int32(r.Uint32())))
	} else {
		set("qty", protoreflect.ValueOfInt64([]int64{math.MinInt64, math.MaxInt64, -1, 0, int64(r.Uint64())}[r.IntN(5)]))
	}
	set("channel", protoreflect.ValueOfEnum(protoreflect.EnumNumber([]int32{0, 1, 2, 2, 7}[r.IntN(5)])))
	if fd := fields.ByName("coupon"); fd != nil {
		set("coupon", protoreflect.ValueOfString("SAVE"))
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	switch r.IntN(16) {
	case 0: // sku again: the last occurrence wins
		body = protowire.AppendString(protowire.AppendTag(body, 2, protowire.BytesType), drawString(r, 3))
	case 1: // an unknown field of each wire type
		body = protowire.AppendVarint(protowire.AppendTag(body, 99, protowire.VarintType), r.Uint64())
		body = protowire.AppendFixed64(protowire.AppendTag(body, 98, protowire.Fixed64Type), r.Uint64())
		body = protowire.AppendBytes(protowire.AppendTag(body, 97, protowire.BytesType), []byte{0xff, 0xfe})
	case 2: // order_id with a fixed32 wire type: an unknown field, so order_id keeps its value
		body = protowire.AppendFixed32(protowire.AppendTag(body, 1, protowire.Fixed32Type), r.Uint32())
	case 3: // the customer again, merged into the first
		if fd := fields.ByName("customer"); fd != nil {
			inner := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), drawString(r, 3))
			body = protowire.AppendBytes(protowire.AppendTag(body, 5, protowire.BytesType), inner)
		}
	case 4: // cut short
		if len(body) > 0 {
			body = body[:r.IntN(len(body))]
		}
	case 5: // a proto3 string that is not UTF-8
		body = protowire.AppendBytes(protowire.AppendTag(body, 1, protowire.BytesType), []byte{'a', 0xff})
	case 6: // qty again (as varint, which int32, int64 and sint64 all are): the last wins
		body = protowire.AppendVarint(protowire.AppendTag(body, qtyNumber(md), protowire.VarintType), r.Uint64()>>r.IntN(64))
	case 7: // qty as bytes: an unknown field, so qty keeps its value
		body = protowire.AppendBytes(protowire.AppendTag(body, qtyNumber(md), protowire.BytesType), []byte{1, 2})
	case 8: // the time again with only nanos: merged, its seconds kept
		inner := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), uint64(r.IntN(1e9)))
		body = protowire.AppendBytes(protowire.AppendTag(body, 4, protowire.BytesType), inner)
	case 9: // another member of channel's and customer's oneofs (v2), clearing them
		body = protowire.AppendString(protowire.AppendTag(body, protowire.Number(11+r.IntN(2)), protowire.BytesType), "p")
	case 10: // the other member, then channel and a customer again: each starts afresh
		body = protowire.AppendString(protowire.AppendTag(body, 11, protowire.BytesType), "p")
		body = protowire.AppendVarint(protowire.AppendTag(body, 7, protowire.VarintType), 1)
		body = protowire.AppendString(protowire.AppendTag(body, 12, protowire.BytesType), "anon")
		body = protowire.AppendBytes(protowire.AppendTag(body, 5, protowire.BytesType), nil)
	}
	return body
}

func qtyNumber(md protoreflect.MessageDescriptor) protowire.Number {
	return md.Fields().ByName("qty").Number()
}

// twosComplement is n as the big-endian two's-complement bytes of confluent.type.Decimal.
func twosComplement(n *big.Int) []byte {
	if n.Sign() >= 0 {
		b := n.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	l := len(n.Bytes()) + 1
	m := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), uint(l)*8), n)
	b := m.FillBytes(make([]byte, l))
	for len(b) > 1 && b[0] == 0xff && b[1]&0x80 != 0 {
		b = b[1:]
	}
	return b
}

// Random sequences of Protobuf records, written by dynamicpb under a writer schema that changes
// mid-sequence (old writers still writing) and edited at the wire level: relay's verdict, field
// and values are what proto.Unmarshal of the same bytes and the spec's rules, written out in
// pbExpect, say, record by record.
func TestProtobufRandomSequences(t *testing.T) {
	url := testenv.Registry(t)
	seed := testenv.Seed(t, "RELAY_TEST_SEED", 0)
	r := rand.New(rand.NewPCG(seed, seed^0x51ed2701))
	p, err := spec.Parse([]byte(pbSpec), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(RegistryConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	d := NewProtobuf(p, reg, 0)
	subject := "relay_format_pbseq_" + harness.Suffix() + "-value"
	anyChange(t, reg, subject)
	var ids []int
	var mds []protoreflect.MessageDescriptor
	const records = 3000
	var rec spec.Record
	var mem arena
	seen := map[spec.Reason]int{}
	for n := range records {
		if n%(records/len(pbSchemas)) == 0 && len(ids) < len(pbSchemas) {
			id, err := reg.Client().Register(subject, schemaregistry.SchemaInfo{Schema: pbSchemas[len(ids)], SchemaType: "PROTOBUF"}, false)
			if err != nil {
				t.Fatal(err)
			}
			ids, mds = append(ids, id), append(mds, pbMessageOf(t, pbSchemas[len(ids)]))
		}
		v := r.IntN(len(ids))
		body := pbDraw(t, r, mds[v], v, testLimits)
		framed := append(AppendHeader(nil, ids[v]), 0) // message indexes [0]
		framed = append(framed, body...)
		wantReason, wantField, wantVals := pbExpect(t, mds[v], body, testLimits)
		reason, field, err := d.Decode(context.Background(), mem.add(framed), &rec)
		mem.checked(t, n)
		if err != nil || reason != wantReason || field != wantField {
			t.Fatalf("record %d (v%d, %x): %s %q %v, want %s %q", n, v+1, body, reason, field, err, wantReason, wantField)
		}
		seen[reason]++
		if reason == spec.OK && pbGot(&rec) != wantVals {
			t.Fatalf("record %d (v%d, %x): decoded %q, want %q", n, v+1, body, pbGot(&rec), wantVals)
		}
	}
	t.Logf("verdicts: %v", seen)
	for _, r := range []spec.Reason{spec.OK, spec.Reason(order.ReasonEmptyField), spec.ReasonTooLong, spec.ReasonAmountPrecision,
		spec.Reason(order.ReasonAmountRange), spec.Reason(order.ReasonBadAmount), spec.ReasonMissingField, spec.Reason(order.ReasonTSRange),
		spec.ReasonWrongType, spec.ReasonBadEncoding} {
		if seen[r] == 0 {
			t.Errorf("no record was %s", r)
		}
	}
}

// anyChange lets subject take any new version: the writer changes these tests make (a field's
// number, int32 to sint64) are not what BACKWARD compatibility allows, and the decoder must read
// whatever was registered.
func anyChange(t *testing.T, reg *Registry, subject string) {
	t.Helper()
	if _, err := reg.Client().UpdateCompatibility(subject, schemaregistry.None); err != nil {
		t.Fatalf("compatibility of %s: %v", subject, err)
	}
}

// Records written by confluent-kafka-go's own Protobuf serializer (auto-registering its schema,
// with its message-index list: here the second message of the file, [1]) decode to their values.
func TestProtobufReadsConfluentRecords(t *testing.T) {
	url := testenv.Registry(t)
	p, err := spec.Parse([]byte(strings.Replace(pbSpec, "    qty: int\n    channel: string(8)\n", "    qty: int\n", 1)), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(RegistryConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	schema := strings.Replace(pbSchemas[0], "message Order {", "message Header { string trace = 1; }\nmessage Order {", 1)
	md := pbMessageOf(t, schema)
	md = md.ParentFile().Messages().ByName("Order")
	ser, err := protobuf.NewSerializer(reg.Client(), serde.ValueSerde, protobuf.NewSerializerConfig())
	if err != nil {
		t.Fatal(err)
	}
	topic := "relay_format_pbconf_" + harness.Suffix()
	d := NewProtobuf(p, reg, 0)
	for i, c := range []struct {
		amount []byte
		scale  int32
		units  int64
	}{{[]byte{0x04, 0xd2}, 2, 123400}, {[]byte{0xfb, 0x2e}, 2, -123400}, {[]byte{0x01}, 0, 10000}} {
		m := dynamicpb.NewMessage(md)
		f := md.Fields()
		m.Set(f.ByName("order_id"), protoreflect.ValueOfString(fmt.Sprintf("o-%d-é", i)))
		m.Set(f.ByName("sku"), protoreflect.ValueOfString("SKU-€"))
		am := dynamicpb.NewMessage(f.ByName("amount").Message())
		am.Set(am.Descriptor().Fields().ByNumber(1), protoreflect.ValueOfBytes(c.amount))
		am.Set(am.Descriptor().Fields().ByNumber(3), protoreflect.ValueOfInt32(c.scale))
		m.Set(f.ByName("amount"), protoreflect.ValueOfMessage(am))
		tm := dynamicpb.NewMessage(f.ByName("ts").Message())
		tm.Set(tm.Descriptor().Fields().ByNumber(1), protoreflect.ValueOfInt64(1764000000))
		tm.Set(tm.Descriptor().Fields().ByNumber(2), protoreflect.ValueOfInt32(123_999_999))
		m.Set(f.ByName("ts"), protoreflect.ValueOfMessage(tm))
		cm := dynamicpb.NewMessage(f.ByName("customer").Message())
		cm.Set(cm.Descriptor().Fields().ByName("region"), protoreflect.ValueOfString("eu"))
		m.Set(f.ByName("customer"), protoreflect.ValueOfMessage(cm))
		m.Set(f.ByName("qty"), protoreflect.ValueOfInt32(-7))
		framed, err := ser.Serialize(topic, m)
		if err != nil {
			t.Fatalf("confluent's serializer: %v", err)
		}
		if framed[5] != 2 || framed[6] != 2 { // one index, 1 (zigzag): the second message
			t.Fatalf("message indexes %x, want [1]", framed[5:7])
		}
		var rec spec.Record
		reason, field, err := d.Decode(context.Background(), framed, &rec)
		if err != nil || reason != spec.OK {
			t.Fatalf("record %d: %s %q %v", i, reason, field, err)
		}
		want := fmt.Sprintf("o-%d-é|SKU-€|%d|eu|-7|1764000000123", i, c.units)
		if got := fmt.Sprintf("%s|%s|%d|%s|%d|%d", rec.Vals[0].Bytes, rec.Vals[1].Bytes, rec.Vals[2].Int, rec.Vals[3].Bytes, rec.Vals[4].Int, rec.TS); got != want {
			t.Errorf("record %d: %s, want %s", i, got, want)
		}
	}
	// The header's magic byte, and a message-index list naming no message of the file.
	var rec spec.Record
	if reason, _, _ := d.Decode(context.Background(), []byte{1, 0, 0, 0, 1, 0}, &rec); reason != spec.ReasonBadHeader {
		t.Errorf("magic byte 1: %s", reason)
	}
	ids, err := reg.Client().GetAllVersions(topic + "-value")
	if err != nil || len(ids) == 0 {
		t.Fatalf("versions: %v %v", ids, err)
	}
	meta, err := reg.Client().GetSchemaMetadata(topic+"-value", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if reason, _, _ := d.Decode(context.Background(), append(AppendHeader(nil, meta.ID), 2, 6), &rec); reason != spec.ReasonBadEncoding {
		t.Errorf("message index [3] of a file of two messages: %s", reason)
	}
}

// The start-up check refuses, naming the spec's key, a subject whose versions lack a field or give
// it a type that cannot hold it exactly (a double for a decimal, a repeated field), and waits for
// a subject with no version.
func TestProtobufCheckSubject(t *testing.T) {
	url := testenv.Registry(t)
	p, err := spec.Parse([]byte(pbSpec), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(RegistryConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	d := NewProtobuf(p, reg, 0)
	topic := "relay_format_pbcheck_" + harness.Suffix()
	ctx := context.Background()
	registerPB := func(subject, schema string) int {
		id, err := reg.Client().Register(subject, schemaregistry.SchemaInfo{Schema: schema, SchemaType: "PROTOBUF"}, false)
		if err != nil {
			t.Fatalf("register %s: %v", subject, err)
		}
		return id
	}
	anyChange(t, reg, topic+"-evolved-value")
	registerPB(topic+"-evolved-value", pbSchemas[0])
	registerPB(topic+"-evolved-value", pbSchemas[2])
	if err := d.CheckSubject(ctx, topic+"-evolved-value"); err != nil {
		t.Errorf("v1 and v3: %v", err)
	}
	registerPB(topic+"-v3-value", pbSchemas[2])
	double := registerPB(topic+"-double-value", strings.Replace(pbSchemas[0], "confluent.type.Decimal amount = 3;", "double amount = 3;", 1))
	repeated := registerPB(topic+"-repeated-value", strings.Replace(pbSchemas[0], "string sku = 2;", "repeated string sku = 2;", 1))
	for _, c := range []struct{ subject, want string }{
		{topic + "-v3-value", "pipeline.input.fields.customer.region: no version of " + topic + "-v3-value has customer.region"},
		{topic + "-double-value", fmt.Sprintf("pipeline.input.fields.amount: %s-double-value version 1 (id %d) has double at amount, which cannot hold decimal exactly", topic, double)},
		{topic + "-repeated-value", fmt.Sprintf("pipeline.input.fields.sku: %s-repeated-value version 1 (id %d) has repeated string at sku, which cannot hold string exactly", topic, repeated)},
	} {
		err := d.CheckSubject(ctx, c.subject)
		if !errors.Is(err, ErrSpecUnreadable) || err.Error() != ErrSpecUnreadable.Error()+": "+c.want {
			t.Errorf("%s: %v, want %s", c.subject, err, c.want)
		}
	}
	if err := d.CheckSubject(ctx, topic+"-none-value"); !errors.Is(err, ErrNoSubject) {
		t.Errorf("a subject with no schema: %v, want ErrNoSubject", err)
	}
}

// A decoder keeps at most its bound of resolved schemas, and says so: records of two ids taking
// turns through a decoder that keeps one resolve each time (and evict the other), through one that
// keeps two only once each.
func TestResolvedSchemasObserved(t *testing.T) {
	url := testenv.Registry(t)
	p, err := spec.Parse([]byte(pbSpec), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(RegistryConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	subject := "relay_format_pbobs_" + harness.Suffix() + "-value"
	anyChange(t, reg, subject)
	var ids []int
	for _, s := range pbSchemas[:2] {
		id, err := reg.Client().Register(subject, schemaregistry.SchemaInfo{Schema: s, SchemaType: "PROTOBUF"}, false)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, c := range []struct{ keep, resolved, evicted int }{{1, 6, 5}, {2, 2, 0}} {
		d := NewProtobuf(p, reg, c.keep)
		var resolved, evicted int
		Observe(d, Observer{Resolved: func() { resolved++ }, Evicted: func() { evicted++ }})
		var rec spec.Record
		for i := range 6 {
			if _, _, err := d.Decode(context.Background(), append(AppendHeader(nil, ids[i%2]), 0), &rec); err != nil {
				t.Fatal(err)
			}
		}
		if resolved != c.resolved || evicted != c.evicted {
			t.Errorf("keeping %d: %d resolved, %d evicted; want %d, %d", c.keep, resolved, evicted, c.resolved, c.evicted)
		}
	}
}

// Whatever bytes a Protobuf record's message holds, under any of the evolving writer schemas,
// relay's verdict, field and values are what proto.Unmarshal of the same bytes and the spec's
// rules say (pbExpect): the random sequences' check, over inputs the fuzzer makes.
func FuzzProtobufDecode(f *testing.F) {
	p, err := spec.Parse([]byte(pbSpec), testLimits)
	if err != nil {
		f.Fatal(err)
	}
	d := NewProtobuf(p, nil, 0)
	var mds []protoreflect.MessageDescriptor
	for id, text := range pbSchemas {
		md := pbMessageOf(f, text)
		d.schemas.put(id, &pbSchema{file: md.ParentFile()})
		mds = append(mds, md)
	}
	r := rand.New(rand.NewPCG(36, 36))
	for v := range 3 * len(pbSchemas) {
		f.Add(byte(v), pbDraw(f, r, mds[v%len(mds)], v%len(mds), testLimits))
	}
	var rec spec.Record
	// One arena across the inputs: the decoder is one too, and a record's memory it kept would be
	// written at a later input.
	var mem arena
	f.Fuzz(func(t *testing.T, version byte, body []byte) {
		v := int(version) % len(mds)
		framed := append(append(AppendHeader(nil, v), 0), body...)
		wantReason, wantField, wantVals := pbExpect(t, mds[v], body, testLimits)
		reason, field, err := d.Decode(context.Background(), mem.add(framed), &rec)
		mem.checked(t, 0)
		if err != nil || reason != wantReason || field != wantField {
			t.Fatalf("v%d %x: %s %q %v, want %s %q", v+1, body, reason, field, err, wantReason, wantField)
		}
		if reason == spec.OK && pbGot(&rec) != wantVals {
			t.Fatalf("v%d %x: decoded %q, want %q", v+1, body, pbGot(&rec), wantVals)
		}
	})
}

// What proto.Unmarshal refuses in fields the spec does not read fails the record too, and only
// that: each case's verdict is bad_encoding exactly when proto.Unmarshal of the same bytes fails.
func TestProtobufChecksUnreadFields(t *testing.T) {
	p, err := spec.Parse([]byte(`input:
  format: protobuf
  fields: {order_id: string(8)}
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - {table: t, window: 1m, dimensions: [{column: id, field: order_id}], measures: [{column: n, kind: count}]}
`), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	proto3 := pbMessageOf(t, `syntax = "proto3";
message M { string order_id = 1; int64 ts = 2; repeated int32 nums = 20; Sub sub = 21; string note = 22;
  map<string, int32> tags = 23; message Sub { string s = 1; repeated fixed64 f = 2; } }`)
	proto2 := pbMessageOf(t, `syntax = "proto2";
message R { optional string order_id = 1; optional int64 ts = 2; required int32 must = 3; optional string loose = 4; }`)
	d := NewProtobuf(p, nil, 0)
	d.schemas.put(1, &pbSchema{file: proto3.ParentFile()})
	d.schemas.put(2, &pbSchema{file: proto2.ParentFile()})
	base := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "o")
	base = protowire.AppendVarint(protowire.AppendTag(base, 2, protowire.VarintType), 1764000000000)
	with := func(b []byte, num protowire.Number, typ protowire.Type, val []byte) []byte {
		b = protowire.AppendTag(append([]byte(nil), b...), num, typ)
		return append(b, val...)
	}
	bytesOf := func(v []byte) []byte { return protowire.AppendBytes(nil, v) }
	sub := func(inner []byte) []byte { return bytesOf(inner) }
	for _, c := range []struct {
		name string
		id   int
		body []byte
	}{
		{"plain", 1, base},
		{"packed run whole", 1, with(base, 20, protowire.BytesType, bytesOf([]byte{1, 0x96, 0x01}))},
		{"packed run cut", 1, with(base, 20, protowire.BytesType, bytesOf([]byte{1, 0xff}))},
		{"unpacked element", 1, with(base, 20, protowire.VarintType, []byte{5})},
		{"message garbage", 1, with(base, 21, protowire.BytesType, sub([]byte{0xff}))},
		{"nested string not UTF-8", 1, with(base, 21, protowire.BytesType, sub(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xc0})))},
		{"nested packed fixed64 cut", 1, with(base, 21, protowire.BytesType, sub(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{1, 2, 3})))},
		{"string not UTF-8", 1, with(base, 22, protowire.BytesType, bytesOf([]byte{0xff}))},
		{"string as varint (unknown)", 1, with(base, 22, protowire.VarintType, []byte{1})},
		{"map key not UTF-8", 1, with(base, 23, protowire.BytesType, sub(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff})))},
		{"field number past 2^29-1", 1, with(base, protowire.MaxValidNumber+1, protowire.VarintType, []byte{1})},
		{"required absent", 2, base},
		{"required present", 2, with(base, 3, protowire.VarintType, []byte{7})},
		{"proto2 string not UTF-8", 2, with(with(base, 3, protowire.VarintType, []byte{7}), 4, protowire.BytesType, bytesOf([]byte{0xff}))},
	} {
		md := proto3
		if c.id == 2 {
			md = proto2
		}
		want := spec.OK
		if proto.Unmarshal(c.body, dynamicpb.NewMessage(md)) != nil {
			want = spec.ReasonBadEncoding
		}
		var rec spec.Record
		got, _, err := d.Decode(context.Background(), append(append(AppendHeader(nil, c.id), 0), c.body...), &rec)
		if err != nil || got != want {
			t.Errorf("%s: %s %v, want %s (proto.Unmarshal's verdict)", c.name, got, err, want)
		}
	}
}

// TestProtobufWrappers reads spec fields from the well-known wrappers: a string from StringValue, a
// decimal from StringValue's text and from an integer wrapper, an int from Int32Value and
// UInt64Value, an epoch time from Int64Value; an absent wrapper is missing_field (a wrapper is a
// message: it has presence), a wrapped zero is a value; a wrapper of a type that cannot hold the
// field (DoubleValue for a decimal, BoolValue for an int) is wrong_type for every record.
func TestProtobufWrappers(t *testing.T) {
	const schema = `syntax = "proto3";
import "google/protobuf/wrappers.proto";
message Order {
  google.protobuf.StringValue order_id = 1;
  google.protobuf.StringValue sku = 2;
  google.protobuf.StringValue amount = 3;
  google.protobuf.UInt64Value qty = 4;
  google.protobuf.Int64Value ts = 5;
  google.protobuf.Int32Value small = 6;
  google.protobuf.DoubleValue price = 7;
  google.protobuf.BoolValue flag = 8;
}`
	const specText = `input:
  format: protobuf
  fields:
    order_id: string(16)
    sku: string(16)
    amount: decimal(4)
    qty: int
    small: int
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - {table: t, window: 1m, dimensions: [{column: sku, field: sku}], measures: [{column: s, kind: sum, field: amount}]}
`
	md := pbMessageOf(t, schema)
	p, err := spec.Parse([]byte(specText), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	d := NewProtobuf(p, nil, 0)
	d.schemas.put(1, &pbSchema{file: md.ParentFile()})
	f := md.Fields()
	wrap := func(name string, v protoreflect.Value) func(*dynamicpb.Message) {
		return func(m *dynamicpb.Message) {
			w := dynamicpb.NewMessage(f.ByName(protoreflect.Name(name)).Message())
			w.Set(w.Descriptor().Fields().ByNumber(1), v)
			m.Set(f.ByName(protoreflect.Name(name)), protoreflect.ValueOfMessage(w))
		}
	}
	full := []func(*dynamicpb.Message){
		wrap("order_id", protoreflect.ValueOfString("o-1")), wrap("sku", protoreflect.ValueOfString("SKU-é")),
		wrap("amount", protoreflect.ValueOfString("12.5")), wrap("qty", protoreflect.ValueOfUint64(7)),
		wrap("ts", protoreflect.ValueOfInt64(1764000000123)), wrap("small", protoreflect.ValueOfInt32(-3)),
	}
	record := func(sets ...func(*dynamicpb.Message)) []byte {
		m := dynamicpb.NewMessage(md)
		for _, s := range sets {
			s(m)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return append(append(AppendHeader(nil, 1), 0), b...)
	}
	decode := func(b []byte) (spec.Reason, string, *spec.Record) {
		var rec spec.Record
		r, field, err := d.Decode(context.Background(), b, &rec)
		if err != nil {
			t.Fatal(err)
		}
		return r, field, &rec
	}
	r, field, rec := decode(record(full...))
	if r != spec.OK {
		t.Fatalf("every wrapper set: %s %q", r, field)
	}
	if got := fmt.Sprintf("%s|%s|%d|%d|%d|%d", rec.Vals[0].Bytes, rec.Vals[1].Bytes, rec.Vals[2].Int, rec.Vals[3].Int, rec.Vals[4].Int, rec.TS); got != "o-1|SKU-é|125000|7|-3|1764000000123" {
		t.Errorf("decoded %s", got)
	}
	// A wrapped zero is a value (the wrapper is there), an absent wrapper is not.
	zero := append(append([]func(*dynamicpb.Message){}, full...), wrap("small", protoreflect.ValueOfInt32(0)))
	if r, field, rec := decode(record(zero...)); r != spec.OK || rec.Vals[4].Int != 0 {
		t.Errorf("small wrapping 0: %s %q", r, field)
	}
	if r, field, _ := decode(record(append(append([]func(*dynamicpb.Message){}, full[:3]...), full[4:]...)...)); r != spec.ReasonMissingField || field != "qty" {
		t.Errorf("no qty wrapper: %s %q, want missing_field qty", r, field)
	}
	// A UInt64Value past int64 is bad_int, as a JSON integer past it.
	big := append(append([]func(*dynamicpb.Message){}, full...), wrap("qty", protoreflect.ValueOfUint64(1<<63)))
	if r, field, _ := decode(record(big...)); r != spec.ReasonBadInt || field != "qty" {
		t.Errorf("qty 2^63: %s %q, want bad_int qty", r, field)
	}
	for _, c := range []struct{ field, kind, found string }{
		{"price", "decimal(4)", "message google.protobuf.DoubleValue"},
		{"flag", "int", "message google.protobuf.BoolValue"},
	} {
		p, err := spec.Parse([]byte(strings.Replace(specText, "    small: int\n", "    small: int\n    "+c.field+": "+c.kind+"\n", 1)), testLimits)
		if err != nil {
			t.Fatal(err)
		}
		pl := NewProtobuf(p, nil, 0).resolve(md)
		if got := pl.fields[5]; got.reason != spec.ReasonWrongType || got.found != c.found {
			t.Errorf("%s as %s: %s %q, want wrong_type %q", c.field, c.kind, got.reason, got.found, c.found)
		}
	}
}
