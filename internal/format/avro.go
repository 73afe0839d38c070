// Avro records in the registry's wire format, decoded with hamba/avro against their writer schema.
// Invariant: a field's value reaches the record only through spec.Plan's Set methods, and only from
// an Avro type that holds it exactly (string or enum for a string field; int or long for an int; a
// decimal logical type, int or long for a decimal; long, timestamp-millis or timestamp-micros for
// an epoch_ms event time; string for an rfc3339 one): a float or double is wrong_type, never
// rounded. A writer schema is parsed and resolved against the spec once per id, not per record.

package format

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/relay-sh/relay/internal/spec"
)

// Avro decodes Avro records of one plan.
type Avro struct {
	p      *spec.Plan
	fields []spec.InputField // declared fields, then the event time
	reg    *Registry
	r      *avro.Reader
	// schemas holds the resolved writer schemas by id, at most maxSchemas of them (the registry
	// client keeps the raw ones): evicted in insertion order, as a stream's ids move forward.
	schemas    map[int]*avroSchema
	order      []int
	maxSchemas int
}

// avroSchema is one writer schema resolved against the spec's fields, or why it cannot be.
type avroSchema struct {
	schema avro.Schema
	fields []avroPath // by InputFields index
	// bad: the registry's schema is not an Avro record schema hamba reads; no record of it can be
	// decoded, and asking again would not change that.
	bad error
}

// avroPath is how one spec field is reached in records of a writer schema.
type avroPath struct {
	// reason, when not OK, is every record's verdict on this field: missing_field where the
	// writer schema has no such field (an evolved schema that dropped it), wrong_type where a key
	// of the path is not a record in it.
	reason spec.Reason
	steps  []avroStep
}

// avroStep is one key of a field's path: a record field, its schema, and for a union the branch
// schemas by the key hamba's generic decoding gives the branch's value under.
type avroStep struct {
	name     string
	schema   avro.Schema
	branches map[string]avro.Schema // nil unless schema is a union
}

// NewAvro returns an Avro decoder of p, fetching writer schemas from reg and keeping at most
// maxSchemas of them resolved (0 means 100).
func NewAvro(p *spec.Plan, reg *Registry, maxSchemas int) *Avro {
	if maxSchemas <= 0 {
		maxSchemas = 100
	}
	return &Avro{p: p, fields: p.InputFields(), reg: reg, r: avro.NewReader(nil, 0),
		schemas: map[int]*avroSchema{}, maxSchemas: maxSchemas}
}

// Decode decodes one framed Avro record.
func (a *Avro) Decode(ctx context.Context, payload []byte, rec *spec.Record) (spec.Reason, string, error) {
	if a.p.TooLarge(payload) {
		return spec.ReasonTooLarge, "", nil
	}
	id, body, err := parseHeader(payload)
	if err != nil {
		return spec.ReasonBadHeader, "", nil
	}
	s, err := a.schema(ctx, id)
	switch {
	case errors.Is(err, ErrUnknownSchema):
		return spec.ReasonUnknownSchema, "", nil
	case err != nil:
		return 0, "", err
	case s.bad != nil:
		return spec.ReasonBadEncoding, "", nil
	}
	root, ok := a.read(s.schema, body)
	if !ok {
		return spec.ReasonBadEncoding, "", nil
	}
	a.p.Reset(rec)
	for i := range a.fields {
		if r := a.field(rec, i, &s.fields[i], root); r != spec.OK {
			return r, a.fields[i].Name, nil
		}
	}
	return spec.OK, "", nil
}

// read decodes body, all of it, under the writer schema into hamba's generic form.
func (a *Avro) read(schema avro.Schema, body []byte) (root map[string]any, ok bool) {
	// hamba reports malformed input through Reader.Error; a panic on input it did not foresee
	// must not take the pipeline down either: it is the record's fault.
	defer func() {
		if recover() != nil {
			root, ok = nil, false
		}
	}()
	a.r.Error = nil
	a.r.Reset(body)
	a.r.ReadVal(schema, &root)
	if a.r.Error != nil {
		return nil, false
	}
	// Bytes left after the record are not part of it: Confluent's serializers never write them.
	a.r.Peek()
	return root, a.r.Error != nil
}

// field resolves field i in one record and hands its value to the plan.
func (a *Avro) field(rec *spec.Record, i int, path *avroPath, root map[string]any) spec.Reason {
	if path.reason != spec.OK {
		return path.reason
	}
	var v any = root
	var s avro.Schema
	for _, st := range path.steps {
		m, ok := v.(map[string]any)
		if !ok {
			return spec.ReasonWrongType
		}
		v, s = m[st.name], st.schema
		if st.branches != nil {
			// A union's value is a map of one entry, the branch's key to its value; null is none.
			u, _ := v.(map[string]any)
			if len(u) == 0 {
				return spec.ReasonMissingField
			}
			for k, x := range u {
				v, s = x, st.branches[k]
			}
			if s == nil {
				return spec.ReasonWrongType
			}
		}
	}
	return a.leaf(rec, i, s, v)
}

// leaf hands one value to the plan, by the spec's kind and the writer's type.
func (a *Avro) leaf(rec *spec.Record, i int, s avro.Schema, v any) spec.Reason {
	typ, logical := s.Type(), logicalType(s)
	last := i == len(a.fields)-1
	switch kind := a.fields[i].Kind; {
	case kind == spec.KindString && (typ == avro.String || typ == avro.Enum) && logical == "":
		str, ok := v.(string)
		if !ok {
			return spec.ReasonWrongType
		}
		return a.p.SetString(rec, i, str)
	case kind == spec.KindInt && logical == "" && (typ == avro.Int || typ == avro.Long):
		n, ok := integer(v)
		if !ok {
			return spec.ReasonWrongType
		}
		return a.p.SetInt(rec, i, n)
	case kind == spec.KindDecimal && logical == avro.Decimal:
		d, ok := v.(*big.Rat)
		if !ok {
			return spec.ReasonWrongType
		}
		return a.p.SetDecimal(rec, i, d)
	case kind == spec.KindDecimal && logical == "" && (typ == avro.Int || typ == avro.Long):
		n, ok := integer(v)
		if !ok {
			return spec.ReasonWrongType
		}
		return a.p.SetDecimal(rec, i, new(big.Rat).SetInt64(n))
	case last && kind == spec.KindEpochMS && logical == "" && (typ == avro.Int || typ == avro.Long):
		n, ok := integer(v)
		if !ok {
			return spec.ReasonWrongType
		}
		return a.p.SetTime(rec, n)
	case last && kind == spec.KindEpochMS && typ == avro.Long && (logical == avro.TimestampMillis || logical == avro.TimestampMicros):
		t, ok := v.(time.Time)
		if !ok {
			return spec.ReasonWrongType
		}
		// UnixMilli floors (its nanoseconds are never negative): a window start only ever floors.
		return a.p.SetTime(rec, t.UnixMilli())
	case last && kind == spec.KindRFC3339 && typ == avro.String && logical == "":
		str, ok := v.(string)
		if !ok {
			return spec.ReasonWrongType
		}
		return a.p.SetTimeText(rec, []byte(str))
	}
	return spec.ReasonWrongType
}

// integer is an Avro int (hamba's generic int) or long as an int64.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

// logicalType is s's logical type, "" for none.
func logicalType(s avro.Schema) avro.LogicalType {
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		return l.Logical().Type()
	}
	return ""
}

var errBadSchema = errors.New("not an Avro record schema")

// schema returns the resolved writer schema of id, fetching and resolving it on first use. A
// schema that cannot be resolved is kept too, with its error, so its records cost no new work.
func (a *Avro) schema(ctx context.Context, id int) (*avroSchema, error) {
	if s := a.schemas[id]; s != nil {
		return s, nil
	}
	info, err := a.reg.Schema(ctx, id)
	if err != nil {
		return nil, err
	}
	var s *avroSchema
	if info.SchemaType != "" && info.SchemaType != "AVRO" {
		s = &avroSchema{bad: fmt.Errorf("%w: schema id %d is %s", errBadSchema, id, info.SchemaType)}
	} else if parsed, err := avro.Parse(info.Schema); err != nil {
		s = &avroSchema{bad: fmt.Errorf("%w: schema id %d: %w", errBadSchema, id, err)}
	} else if s, err = a.resolve(parsed); err != nil {
		s = &avroSchema{bad: fmt.Errorf("schema id %d: %w", id, err)}
	}
	if len(a.order) >= a.maxSchemas {
		delete(a.schemas, a.order[0])
		a.order = a.order[1:]
	}
	a.schemas[id] = s
	a.order = append(a.order, id)
	return s, nil
}

// resolve finds each spec field's path in a writer schema: a path through a field the schema lacks
// is missing_field for every record of it, through a value that cannot be a record wrong_type. A
// union on the path may hold one record type (and null, and others that are not records): with
// two, the keys below it would have two meanings.
func (a *Avro) resolve(schema avro.Schema) (*avroSchema, error) {
	root, ok := schema.(*avro.RecordSchema)
	if !ok {
		return nil, fmt.Errorf("%w: the top level is %s", errBadSchema, schema.Type())
	}
	s := &avroSchema{schema: schema, fields: make([]avroPath, len(a.fields))}
	for i, f := range a.fields {
		rec := root
		for depth, key := range f.Path {
			if rec == nil {
				s.fields[i] = avroPath{reason: spec.ReasonWrongType}
				break
			}
			var field *avro.Field
			for _, x := range rec.Fields() {
				if x.Name() == key {
					field = x
				}
			}
			if field == nil {
				s.fields[i] = avroPath{reason: spec.ReasonMissingField}
				break
			}
			st := avroStep{name: key, schema: field.Type()}
			rec = nil
			switch t := st.schema.(type) {
			case *avro.RecordSchema:
				rec = t
			case *avro.RefSchema:
				rec, _ = t.Schema().(*avro.RecordSchema)
				st.schema = t.Schema()
			case *avro.UnionSchema:
				st.branches = map[string]avro.Schema{}
				for _, b := range t.Types() {
					if ref, ok := b.(*avro.RefSchema); ok {
						b = ref.Schema()
					}
					st.branches[branchKey(b)] = b
					if r, ok := b.(*avro.RecordSchema); ok {
						if rec != nil && depth < len(f.Path)-1 {
							return nil, fmt.Errorf("%w: %s: %s is a union of two record types", errBadSchema, f.Name, strings.Join(f.Path[:depth+1], "."))
						}
						rec = r
					}
				}
			}
			s.fields[i].steps = append(s.fields[i].steps, st)
		}
	}
	return s, nil
}

// branchKey is the key under which hamba's generic decoding gives a union branch's value: a named
// type's full name, else the type, with "." and the logical type if it has one.
func branchKey(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	if l := logicalType(s); l != "" {
		return string(s.Type()) + "." + string(l)
	}
	return string(s.Type())
}
