package format

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

const sequenceSpec = `input:
  format: avro
  fields:
    order_id: string(128)
    sku: string(64)
    amount: decimal(4)
    customer.region: string(8)
    qty: int
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - {table: t, window: 1m, dimensions: [{column: sku, field: sku}], measures: [{column: s, kind: sum, field: amount}]}
`

// The writer schema as it evolves under BACKWARD compatibility: v2 adds a field with a default
// and promotes qty from int to long, v3 drops customer.
var sequenceSchemas = []string{
	`{"type": "record", "name": "Order", "namespace": "shop", "fields": [
  {"name": "order_id", "type": "string"},
  {"name": "sku", "type": "string"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 6}},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "customer", "type": ["null", {"type": "record", "name": "Customer", "fields": [{"name": "region", "type": "string"}]}], "default": null},
  {"name": "qty", "type": "int"}]}`,
	`{"type": "record", "name": "Order", "namespace": "shop", "fields": [
  {"name": "order_id", "type": "string"},
  {"name": "sku", "type": "string"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 6}},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "customer", "type": ["null", {"type": "record", "name": "Customer", "fields": [{"name": "region", "type": "string"}]}], "default": null},
  {"name": "qty", "type": "long"},
  {"name": "note", "type": "string", "default": ""}]}`,
	`{"type": "record", "name": "Order", "namespace": "shop", "fields": [
  {"name": "order_id", "type": "string"},
  {"name": "sku", "type": "string"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 6}},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "qty", "type": "long"},
  {"name": "note", "type": "string", "default": ""}]}`,
}

// drawn is one generated record: the values the generator chose, from which the test states the
// verdict and the values itself, with neither relay's code nor hamba's.
type drawn struct {
	version         int
	orderID, sku    string
	region          *string // nil: customer null
	unscaled        *big.Int
	ts              int64
	qty             int64
	wantReason      spec.Reason
	wantField       string
	wantUnits       int64
	wantRegion      string
	wantQty, wantTS int64
}

// String shows the drawn values, quoted (they hold NULs and non-ASCII).
func (d drawn) String() string {
	region := "null"
	if d.region != nil {
		region = fmt.Sprintf("%q", *d.region)
	}
	return fmt.Sprintf("order_id %q, sku %q, amount %s e-6, region %s, qty %d, ts %d", d.orderID, d.sku, d.unscaled, region, d.qty, d.ts)
}

var alphabet = []string{"a", "Z", "0", "-", " ", "é", "€", "😀", "\u0000", "ß"}

func drawString(r *rand.Rand, maxRunes int) string {
	var b strings.Builder
	for range r.IntN(maxRunes + 1) {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func drawUnscaled(r *rand.Rand) *big.Int {
	switch r.IntN(8) {
	case 0:
		return big.NewInt([]int64{0, 1, -1, 100, -100, 99, math.MaxInt64, math.MinInt64}[r.IntN(8)])
	case 1:
		// Past int64, sometimes whole in money units, sometimes within the amount limit.
		n := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(19+r.IntN(5))), nil)
		n.Add(n, big.NewInt(r.Int64N(1000)*100))
		if r.IntN(2) == 0 {
			n.Neg(n)
		}
		return n
	case 2:
		return big.NewInt(r.Int64() - math.MaxInt64/2)
	default:
		// Money-like: cents at scale 6, mostly exact at money.Scale.
		n := big.NewInt(r.Int64N(1e12) * 100)
		if r.IntN(10) == 0 {
			n.Add(n, big.NewInt(1))
		}
		if r.IntN(3) == 0 {
			n.Neg(n)
		}
		return n
	}
}

// expect states what relay must make of d, checking the spec's fields in order as the JSON path
// would: the strings, the amount (a digit below 10^-4, then the limit), the region, qty, the time.
func (d *drawn) expect(limits spec.Limits) {
	str := func(name, s string, max int) bool {
		switch {
		case s == "":
			d.wantReason, d.wantField = spec.Reason(order.ReasonEmptyField), name
		case len(s) > max:
			d.wantReason, d.wantField = spec.ReasonTooLong, name
		default:
			return true
		}
		return false
	}
	if !str("order_id", d.orderID, 128) || !str("sku", d.sku, 64) {
		return
	}
	q, m := new(big.Int).QuoRem(d.unscaled, big.NewInt(100), new(big.Int))
	switch {
	case m.Sign() != 0:
		d.wantReason, d.wantField = spec.ReasonAmountPrecision, "amount"
		return
	case q.CmpAbs(big.NewInt(limits.MaxUnits)) > 0:
		d.wantReason, d.wantField = spec.Reason(order.ReasonAmountRange), "amount"
		return
	}
	d.wantUnits = q.Int64()
	if d.version == 2 || d.region == nil {
		d.wantReason, d.wantField = spec.ReasonMissingField, "customer.region"
		return
	}
	if !str("customer.region", *d.region, 8) {
		return
	}
	d.wantRegion, d.wantQty = *d.region, d.qty
	if d.ts < limits.MinTS || d.ts >= limits.MaxTS {
		d.wantReason, d.wantField = spec.Reason(order.ReasonTSRange), "ts"
		return
	}
	d.wantTS = d.ts
}

// arena lays a sequence's records back to back in one buffer, as the consumer's batch does: each
// record is a slice whose capacity runs on over the records after it. A decoder that writes through
// a record, or keeps a record's bytes as its scratch memory and writes into them at a later record
// (a memory-reuse bug that shows only across records sharing one buffer), changes the buffer,
// which checked compares with its copy after every decode.
type arena struct{ buf, pristine []byte }

// add copies payload into the arena (a new one when it is full: records already handed out keep
// their memory) and returns the record as the decoder must see it.
func (a *arena) add(payload []byte) []byte {
	if len(a.buf)+len(payload) > cap(a.buf) {
		a.buf, a.pristine = make([]byte, 0, max(1<<16, len(payload))), nil
	}
	from := len(a.buf)
	a.buf = append(a.buf, payload...)
	a.pristine = append(a.pristine, payload...)
	return a.buf[from:len(a.buf)]
}

// checked fails t if a decode wrote into the arena.
func (a *arena) checked(t testing.TB, n int) {
	t.Helper()
	if !bytes.Equal(a.buf, a.pristine) {
		t.Fatalf("record %d: the decoder wrote into the memory of a record it was given", n)
	}
}

// check decodes record n, framed from d, with dec and requires d's verdict and, when OK, its values;
// it returns the verdict. The record is read from mem, an arena shared with the sequence's others.
func (d *drawn) check(t *testing.T, n int, dec Decoder, mem *arena, framed []byte, rec *spec.Record) spec.Reason {
	t.Helper()
	framed = mem.add(framed)
	reason, field, err := dec.Decode(context.Background(), framed, rec)
	mem.checked(t, n)
	if err != nil || reason != d.wantReason || field != d.wantField {
		t.Fatalf("record %d (v%d: %s)\n%q\n: %s %q %v, want %s %q", n, d.version+1, d, framed, reason, field, err, d.wantReason, d.wantField)
	}
	if reason != spec.OK {
		return reason
	}
	got := fmt.Sprintf("%s|%s|%d|%s|%d|%d", rec.Vals[0].Bytes, rec.Vals[1].Bytes, rec.Vals[2].Int, rec.Vals[3].Bytes, rec.Vals[4].Int, rec.TS)
	want := fmt.Sprintf("%s|%s|%d|%s|%d|%d", d.orderID, d.sku, d.wantUnits, d.wantRegion, d.wantQty, d.wantTS)
	if got != want {
		t.Fatalf("record %d (v%d): %q\ndecoded %q, want %q", n, d.version+1, framed, got, want)
	}
	return reason
}

// Random sequences of records, encoded by linkedin/goavro (not the library relay decodes with)
// under a writer schema that changes mid-sequence, with old writers still writing: relay's verdict
// and values are what the generator's own values say, record by record.
func TestAvroRandomSequences(t *testing.T) {
	url := testenv.Registry(t)
	seed := testenv.Seed(t, "RELAY_TEST_SEED", 0)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p, err := spec.Parse([]byte(sequenceSpec), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(RegistryConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAvro(p, reg, 0)
	subject := "relay_format_seq_" + harness.Suffix() + "-value"
	var ids []int
	var codecs []*goavro.Codec
	const records = 600
	var rec spec.Record
	var mem arena
	seen := map[spec.Reason]int{}
	for n := range records {
		if n%(records/len(sequenceSchemas)) == 0 && len(ids) < len(sequenceSchemas) {
			reg := register(t, reg.Client(), subject, sequenceSchemas[len(ids)])
			c, err := goavro.NewCodec(sequenceSchemas[len(ids)])
			if err != nil {
				t.Fatal(err)
			}
			ids, codecs = append(ids, reg.id), append(codecs, c)
		}
		d := drawn{version: r.IntN(len(ids)), orderID: drawString(r, 40), sku: drawString(r, 20), unscaled: drawUnscaled(r),
			ts: testLimits.MinTS + r.Int64N(testLimits.MaxTS-testLimits.MinTS)}
		if r.IntN(5) == 0 {
			d.ts = []int64{testLimits.MinTS - 1, testLimits.MinTS, testLimits.MaxTS - 1, testLimits.MaxTS}[r.IntN(4)]
		}
		if r.IntN(10) == 0 {
			d.orderID = strings.Repeat("é", 65) // 130 bytes
		}
		if r.IntN(4) > 0 {
			region := drawString(r, 4)
			d.region = &region
		}
		if d.version == 0 {
			d.qty = int64(int32(r.Uint32()))
		} else {
			d.qty = int64(r.Uint64())
		}
		d.expect(testLimits)
		native := map[string]any{"order_id": d.orderID, "sku": d.sku, "amount": new(big.Rat).SetFrac(d.unscaled, big.NewInt(1e6)),
			"ts": time.UnixMilli(d.ts).UTC(), "qty": d.qty, "note": "n"}
		if d.version == 0 {
			native["qty"] = int32(d.qty)
		}
		if d.version < 2 {
			native["customer"] = nil
			if d.region != nil {
				native["customer"] = goavro.Union("shop.Customer", map[string]any{"region": *d.region})
			}
		}
		framed := []byte{0, byte(ids[d.version] >> 24), byte(ids[d.version] >> 16), byte(ids[d.version] >> 8), byte(ids[d.version])}
		framed, err = codecs[d.version].BinaryFromNative(framed, native)
		if err != nil {
			t.Fatalf("record %d: goavro: %v", n, err)
		}
		seen[d.check(t, n, a, &mem, framed, &rec)]++
	}
	// The draws reach every verdict, or the sequence proves less than it says.
	t.Logf("verdicts: %v", seen)
	for _, r := range []spec.Reason{spec.OK, spec.Reason(order.ReasonEmptyField), spec.ReasonTooLong, spec.ReasonAmountPrecision,
		spec.Reason(order.ReasonAmountRange), spec.ReasonMissingField, spec.Reason(order.ReasonTSRange)} {
		if seen[r] == 0 {
			t.Errorf("no record was %s", r)
		}
	}
}
