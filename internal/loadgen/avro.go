// Avro records (input.format avro): the generator's records written in Confluent's wire format
// under a schema loadgen registers. Invariant: an Avro record carries exactly the values of the
// JSON record it is made from (its twin, which Totals folds with the spec's own decoder), so the
// totals of an Avro run are those of the same JSON run; a bad record's reason is the one its bytes
// alone decide (too_large, bad_header, unknown_schema), never guessed from the twin.

package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/hamba/avro/v2"

	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/spec"
)

// UnknownSchemaID is the schema id of loadgen's unknown_schema records: the largest a registry
// could hand out, which none does in a test's lifetime.
const UnknownSchemaID = 1<<31 - 1

// avroWriter writes one spec's records as Avro under the schema it registered.
type avroWriter struct {
	plan   *spec.Plan
	fields []spec.InputField
	// versions are the writer schemas registered, the first loadgen's own (evolve adds the
	// second); records take them in turn.
	versions []avroVersion
	n        int
	reg      *format.Registry
	subject  string
	bad      badFramer
}

// avroVersion is one registered writer schema and the header of its records.
type avroVersion struct {
	schema avro.Schema
	header []byte
}

// noteField is the field evolve's second writer schema adds (with a default, as BACKWARD allows):
// no spec reads it, so records of either schema carry the same values.
const noteField = "loadgen_note"

// AvroSchema is the Avro schema loadgen writes p's records under: a record of p's fields in
// declaration order, the event time last, a dotted path as nested records (named after their
// path); a string is string, an int long, a decimal(S) a bytes decimal of scale S, an epoch_ms
// time a timestamp-millis long, an rfc3339 time a string.
func AvroSchema(p *spec.Plan) (string, error) {
	root := &avroNode{}
	for _, f := range p.InputFields() {
		var t any
		switch f.Kind {
		case spec.KindString, spec.KindRFC3339:
			t = "string"
		case spec.KindInt:
			t = "long"
		case spec.KindDecimal:
			t = map[string]any{"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": f.Scale}
		case spec.KindEpochMS:
			t = map[string]any{"type": "long", "logicalType": "timestamp-millis"}
		default:
			return "", fmt.Errorf("loadgen: field %s: kind %s has no Avro type here", f.Name, f.Kind)
		}
		n := root
		for _, k := range f.Path[:len(f.Path)-1] {
			n = n.child(k)
		}
		n.keys = append(n.keys, f.Path[len(f.Path)-1])
		n.types = append(n.types, t)
	}
	b, err := json.Marshal(root.schema("Order", nil))
	return string(b), err
}

// avroNode is a record of the schema: its fields' keys and types in order (a nested record's type
// is its *avroNode).
type avroNode struct {
	keys  []string
	types []any
}

func (n *avroNode) child(k string) *avroNode {
	for i, key := range n.keys {
		if c, ok := n.types[i].(*avroNode); ok && key == k {
			return c
		}
	}
	c := &avroNode{}
	n.keys = append(n.keys, k)
	n.types = append(n.types, c)
	return c
}

func (n *avroNode) schema(name string, path []string) map[string]any {
	fields := make([]map[string]any, len(n.keys))
	for i, k := range n.keys {
		t := n.types[i]
		if c, ok := t.(*avroNode); ok {
			sub := append(append([]string(nil), path...), k)
			t = c.schema("R_"+strings.Join(sub, "_"), sub)
		}
		fields[i] = map[string]any{"name": k, "type": t}
	}
	return map[string]any{"type": "record", "name": name, "namespace": "relay.loadgen", "fields": fields}
}

// newAvroWriter registers p's schema under the topic's subject (<topic>-value) and returns a
// writer of records under it.
func newAvroWriter(p *spec.Plan, reg *format.Registry, topic string) (*avroWriter, error) {
	text, err := AvroSchema(p)
	if err != nil {
		return nil, err
	}
	w := &avroWriter{plan: p, fields: p.InputFields(), reg: reg, subject: topic + "-value"}
	return w, w.register(text)
}

// register registers text under the writer's subject and adds it to the versions records take.
func (w *avroWriter) register(text string) error {
	schema, err := avro.Parse(text)
	if err != nil {
		return fmt.Errorf("loadgen: Avro schema: %w", err)
	}
	id, err := w.reg.Client().Register(w.subject, schemaregistry.SchemaInfo{Schema: text}, false)
	if err != nil {
		return fmt.Errorf("loadgen: register the Avro schema under %s: %w", w.subject, err)
	}
	w.versions = append(w.versions, avroVersion{schema, format.AppendHeader(nil, id)})
	return nil
}

// evolve registers a second writer schema, the first with noteField added, and writes every
// other record under it from now on.
func (w *avroWriter) evolve() error {
	text, err := AvroSchema(w.plan)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return err
	}
	doc["fields"] = append(doc["fields"].([]any), map[string]any{"name": noteField, "type": "string", "default": ""})
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return w.register(string(b))
}

// write turns the generator's record into what is produced: a good record's Avro encoding (its
// JSON twin kept to fold), a bad one's bytes with the reason they alone decide.
func (w *avroWriter) write(r pendingRec) (pendingRec, error) {
	if r.bad != nil {
		return w.bad.frame(w.plan, r, nil), nil
	}
	obj, err := jsonObject(r.payload)
	if err != nil {
		return r, err
	}
	rec := make(map[string]any, len(w.fields))
	for _, f := range w.fields {
		in, out := obj, rec
		for _, k := range f.Path[:len(f.Path)-1] {
			in, _ = in[k].(map[string]any)
			next, ok := out[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				out[k] = next
			}
			out = next
		}
		last := f.Path[len(f.Path)-1]
		v, err := avroValue(f, in[last])
		if err != nil {
			return r, fmt.Errorf("loadgen: %s of %s: %w", f.Name, r.payload, err)
		}
		out[last] = v
	}
	i := w.n % len(w.versions)
	w.n++
	if i > 0 {
		rec[noteField] = "v2"
	}
	v := w.versions[i]
	body, err := avro.Marshal(v.schema, rec)
	if err != nil {
		return r, fmt.Errorf("loadgen: Avro encoding of %s: %w", r.payload, err)
	}
	return pendingRec{payload: append(append([]byte(nil), v.header...), body...), twin: r.payload}, nil
}

// badFramer writes the generator's bad records for a registry format.
type badFramer struct {
	n int // bad records written: they alternate between bad_header and unknown_schema
}

// frame is bad record r as produced in a registry format, with the reason its bytes alone decide:
// too_large; its JSON as it is (bad_header: a producer misconfigured); or framed under an id no
// registry has (unknown_schema), after indexes (Protobuf's message-index list) when not nil.
func (b *badFramer) frame(p *spec.Plan, r pendingRec, indexes []byte) pendingRec {
	out := pendingRec{payload: r.payload, bad: r.bad}
	switch {
	case p.TooLarge(r.payload):
		out.verdict = spec.ReasonTooLarge.String()
	case b.n%2 == 0:
		out.verdict = spec.ReasonBadHeader.String()
	default:
		out.payload = append(append(format.AppendHeader(nil, UnknownSchemaID), indexes...), r.payload...)
		out.verdict = spec.ReasonUnknownSchema.String()
	}
	b.n++
	return out
}

// jsonObject is a generated good record's JSON object, its numbers as json.Number.
func jsonObject(payload []byte) (map[string]any, error) {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("loadgen: a generated record is no JSON object: %w", err)
	}
	return obj, nil
}

// avroValue is a JSON value of field f as the Avro schema's type holds it, exactly.
func avroValue(f spec.InputField, v any) (any, error) {
	text := fmt.Sprint(v) // a json.Number's or a string's text
	switch f.Kind {
	case spec.KindString, spec.KindRFC3339:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%v is not a string", v)
		}
		return s, nil
	case spec.KindInt:
		return strconv.ParseInt(text, 10, 64)
	case spec.KindDecimal:
		r, ok := new(big.Rat).SetString(text)
		if !ok {
			return nil, fmt.Errorf("%q is not a decimal", text)
		}
		// hamba writes a *big.Rat at the schema's scale; a value with more digits would lose them.
		if !new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(f.Scale)), nil))).IsInt() {
			return nil, fmt.Errorf("%s has more than %d fractional digits", text, f.Scale)
		}
		return r, nil
	case spec.KindEpochMS:
		ms, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, err
		}
		return time.UnixMilli(ms).UTC(), nil
	}
	return nil, fmt.Errorf("kind %s", f.Kind)
}
