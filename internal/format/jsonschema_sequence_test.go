package format

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

// The JSON Schemas of sequenceSpec's orders as they evolve under BACKWARD compatibility: v2 no
// longer requires any field, v3 drops customer.
var jsonSequenceSchemas = []string{
	`{"type": "object", "required": ["order_id", "sku", "amount", "ts", "qty"], "properties": {"order_id": {"type": "string"}, "sku": {"type": "string"},
  "amount": {"type": ["number", "string"]}, "ts": {"type": ["integer", "string"]}, "qty": {"type": ["integer", "string"]},
  "customer": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"region": {"type": ["string", "null"]}}}]}}}`,
	`{"type": "object", "properties": {"order_id": {"type": "string"}, "sku": {"type": "string"},
  "amount": {"type": ["number", "string"]}, "ts": {"type": ["integer", "string"]}, "qty": {"type": ["integer", "string"]},
  "customer": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"region": {"type": ["string", "null"]}}}]}}}`,
	`{"type": "object", "properties": {"order_id": {"type": "string"}, "sku": {"type": "string"},
  "amount": {"type": ["number", "string"]}, "ts": {"type": ["integer", "string"]}, "qty": {"type": ["integer", "string"]}}}`,
}

// jsonString writes s as a JSON string literal, each rune at random raw or \u-escaped (an astral
// rune as its surrogate pair), the characters JSON requires escaped always escaped, some by their
// short forms; lone puts a lone surrogate escape at the end.
func jsonString(r *rand.Rand, s string, lone bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b.WriteString([]string{`\` + string(c), fmt.Sprintf(`\u%04x`, c)}[r.IntN(2)])
		case c == '\n' && r.IntN(2) == 0:
			b.WriteString(`\n`)
		case c < 0x20 || r.IntN(4) == 0:
			for _, u := range utf16.Encode([]rune{c}) {
				b.WriteString(fmt.Sprintf([]string{`\u%04x`, `\u%04X`}[r.IntN(2)], u))
			}
		case c == '/' && r.IntN(2) == 0:
			b.WriteString(`\/`)
		default:
			b.WriteRune(c)
		}
	}
	if lone {
		b.WriteString(`\ud83d`)
	}
	b.WriteByte('"')
	return b.String()
}

// jsonDecimal writes the unscaled value at scale 6 as JSON text: a number, a string, or an
// exponent form, with zeros that change nothing.
func jsonDecimal(r *rand.Rand, unscaled *big.Int) string {
	var text string
	switch r.IntN(3) {
	case 0:
		text = new(big.Rat).SetFrac(unscaled, big.NewInt(1e6)).FloatString(6)
	case 1:
		text = new(big.Rat).SetFrac(unscaled, big.NewInt(1e6)).FloatString(6 + r.IntN(3))
		if !strings.HasPrefix(text, "-") && r.IntN(3) == 0 {
			text = "0" + text // leading zeros are not JSON numbers: strings only
			return strconv.Quote(text)
		}
	default:
		text = unscaled.String() + "e-6"
		if r.IntN(2) == 0 {
			text = new(big.Int).Mul(unscaled, big.NewInt(10)).String() + "E-7"
		}
	}
	if r.IntN(2) == 0 {
		return strconv.Quote(text)
	}
	return text
}

// Random sequences of JSON Schema records, written as JSON text by the test itself (escapes,
// unicode past the BMP, decimals at and past the money scale and the amount limit, negative ones,
// int64 edges, digit strings, nulls, missing objects and fields, lone surrogates) under a schema id
// that changes mid-sequence with old writers still writing, and among them records only the bytes
// or the registry judge: relay's verdict and values are what the generator's own values say
// (drawn.expect, as for Avro), record by record.
func TestJSONSchemaRandomSequences(t *testing.T) {
	url := testenv.Registry(t)
	seed := testenv.Seed(t, "RELAY_TEST_SEED", 0)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	j, reg := newJSONSchema(t, url, sequenceSpec)
	subject := "relay_format_jsseq_" + harness.Suffix()
	avroID := register(t, reg.Client(), subject+"-avro-value", sequenceSchemas[0]).id
	var ids []int
	const records = 1500
	var rec spec.Record
	var mem arena
	seen := map[spec.Reason]int{}
	for n := range records {
		if n%(records/len(jsonSequenceSchemas)) == 0 && len(ids) < len(jsonSequenceSchemas) {
			ids = append(ids, registerJSON(t, reg.Client(), subject+"-value", jsonSequenceSchemas[len(ids)]).id)
		}
		d := drawn{version: r.IntN(len(ids)), orderID: drawString(r, 40), sku: drawString(r, 20), unscaled: drawUnscaled(r),
			ts: testLimits.MinTS + r.Int64N(testLimits.MaxTS-testLimits.MinTS), qty: int64(r.Uint64())}
		if r.IntN(5) == 0 {
			d.ts = []int64{testLimits.MinTS - 1, testLimits.MinTS, testLimits.MaxTS - 1, testLimits.MaxTS}[r.IntN(4)]
		}
		if r.IntN(10) == 0 {
			d.orderID = strings.Repeat("é", 65) // 130 bytes
		}
		if r.IntN(8) == 0 {
			d.sku += []string{`"`, `\`, "/", "\n", "\t"}[r.IntN(5)]
		}
		if r.IntN(4) > 0 {
			region := drawString(r, 4)
			d.region = &region
		}
		if r.IntN(6) == 0 {
			d.qty = []int64{0, -1, 1<<63 - 1, -1 << 63, 1<<31 - 1, -1 << 31}[r.IntN(6)]
		}
		d.expect(testLimits)
		lone, noQty := r.IntN(30) == 0, r.IntN(30) == 0
		if lone && d.wantField != "order_id" {
			d.wantReason, d.wantField = spec.ReasonBadText, "sku"
		} else if noQty && (d.wantReason == spec.OK || d.wantField == "ts") {
			d.wantReason, d.wantField = spec.ReasonMissingField, "qty"
		}
		members := []string{
			`"order_id":` + jsonString(r, d.orderID, false),
			`"sku":` + jsonString(r, d.sku, lone),
			`"amount":` + jsonDecimal(r, d.unscaled),
		}
		ts := strconv.FormatInt(d.ts, 10)
		if r.IntN(4) == 0 && d.ts >= 0 {
			ts = strconv.Quote(ts) // a digit string is an epoch_ms time too
		}
		members = append(members, `"ts":`+ts)
		if !noQty {
			qty := strconv.FormatInt(d.qty, 10)
			if r.IntN(3) == 0 {
				qty = strconv.Quote(qty)
			}
			members = append(members, `"qty":`+qty)
		}
		if d.version < 2 {
			switch {
			case d.region != nil:
				members = append(members, `"customer":{"region":`+jsonString(r, *d.region, false)+`}`)
			case r.IntN(3) == 0:
				members = append(members, `"customer":null`)
			case r.IntN(2) == 0:
				members = append(members, `"customer":{"region":null}`)
			}
		}
		r.Shuffle(len(members), func(a, b int) { members[a], members[b] = members[b], members[a] })
		text := "{" + strings.Join(members, [...]string{",", " , ", ",\n\t"}[r.IntN(3)]) + "}"
		framed := append(AppendHeader(nil, ids[d.version]), text...)
		switch r.IntN(40) {
		case 0:
			framed, d.wantReason, d.wantField = []byte(text), spec.ReasonBadHeader, ""
		case 1:
			framed, d.wantReason, d.wantField = append(AppendHeader(nil, 1<<31-3), text...), spec.ReasonUnknownSchema, ""
		case 2:
			framed, d.wantReason, d.wantField = append(AppendHeader(nil, avroID), text...), spec.ReasonBadEncoding, ""
		case 3:
			framed, d.wantReason, d.wantField = framed[:len(framed)-1], spec.Reason(order.ReasonNotJSON), ""
		}
		seen[d.check(t, n, j, &mem, framed, &rec)]++
	}
	t.Logf("verdicts: %v", seen)
	for _, r := range []spec.Reason{spec.OK, spec.Reason(order.ReasonEmptyField), spec.ReasonTooLong, spec.ReasonBadText, spec.ReasonAmountPrecision,
		spec.Reason(order.ReasonAmountRange), spec.ReasonMissingField, spec.Reason(order.ReasonTSRange), spec.ReasonBadHeader,
		spec.ReasonUnknownSchema, spec.ReasonBadEncoding, spec.Reason(order.ReasonNotJSON)} {
		if seen[r] == 0 {
			t.Errorf("no record was %s", r)
		}
	}
}
