// JSON Schema records (input.format json_schema): the generator's JSON records framed in
// Confluent's wire format under a JSON Schema loadgen registers. Invariant: a good record's bytes
// after the header are exactly the JSON record the json format would write (its twin, which
// Totals folds), so the totals of a json_schema run are those of the same JSON run; a bad record's
// reason is the one its bytes alone decide (too_large, bad_header, unknown_schema) or, framed
// under the registered id, the one the spec's JSON decoder gives its text.

package loadgen

import (
	"encoding/json"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"

	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/spec"
)

// jsonSchemaWriter frames one spec's records under the JSON Schema it registered.
type jsonSchemaWriter struct {
	plan *spec.Plan
	// headers are the wire format's header of each schema registered, the first loadgen's own
	// (evolve adds the second); good records take them in turn.
	headers [][]byte
	n       int
	reg     *format.Registry
	subject string
	// bad records written: they rotate through bad_header (the JSON unframed), unknown_schema
	// (framed under UnknownSchemaID) and the generator's own bad JSON framed under the real id.
	bad int
}

// JSONSchema is the draft-07 JSON Schema loadgen writes p's records under: an object of p's
// fields, a dotted path as nested objects; a string or rfc3339 time is a string, an int or epoch_ms
// time an integer, a decimal a number or a string (the generator writes decimals as strings, which
// relay reads exactly, as JSON producers that keep every digit do).
func JSONSchema(p *spec.Plan) (string, error) {
	root := schemaObject()
	for _, f := range p.InputFields() {
		var t any
		switch f.Kind {
		case spec.KindString, spec.KindRFC3339:
			t = "string"
		case spec.KindInt, spec.KindEpochMS:
			t = "integer"
		case spec.KindDecimal:
			t = []string{"number", "string"}
		default:
			return "", fmt.Errorf("loadgen: field %s: kind %s has no JSON Schema type here", f.Name, f.Kind)
		}
		props := root["properties"].(map[string]any)
		for _, k := range f.Path[:len(f.Path)-1] {
			child, ok := props[k].(map[string]any)
			if !ok {
				child = schemaObject()
				props[k] = child
			}
			if props, ok = child["properties"].(map[string]any); !ok {
				return "", fmt.Errorf("loadgen: field %s: %s is another field's value", f.Name, k)
			}
		}
		props[f.Path[len(f.Path)-1]] = map[string]any{"type": t}
	}
	root["$schema"], root["title"] = "http://json-schema.org/draft-07/schema#", "Order"
	b, err := json.Marshal(root) // map keys sorted: the same spec, the same text (and schema id)
	return string(b), err
}

func schemaObject() map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{}}
}

// newJSONSchemaWriter registers p's JSON Schema under the topic's subject (<topic>-value) and
// returns a writer of records under it.
func newJSONSchemaWriter(p *spec.Plan, reg *format.Registry, topic string) (*jsonSchemaWriter, error) {
	text, err := JSONSchema(p)
	if err != nil {
		return nil, err
	}
	w := &jsonSchemaWriter{plan: p, reg: reg, subject: topic + "-value"}
	return w, w.register(text)
}

// register registers text under the writer's subject and adds it to the versions records take.
func (w *jsonSchemaWriter) register(text string) error {
	id, err := w.reg.Client().Register(w.subject, schemaregistry.SchemaInfo{Schema: text, SchemaType: "JSON"}, false)
	if err != nil {
		return fmt.Errorf("loadgen: register the JSON Schema under %s: %w", w.subject, err)
	}
	w.headers = append(w.headers, format.AppendHeader(nil, id))
	return nil
}

// evolve registers a second writer schema, the first with another description, and frames every
// other good record under it from now on (the record is the same).
func (w *jsonSchemaWriter) evolve() error {
	text, err := JSONSchema(w.plan)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return err
	}
	// Under BACKWARD an open content model takes no new property (a new constraint narrows what
	// the old schema allowed): the second version differs in its description only.
	doc["description"] = "relay loadgen, second writer version (" + noteField + ")"
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return w.register(string(b))
}

// write frames the generator's record: a good one under the registered id (its JSON the twin to
// fold), a bad one as the rotation says.
func (w *jsonSchemaWriter) write(r pendingRec) (pendingRec, error) {
	header := w.headers[w.n%len(w.headers)]
	w.n++
	out := pendingRec{payload: append(append([]byte(nil), header...), r.payload...), twin: r.payload}
	if r.bad != nil {
		switch w.bad % 3 {
		case 0:
			out.payload, out.twin, out.verdict = r.payload, nil, spec.ReasonBadHeader.String() // a producer without the registry
		case 1:
			out.payload, out.twin = append(format.AppendHeader(nil, UnknownSchemaID), r.payload...), nil
			out.verdict = spec.ReasonUnknownSchema.String()
		default:
			out.bad = &Bad{Reason: r.bad.Reason, Payload: string(out.payload)} // the decoder judges the text
		}
		w.bad++
	}
	if w.plan.TooLarge(out.payload) {
		out.twin, out.verdict = nil, spec.ReasonTooLarge.String()
	}
	return out, nil
}
