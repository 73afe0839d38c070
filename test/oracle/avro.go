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
	"strings"

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
