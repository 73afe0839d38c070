// Avro records in Confluent's wire format, read without any of relay's code: writer schemas
// fetched by plain HTTP from the registry's /schemas/ids/{id}, records decoded by linkedin/goavro
// (relay decodes with hamba/avro), each spec field then judged by docs/FORMATS.md's rules.
//
// Invariant: an Avro record becomes the JSON object its spec fields would be in a JSON topic
// (its twin) only where docs/FORMATS.md says the Avro type holds the field exactly (string or
// enum for a string; int or long for an int; a decimal, int or long for a decimal; int, long or a
// timestamp for epoch_ms; string for rfc3339; a union only of null and one type); any other type
// becomes a JSON value the field's JSON rules call wrong_type, so the JSON rules (decode.go) judge
// every record in the same field order as a JSON topic's. What only the bytes decide (too_large,
// bad_header, unknown_schema, bad_encoding) is decided before.

package oracle

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/linkedin/goavro/v2"
)

// AvroReader reads framed Avro records against the writer schemas of one registry.
type AvroReader struct {
	reg registry
	// schemas are the writer schemas by id: nil for an id the registry answered 404 for.
	schemas map[uint32]*writer
}

// writer is one writer schema: its codec and its types by full name (for references).
type writer struct {
	codec *goavro.Codec
	root  any
	named map[string]any
}

// NewAvroReader reads against the Confluent API at url (e.g. Apicurio's .../apis/ccompat/v7).
func NewAvroReader(url string) *AvroReader {
	return &AvroReader{reg: newRegistry(url), schemas: map[uint32]*writer{}}
}

// multiUnion marks a value no field type holds whatever its value: one of a union with more than
// one non-null type (which branch a record took would decide its rows), or of a logical type
// other than decimal and the timestamps.
type multiUnion struct{}

// FoldAvro folds Avro records as Fold folds JSON ones. An error is the registry's, not a record's.
func (s *Spec) FoldAvro(r *AvroReader, payloads [][]byte) (*Result, error) {
	return s.foldFramed(payloads, func(id uint32, body []byte) ([]byte, string, error) { return r.twin(s, id, body) })
}

// twin is the JSON twin of a record of schema id, or the verdict its bytes alone decide.
func (r *AvroReader) twin(s *Spec, id uint32, body []byte) ([]byte, string, error) {
	w, err := r.writer(id)
	if err != nil {
		return nil, "", err
	}
	if w == nil {
		return nil, "unknown_schema", nil
	}
	native, rest, err := w.codec.NativeFromBinary(body)
	if err != nil || len(rest) > 0 {
		return nil, "bad_encoding", nil
	}
	b, err := s.twinOf(w.plain(w.root, native))
	return b, "", err
}

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

// writer fetches (once) and parses the schema of id; nil for an id the registry does not know.
func (r *AvroReader) writer(id uint32) (*writer, error) {
	if w, ok := r.schemas[id]; ok {
		return w, nil
	}
	got, found, err := r.reg.schema(id)
	if err != nil {
		return nil, err
	}
	if !found {
		r.schemas[id] = nil
		return nil, nil
	}
	codec, err := goavro.NewCodec(got.Schema)
	if err != nil {
		return nil, fmt.Errorf("oracle: schema %d: %w", id, err)
	}
	w := &writer{codec: codec, named: map[string]any{}}
	if err := json.Unmarshal([]byte(got.Schema), &w.root); err != nil {
		return nil, fmt.Errorf("oracle: schema %d: %w", id, err)
	}
	w.name(w.root, "")
	r.schemas[id] = w
	return w, nil
}

// name records the named types under schema t (records, enums, fixed) by full and short name.
func (w *writer) name(t any, ns string) {
	switch t := t.(type) {
	case []any:
		for _, b := range t {
			w.name(b, ns)
		}
	case map[string]any:
		n, _ := t["name"].(string)
		if x, ok := t["namespace"].(string); ok {
			ns = x
		}
		if n != "" {
			w.named[n] = t
			if ns != "" && !strings.Contains(n, ".") {
				w.named[ns+"."+n] = t
			}
		}
		if fs, ok := t["fields"].([]any); ok {
			for _, f := range fs {
				if fm, ok := f.(map[string]any); ok {
					w.name(fm["type"], ns)
				}
			}
		}
	}
}

// resolve is schema t with a reference to a named type replaced by its definition.
func (w *writer) resolve(t any) any {
	if n, ok := t.(string); ok {
		if d, ok := w.named[n]; ok {
			return d
		}
	}
	return t
}

// plain is goavro's native value v of schema t as plain Go values: a record a map of its fields,
// a union of null and one type its value (nil for null), a union of several types multiUnion{},
// a decimal a *big.Rat, a timestamp a time.Time, ints int64, strings and enums string.
func (w *writer) plain(t any, v any) map[string]any {
	out, _ := w.value(t, v).(map[string]any)
	return out
}

func (w *writer) value(t any, v any) any {
	t = w.resolve(t)
	switch t := t.(type) {
	case []any: // a union: goavro gives nil or map[branch name]value
		if v == nil {
			return nil
		}
		nonNull := 0
		for _, b := range t {
			if b != "null" {
				nonNull++
			}
		}
		if nonNull > 1 {
			return multiUnion{}
		}
		for _, b := range t {
			if b == "null" {
				continue
			}
			for _, x := range v.(map[string]any) {
				return w.value(b, x)
			}
		}
		return nil
	case map[string]any:
		switch t["logicalType"] {
		case nil, "decimal", "timestamp-millis", "timestamp-micros":
		default:
			return multiUnion{} // date, time-millis, uuid ...: no field type holds them (wrong_type)
		}
		if t["type"] == "record" {
			m, ok := v.(map[string]any)
			if !ok {
				return v
			}
			out := map[string]any{}
			for _, f := range t["fields"].([]any) {
				fm := f.(map[string]any)
				name := fm["name"].(string)
				out[name] = w.value(fm["type"], m[name])
			}
			return out
		}
	}
	if x, ok := v.(int32); ok {
		return int64(x)
	}
	return v // also bytes, floats, arrays, maps: jsonOf writes them as no field type holds them
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
