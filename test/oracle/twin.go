// A record of any registry format as its JSON twin: each spec field's value, as the format's own
// decoder gave it, placed along the field's path in a JSON object the oracle's JSON rules
// (decode.go) then judge as they judge a JSON topic's record. Invariant: a value is written as
// the field's kind takes it in JSON only where the writer's type holds it exactly; any other type
// becomes a JSON value that kind calls wrong_type, so no format's reading needs rules of its own.

package oracle

import (
	"encoding/json"
	"math/big"
	"strconv"
	"time"
	"unicode/utf8"
)

// twinOf is the JSON twin of plain record top: each spec field placed along its path.
func (s *Spec) twinOf(top map[string]any) ([]byte, error) {
	twin := map[string]any{}
	for _, f := range append(append([]Field(nil), s.Fields...), s.EventTime) {
		place(twin, top, f)
	}
	return json.Marshal(twin)
}

// place puts field f of the plain record top into twin, along its path: a missing value nowhere
// (missing_field), a path through a value that is no record as a number there (wrong_type), the
// value as jsonOf writes it.
func place(twin, top map[string]any, f Field) {
	cur, node := top, twin
	for i, k := range f.Path {
		v, ok := cur[k]
		if !ok || v == nil {
			return
		}
		if i == len(f.Path)-1 {
			if raw, ok := jsonOf(f.Type, v); ok {
				node[k] = json.RawMessage(raw)
			}
			return
		}
		if _, absent := v.(absentField); absent {
			return // a Protobuf message that is not set: missing
		}
		if w, isWellKnown := v.(wellKnown); isWellKnown {
			v = w.fields // a path through a Timestamp, a decimal, a wrapper
		}
		next, isRecord := v.(map[string]any)
		if !isRecord {
			node[k] = json.RawMessage("0")
			return
		}
		child, ok := node[k].(map[string]any)
		if !ok {
			child = map[string]any{}
			node[k] = child
		}
		cur, node = next, child
	}
}

// jsonOf writes v as field kind typ takes it in JSON: the value itself where the Avro type holds
// the field exactly, else a JSON value that kind calls wrong_type (a number where a string is
// wanted, an array where a number is). ok is false for a missing value (null or absent).
func jsonOf(typ string, v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		if typ != "string" && typ != "rfc3339" {
			return wrong(typ), true
		}
		if !utf8.ValidString(x) {
			return `"\ud800"`, true // invalid UTF-8: the string field's bad_<field>, as a lone surrogate is
		}
		b, _ := json.Marshal(x)
		return string(b), true
	case absentField:
		if holds(typ, x.fd) {
			return "", false
		}
		return wrong(typ), true
	case wellKnown:
		return jsonOf(typ, x.value)
	case enumName:
		if typ != "string" {
			return wrong(typ), true
		}
		return jsonOf(typ, string(x))
	case epochMillis:
		if typ != "epoch_ms" {
			return wrong(typ), true
		}
		return x.ms.String(), true
	case unscaledDecimal:
		if typ != "decimal" {
			return wrong(typ), true
		}
		return unscaledText(x), true
	case protoString:
		if typ == "decimal" {
			b, _ := json.Marshal(string(x)) // decimal text, as in a JSON string
			return string(b), true
		}
		return jsonOf(typ, string(x))
	case decimalText:
		if typ != "decimal" {
			return wrong(typ), true
		}
		b, _ := json.Marshal(string(x))
		return string(b), true
	case int64:
		if typ == "string" || typ == "rfc3339" {
			return wrong(typ), true
		}
		return strconv.FormatInt(x, 10), true
	case uint64:
		if typ == "string" || typ == "rfc3339" {
			return wrong(typ), true
		}
		return strconv.FormatUint(x, 10), true
	case *big.Rat:
		if typ != "decimal" {
			return wrong(typ), true
		}
		return strconv.Quote(ratText(x)), true
	case time.Time:
		if typ != "epoch_ms" {
			return wrong(typ), true
		}
		return strconv.FormatInt(x.UnixMilli(), 10), true
	}
	return wrong(typ), true
}

// wrong is a JSON value field kind typ calls wrong_type: a number for a string, an array for a
// number or an epoch time.
func wrong(typ string) string {
	if typ == "string" || typ == "rfc3339" {
		return "0"
	}
	return "[]"
}

// ratText is v's exact decimal text (v has a power-of-ten denominator: an Avro decimal).
func ratText(v *big.Rat) string {
	for digits := 0; digits <= 80; digits++ {
		if new(big.Rat).Mul(v, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(digits)), nil))).IsInt() {
			return v.FloatString(digits)
		}
	}
	panic("oracle: not a decimal: " + v.String())
}
