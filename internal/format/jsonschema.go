// JSON records in the registry's wire format (input.format json_schema): the header Confluent's
// JSON Schema serializer writes (magic byte, schema id; no message indexes), then the JSON text.
// Invariant: after the header and the registry's answer for its id, a record is judged by the
// spec's own JSON decoder, so a json_schema record gets exactly the values and reasons the same
// JSON text gets on a json topic; the registered schema decides only whether the id is a JSON
// Schema (else bad_encoding) and, at start, whether the spec's fields can be read from it. No record
// is validated against its schema (neither does Confluent's deserializer by default).

package format

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"

	"github.com/relay-sh/relay/internal/spec"
)

// schemaTypeJSON is the registry's schemaType of a JSON Schema.
const schemaTypeJSON = "JSON"

// JSONSchema decodes JSON Schema records of one plan.
type JSONSchema struct {
	p      *spec.Plan
	d      *spec.Decoder
	fields []spec.InputField
	reg    *Registry
	// ids holds the verdict on each id seen: OK for a JSON Schema, bad_encoding for another type.
	ids resolved[spec.Reason]
}

// NewJSONSchema returns a JSON Schema decoder of p, asking reg about ids and remembering at most
// maxIDs of them (0 means 100).
func NewJSONSchema(p *spec.Plan, reg *Registry, maxIDs int) *JSONSchema {
	return &JSONSchema{p: p, d: p.NewDecoder(), fields: p.InputFields(), reg: reg, ids: newResolved[spec.Reason](maxIDs)}
}

// observe makes the decoder report to o (Observe).
func (j *JSONSchema) observe(o Observer) { j.ids.obs = o }

// Decode decodes one framed JSON record.
func (j *JSONSchema) Decode(ctx context.Context, payload []byte, rec *spec.Record) (spec.Reason, string, error) {
	id, text, r := framed(j.p, payload)
	if r != spec.OK {
		return r, "", nil
	}
	r, err := j.ids.of(ctx, j.reg, id, func(info schemaregistry.SchemaInfo) (spec.Reason, error) {
		if info.SchemaType != schemaTypeJSON {
			return spec.ReasonBadEncoding, nil // an Avro or Protobuf id: no JSON text follows its header
		}
		return spec.OK, nil
	})
	switch {
	case errors.Is(err, ErrUnknownSchema):
		return spec.ReasonUnknownSchema, "", nil
	case err != nil:
		return 0, "", err
	case r != spec.OK:
		return r, "", nil
	}
	r, field := j.d.Decode(text, rec)
	return r, field, nil
}

// CheckSubject resolves the spec against every JSON Schema registered under subject, as relay
// must at start: a field no version declares (by its dotted path through properties), or one a
// version gives a type that cannot hold it exactly, is refused, naming the spec's key. The
// error wraps ErrSpecUnreadable, ErrNoSubject, or ErrUnavailable (or ctx's error).
func (j *JSONSchema) CheckSubject(ctx context.Context, subject string) error {
	return checkSubject(ctx, j.reg, j.fields, subject, j.resolve)
}

// resolve is what writer schema v says of each spec field.
func (j *JSONSchema) resolve(v schemaregistry.SchemaMetadata) ([]verdict, error) {
	if v.SchemaType != schemaTypeJSON {
		return nil, fmt.Errorf("not a JSON Schema but %q", v.SchemaType)
	}
	var root any
	if err := json.Unmarshal([]byte(v.Schema), &root); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	doc := jsonDoc{root: root}
	out := make([]verdict, len(j.fields))
	for i, f := range j.fields {
		found, declared, err := doc.field(f)
		switch {
		case err != nil:
			out[i].err = err
		case found != "":
			out[i] = verdict{reason: spec.ReasonWrongType, found: found}
		case !declared:
			out[i].reason = spec.ReasonMissingField
		}
	}
	return out, nil
}

// jsonTypes are the JSON Schema types whose values the JSON path reads exactly into each kind:
// a string of digits is an int or an epoch_ms time there too, and a JSON number of any size or
// precision is read exactly as a decimal (never through a float).
var jsonTypes = map[string][]string{
	spec.KindString:  {"string"},
	spec.KindInt:     {"integer", "string"},
	spec.KindDecimal: {"integer", "number", "string"},
	spec.KindEpochMS: {"integer", "string"},
	spec.KindRFC3339: {"string"},
}

// maxRefs bounds the $refs followed to one schema: a cycle of references is no field's type.
const maxRefs = 32

// jsonDoc is one JSON Schema document, as encoding/json reads it.
type jsonDoc struct{ root any }

// node is one subschema with its references and a nullable oneOf/anyOf unwrapped: its non-null
// types (any: no type keyword, every value is allowed) and its properties.
type node struct {
	any   bool
	types []string
	props map[string]any
}

// field walks f's path through the document: declared says the document has the field (its keys
// in properties, or below a subschema that allows anything); found, when not "", is the type that
// cannot hold f's kind (or a path through a value that cannot be an object). err is a schema
// relay cannot follow (a $ref outside the document, a cycle).
func (d jsonDoc) field(f spec.InputField) (found string, declared bool, err error) {
	cur := d.root
	for i, key := range f.Path {
		n, err := d.unwrap(cur)
		switch {
		case err != nil:
			return "", false, err
		case n.any && n.props == nil:
			return "", true, nil // {} or true: anything, this field too
		case !n.any && !slices.Contains(n.types, "object"):
			return describeTypes(n.types), true, nil
		}
		next, ok := n.props[key]
		if !ok {
			return "", false, nil
		}
		if i < len(f.Path)-1 {
			cur = next
			continue
		}
		leaf, err := d.unwrap(next)
		if err != nil {
			return "", false, err
		}
		if leaf.any {
			return "", true, nil
		}
		for _, t := range leaf.types {
			if !slices.Contains(jsonTypes[f.Kind], t) {
				return describeTypes(leaf.types), true, nil
			}
		}
		if len(leaf.types) == 0 {
			return describeTypes(nil), true, nil // never a value: missing_field in every record
		}
		return "", true, nil
	}
	return "", false, nil
}

// unwrap reads subschema s: local $refs followed, a oneOf or anyOf of {"type": "null"} and one
// schema read as that schema (null is a missing field, as in any JSON record). Another oneOf or
// anyOf is reported as a type no field holds: which branch a record takes would decide its value.
func (d jsonDoc) unwrap(s any) (node, error) {
	for range maxRefs {
		switch v := s.(type) {
		case bool:
			return node{any: v, types: []string{}}, nil // true allows anything; false no value at all
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				target, err := d.pointer(ref)
				if err != nil {
					return node{}, err
				}
				s = target
				continue
			}
			if branches, kw := union(v); kw != "" {
				other := nullable(branches)
				if other == nil {
					return node{types: []string{fmt.Sprintf("%s of %d schemas", kw, len(branches))}}, nil
				}
				s = other
				continue
			}
			n := node{any: true}
			n.props, _ = v["properties"].(map[string]any)
			switch t := v["type"].(type) {
			case string:
				n.any, n.types = false, nonNull([]any{t})
			case []any:
				n.any, n.types = false, nonNull(t)
			}
			return n, nil
		default:
			return node{types: []string{fmt.Sprintf("schema %v", v)}}, nil
		}
	}
	return node{}, fmt.Errorf("more than %d $refs in a row (a cycle?)", maxRefs)
}

// union is s's oneOf or anyOf, and which of the two; kw is "" for neither.
func union(s map[string]any) (branches []any, kw string) {
	for _, k := range []string{"oneOf", "anyOf"} {
		if b, ok := s[k].([]any); ok {
			return b, k
		}
	}
	return nil, ""
}

// nullable is the one schema beside {"type": "null"} in branches, or nil.
func nullable(branches []any) any {
	if len(branches) != 2 {
		return nil
	}
	for i, b := range branches {
		if m, ok := b.(map[string]any); ok && m["type"] == "null" && len(m) == 1 {
			return branches[1-i]
		}
	}
	return nil
}

// nonNull is the type keyword's names without "null" (a nullable type's null is a missing field).
func nonNull(ts []any) []string {
	out := []string{}
	for _, t := range ts {
		if name, ok := t.(string); ok && name != "null" {
			out = append(out, name)
		}
	}
	return out
}

// describeTypes names the types as an operator would look for them in the schema.
func describeTypes(ts []string) string {
	if len(ts) == 0 {
		return "a schema that allows no value but null"
	}
	if len(ts) == 1 && strings.Contains(ts[0], " ") {
		return ts[0] // oneOf of 3 schemas
	}
	if len(ts) == 1 {
		return "type " + ts[0]
	}
	return "type " + strings.Join(ts, " or ")
}

// pointer resolves a local $ref (#, or a JSON pointer such as #/definitions/Customer or
// #/$defs/Customer) in the document.
func (d jsonDoc) pointer(ref string) (any, error) {
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q is not a reference inside the schema (#/...), which relay does not follow", ref)
	}
	cur := d.root
	for _, tok := range strings.Split(ref, "/")[1:] {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[tok]
			if !ok {
				return nil, fmt.Errorf("$ref %q: no %q in the schema", ref, tok)
			}
			cur = next
		case []any:
			k, err := strconv.Atoi(tok)
			if err != nil || k < 0 || k >= len(v) {
				return nil, fmt.Errorf("$ref %q: no item %q in the schema", ref, tok)
			}
			cur = v[k]
		default:
			return nil, fmt.Errorf("$ref %q: %q is below a value that is no schema", ref, tok)
		}
	}
	return cur, nil
}
