// Avro records in the registry's wire format, decoded with hamba/avro against their writer schema.
// Invariant: a field's value reaches the record only through spec.Plan's Set methods, and only from
// an Avro type that holds it exactly (string or enum for a string field; int or long for an int; a
// decimal logical type, int or long for a decimal; long, timestamp-millis or timestamp-micros for
// an epoch_ms event time; string for an rfc3339 one): a float or double is wrong_type, never
// rounded. A writer schema is parsed and resolved against the spec once per id, into a Go struct
// type of just the spec's fields that hamba decodes each record into (skipping the others), not
// per record.

package format

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/hamba/avro/v2"
	"github.com/modern-go/reflect2"

	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/spec"
)

// Avro decodes Avro records of one plan.
type Avro struct {
	p       *spec.Plan
	fields  []spec.InputField // declared fields, then the event time
	reg     *Registry
	r       *avro.Reader
	schemas resolved[*avroSchema]
}

// avroSchema is one writer schema resolved against the spec's fields, or why it cannot be.
type avroSchema struct {
	// into is a pointer to the struct each record is decoded into (reused: every field of it is
	// a writer field, so each record overwrites all of them), ptr the same pointer as hamba's
	// decoders and field take it; dec is hamba's decoder of the schema into that struct, looked
	// up once here rather than in hamba's cache per record (Reader.ReadVal's way).
	into   any
	ptr    unsafe.Pointer
	dec    avro.ValDecoder
	fields []avroField // by InputFields index
	// bad: the registry's schema is not an Avro record schema hamba reads; no record of it can be
	// decoded, and asking again would not change that.
	bad error
}

// avroField is how one spec field is read in records of a writer schema.
type avroField struct {
	// reason, when not OK, is every record's verdict on this field: missing_field where the
	// writer schema has no such field (an evolved schema that dropped it), wrong_type where its
	// type cannot hold the spec's (or a key of the path is not a record).
	reason spec.Reason
	found  string     // with wrong_type: the writer's type that cannot hold the field, for CheckSubject
	steps  []avroStep // struct fields from the root down to the value
	leaf   leafKind
	scale  int // decimal: the writer's scale
	size   int // fixed decimal: its bytes
}

// avroStep is one struct field on a path: its index and its offset in its struct; ptr marks a
// union with null, whose nil is missing_field.
type avroStep struct {
	index  int
	offset uintptr
	ptr    bool
}

// leafKind is how a value is read from its struct field.
type leafKind uint8

const (
	leafString       leafKind = iota // string or enum, as a string
	leafInt                          // int or long, as an int
	leafIntDecimal                   // int or long where the spec wants a decimal
	leafBytesDecimal                 // bytes decimal: the unscaled two's-complement integer
	leafFixedDecimal                 // fixed decimal: the same, in an array
	leafInstant                      // timestamp-millis or -micros, as a time.Time
	leafEpoch                        // int or long epoch milliseconds
	leafText                         // string holding an RFC 3339 time
)

var (
	stringType = reflect.TypeFor[string]()
	intType    = reflect.TypeFor[int]() // hamba reads an Avro long into an int on 64-bit platforms only
	bytesType  = reflect.TypeFor[[]byte]()
	timeType   = reflect.TypeFor[time.Time]()
)

// NewAvro returns an Avro decoder of p, fetching writer schemas from reg and keeping at most
// maxSchemas of them resolved (0 means 100).
func NewAvro(p *spec.Plan, reg *Registry, maxSchemas int) *Avro {
	return &Avro{p: p, fields: p.InputFields(), reg: reg, r: avro.NewReader(nil, 0),
		schemas: newResolved[*avroSchema](maxSchemas)}
}

// observe makes the decoder report to o (Observe).
func (a *Avro) observe(o Observer) { a.schemas.obs = o }

// Decode decodes one framed Avro record.
func (a *Avro) Decode(ctx context.Context, payload []byte, rec *spec.Record) (spec.Reason, string, error) {
	id, body, r := framed(a.p, payload)
	if r != spec.OK {
		return r, "", nil
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
	if !a.read(s, body) {
		return spec.ReasonBadEncoding, "", nil
	}
	a.p.Reset(rec)
	for i := range a.fields {
		if r := a.field(rec, i, s); r != spec.OK {
			return r, a.fields[i].Name, nil
		}
	}
	return spec.OK, "", nil
}

// read decodes body, all of it, under the writer schema into s's struct.
func (a *Avro) read(s *avroSchema, body []byte) (ok bool) {
	// hamba reports malformed input through Reader.Error; a panic on input it did not foresee
	// must not take the pipeline down either: it is the record's fault.
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	a.r.Error = nil
	a.r.Reset(body)
	s.dec.Decode(s.ptr, a.r)
	if a.r.Error != nil {
		return false
	}
	// Bytes left after the record are not part of it: Confluent's serializers never write them.
	a.r.Peek()
	return a.r.Error != nil
}

// field reads field i of the record decoded into s's struct and hands its value to the plan. The
// struct is read through the offsets resolve took from its reflect type, as hamba's decoders
// write it: each value has the Go type leafType gave its struct field.
func (a *Avro) field(rec *spec.Record, i int, s *avroSchema) spec.Reason {
	f := &s.fields[i]
	if f.reason != spec.OK {
		return f.reason
	}
	v := s.ptr
	for _, st := range f.steps {
		v = unsafe.Add(v, st.offset)
		if st.ptr {
			if v = *(*unsafe.Pointer)(v); v == nil {
				return spec.ReasonMissingField
			}
		}
	}
	switch f.leaf {
	case leafString:
		return a.p.SetString(rec, i, *(*string)(v))
	case leafInt:
		return a.p.SetInt(rec, i, int64(*(*int)(v)))
	case leafIntDecimal:
		return decimal(a.p, rec, i, int64(*(*int)(v)), 0)
	case leafBytesDecimal:
		return unscaled(a.p, rec, i, *(*[]byte)(v), f.scale)
	case leafFixedDecimal:
		return unscaled(a.p, rec, i, unsafe.Slice((*byte)(v), f.size), f.scale)
	case leafInstant:
		// UnixMilli floors (its nanoseconds are never negative): a window start only ever floors.
		return a.p.SetTime(rec, (*time.Time)(v).UnixMilli())
	case leafEpoch:
		return a.p.SetTime(rec, int64(*(*int)(v)))
	default: // leafText
		return a.p.SetTimeText(rec, []byte(*(*string)(v)))
	}
}

// pow10[i] is 10^i, up to the largest that fits an int64.
var pow10 = func() (p [19]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// unscaled sets p's decimal field i to the big-endian two's-complement integer b times 10^-scale
// (the Avro decimal encoding; Confluent's Protobuf decimal, whose scale a record carries, may be
// negative or huge).
func unscaled(p *spec.Plan, rec *spec.Record, i int, b []byte, scale int) spec.Reason {
	if len(b) > 8 {
		n := new(big.Int).SetBytes(b)
		if b[0]&0x80 != 0 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
		}
		return bigDecimal(p, rec, i, n, scale, len(b))
	}
	var n int64
	if len(b) > 0 && b[0]&0x80 != 0 {
		n = -1 // sign extension
	}
	for _, c := range b {
		n = n<<8 | int64(c)
	}
	return decimal(p, rec, i, n, scale)
}

// decimal sets p's decimal field i to n times 10^-scale, exactly: in int64 arithmetic when the units fit,
// else through big.Rat, whose verdict (amount_range, for a value this large) is the same.
func decimal(p *spec.Plan, rec *spec.Record, i int, n int64, scale int) spec.Reason {
	switch {
	case scale > money.Scale && scale-money.Scale < len(pow10):
		d := pow10[scale-money.Scale]
		if n%d != 0 {
			return spec.ReasonAmountPrecision
		}
		return p.SetUnits(rec, i, n/d)
	case scale <= money.Scale && money.Scale-scale < len(pow10):
		m := pow10[money.Scale-scale]
		if u := n * m; u/m == n {
			return p.SetUnits(rec, i, u)
		}
	}
	return bigDecimal(p, rec, i, big.NewInt(n), scale, 8)
}

// bigDecimal sets p's decimal field i to n times 10^-scale, n at most size bytes long. A scale so
// large or so negative that no amount could come of a non-zero n is decided without computing
// 10^scale (a record's scale must not cost a big power): past 3 digits a byte and 30 more, n's
// value is below 10^-30 (amount_precision: a non-zero digit below money.Scale); below -30, at
// least 10^30 (amount_range).
func bigDecimal(p *spec.Plan, rec *spec.Record, i int, n *big.Int, scale, size int) spec.Reason {
	switch {
	case n.Sign() == 0:
		return p.SetUnits(rec, i, 0)
	case scale > 3*size+30:
		return spec.ReasonAmountPrecision
	case scale < -30:
		return spec.ReasonAmountRange
	case scale < 0:
		return p.SetDecimal(rec, i, new(big.Rat).SetInt(new(big.Int).Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-scale)), nil))))
	}
	return p.SetDecimal(rec, i, new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
}

var errBadSchema = errors.New("not an Avro record schema")

// schema returns the resolved writer schema of id, fetching and resolving it on first use. A
// schema that cannot be resolved is kept too, with its error, so its records cost no new work.
func (a *Avro) schema(ctx context.Context, id int) (*avroSchema, error) {
	return a.schemas.of(ctx, a.reg, id, func(info schemaregistry.SchemaInfo) (*avroSchema, error) {
		parsed, err := parseAvro(ctx, a.reg, info)
		if noVerdict(ctx, err) {
			return nil, err
		}
		var s *avroSchema
		if err == nil {
			s, err = a.resolve(parsed)
		}
		if err != nil {
			s = &avroSchema{bad: fmt.Errorf("schema id %d: %w", id, err)}
		}
		return s, nil
	})
}

// parseAvro parses a registry's Avro schema after the schemas it references (fetched by subject
// and version, each before those that reference it), as Confluent's avrov2 serde does, into a
// cache of named types of its own: hamba's default cache is global, where a name one writer schema
// defines would stand for it in another that names it without defining it. The error wraps
// ErrUnavailable when a reference could not be fetched, else errBadSchema.
func parseAvro(ctx context.Context, reg *Registry, info schemaregistry.SchemaInfo) (avro.Schema, error) {
	if info.SchemaType != "" && info.SchemaType != "AVRO" {
		return nil, fmt.Errorf("%w: the registry says %s", errBadSchema, info.SchemaType)
	}
	cache := &avro.SchemaCache{}
	err := reg.references(ctx, info.References, map[string]bool{}, func(name string, m schemaregistry.SchemaMetadata) error {
		if _, err := avro.ParseWithCache(m.Schema, "", cache); err != nil {
			return fmt.Errorf("%w: %s version %d (referenced as %s): %w", errBadSchema, m.Subject, m.Version, name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	parsed, err := avro.ParseWithCache(info.Schema, "", cache)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadSchema, err)
	}
	return parsed, nil
}

// resolve builds the struct records of a writer schema are decoded into, and each spec field's
// way to its value in it.
func (a *Avro) resolve(schema avro.Schema) (*avroSchema, error) {
	root, ok := schema.(*avro.RecordSchema)
	if !ok {
		return nil, fmt.Errorf("%w: the top level is %s", errBadSchema, schema.Type())
	}
	s := &avroSchema{fields: make([]avroField, len(a.fields))}
	wants := make([]wanted, len(a.fields))
	for i, f := range a.fields {
		wants[i] = wanted{i, f.Path}
	}
	t := a.build(root, wants, nil, s.fields)
	into := reflect.New(t)
	s.into, s.ptr = into.Interface(), into.UnsafePointer()
	s.dec = avro.DefaultConfig.DecoderOf(schema, reflect2.TypeOf(s.into))
	for i := range s.fields {
		// The offsets of each field's steps, known now that the struct types are.
		typ := t
		for k := range s.fields[i].steps {
			st := &s.fields[i].steps[k]
			sf := typ.Field(st.index)
			st.offset, typ = sf.Offset, sf.Type
			if st.ptr {
				typ = typ.Elem()
			}
		}
	}
	return s, nil
}

// wanted is spec field i, keys the rest of its path below the record being built.
type wanted struct {
	i    int
	keys []string
}

// build is the struct type of record rec holding the fields wants reach through it, each found at
// the struct fields prefix leads to; it sets each field's way (or reason) in out. A key the record
// lacks is missing_field; a union other than null and one type, a path through a value that is
// not a record, or a leaf type that cannot hold the spec's is wrong_type.
func (a *Avro) build(rec *avro.RecordSchema, wants []wanted, prefix []avroStep, out []avroField) reflect.Type {
	var keys []string
	byKey := map[string][]wanted{}
	for _, w := range wants {
		if _, seen := byKey[w.keys[0]]; !seen {
			keys = append(keys, w.keys[0])
		}
		byKey[w.keys[0]] = append(byKey[w.keys[0]], w)
	}
	refuse := func(ws []wanted, r spec.Reason, found avro.Schema) {
		for _, w := range ws {
			out[w.i] = avroField{reason: r}
			if found != nil {
				out[w.i].found = describe(found)
			}
		}
	}
	var fields []reflect.StructField
	for _, key := range keys {
		var leaves, deeper []wanted
		for _, w := range byKey[key] {
			if len(w.keys) == 1 {
				leaves = append(leaves, w)
			} else {
				deeper = append(deeper, wanted{w.i, w.keys[1:]})
			}
		}
		var field *avro.Field
		for _, x := range rec.Fields() {
			if x.Name() == key {
				field = x
			}
		}
		if field == nil {
			refuse(leaves, spec.ReasonMissingField, nil)
			refuse(deeper, spec.ReasonMissingField, nil)
			continue
		}
		s, nullable, ok := unwrap(field.Type())
		if !ok {
			refuse(leaves, spec.ReasonWrongType, field.Type())
			refuse(deeper, spec.ReasonWrongType, field.Type())
			continue
		}
		step := avroStep{index: len(fields), ptr: nullable}
		path := append(append([]avroStep{}, prefix...), step)
		var typ reflect.Type
		if nested, isRecord := s.(*avro.RecordSchema); isRecord && len(deeper) > 0 {
			refuse(leaves, spec.ReasonWrongType, s) // a record is no field value
			typ = a.build(nested, deeper, path, out)
		} else {
			refuse(deeper, spec.ReasonWrongType, s)
			if len(leaves) == 0 {
				continue
			}
			// Field names are unique and the event time is none of them: one leaf per path.
			w := leaves[0]
			f := avroField{steps: path}
			if typ, f.leaf, f.scale, ok = a.leafType(w.i, s); !ok {
				refuse(leaves, spec.ReasonWrongType, s)
				continue
			}
			if f.leaf == leafFixedDecimal {
				f.size = typ.Len()
			}
			out[w.i] = f
		}
		if nullable {
			typ = reflect.PointerTo(typ)
		}
		fields = append(fields, reflect.StructField{Name: fmt.Sprintf("F%d", len(fields)), Type: typ,
			Tag: reflect.StructTag(fmt.Sprintf("avro:%q", key))})
	}
	return reflect.StructOf(fields)
}

// unwrap is a field's schema without a reference, and a union of null and one type as that type
// (nullable); ok is false for any other union.
func unwrap(s avro.Schema) (_ avro.Schema, nullable, ok bool) {
	if ref, isRef := s.(*avro.RefSchema); isRef {
		s = ref.Schema()
	}
	u, isUnion := s.(*avro.UnionSchema)
	if !isUnion {
		return s, false, true
	}
	// hamba's Nullable: exactly two types, one of them null.
	if !u.Nullable() {
		return nil, false, false
	}
	for _, b := range u.Types() {
		if b.Type() != avro.Null {
			if ref, isRef := b.(*avro.RefSchema); isRef {
				b = ref.Schema()
			}
			return b, true, true
		}
	}
	return nil, false, false
}

// leafType is the Go type hamba decodes writer type s into for spec field i, and how to read it;
// ok is false where s cannot hold the field's kind exactly.
func (a *Avro) leafType(i int, s avro.Schema) (_ reflect.Type, _ leafKind, scale int, ok bool) {
	typ, logical := s.Type(), logicalType(s)
	integer := logical == "" && (typ == avro.Int || typ == avro.Long)
	if dec, isDec := logicalSchema(s).(*avro.DecimalLogicalSchema); isDec {
		scale = dec.Scale()
	}
	switch kind := a.fields[i].Kind; {
	case kind == spec.KindString && logical == "" && (typ == avro.String || typ == avro.Enum):
		return stringType, leafString, 0, true
	case kind == spec.KindInt && integer:
		return intType, leafInt, 0, true
	case kind == spec.KindDecimal && integer:
		return intType, leafIntDecimal, 0, true
	case kind == spec.KindDecimal && logical == avro.Decimal && typ == avro.Bytes:
		return bytesType, leafBytesDecimal, scale, true
	case kind == spec.KindDecimal && logical == avro.Decimal && typ == avro.Fixed:
		return reflect.ArrayOf(s.(*avro.FixedSchema).Size(), reflect.TypeFor[byte]()), leafFixedDecimal, scale, true
	case kind == spec.KindEpochMS && integer:
		return intType, leafEpoch, 0, true
	case kind == spec.KindEpochMS && typ == avro.Long && (logical == avro.TimestampMillis || logical == avro.TimestampMicros):
		return timeType, leafInstant, 0, true
	case kind == spec.KindRFC3339 && typ == avro.String && logical == "":
		return stringType, leafText, 0, true
	}
	return nil, 0, 0, false
}

// logicalSchema is s's logical type schema, nil for none.
func logicalSchema(s avro.Schema) avro.LogicalSchema {
	if l, ok := s.(avro.LogicalTypeSchema); ok {
		return l.Logical()
	}
	return nil
}

// logicalType is s's logical type, "" for none.
func logicalType(s avro.Schema) avro.LogicalType {
	if l := logicalSchema(s); l != nil {
		return l.Type()
	}
	return ""
}

// describe names an Avro type as an operator would look for it in the schema: long,
// long (timestamp-millis), record shop.Customer, union of null, long and string.
func describe(s avro.Schema) string {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if u, ok := s.(*avro.UnionSchema); ok {
		var names []string
		for _, b := range u.Types() {
			names = append(names, describe(b))
		}
		return "union of " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
	d := string(s.Type())
	if n, ok := s.(avro.NamedSchema); ok {
		d += " " + n.FullName()
	}
	if l := logicalType(s); l != "" {
		d += " (" + string(l) + ")"
	}
	return d
}

// CheckSubject resolves the spec against every version registered under subject, as relay must at
// start (checkSubject).
func (a *Avro) CheckSubject(ctx context.Context, subject string) error {
	return checkSubject(ctx, a.reg, a.fields, subject, func(v schemaregistry.SchemaMetadata) ([]verdict, error) {
		parsed, err := parseAvro(ctx, a.reg, v.SchemaInfo)
		if err != nil {
			return nil, err
		}
		s, err := a.resolve(parsed)
		if err != nil {
			return nil, err
		}
		out := make([]verdict, len(s.fields))
		for i, f := range s.fields {
			out[i] = verdict{reason: f.reason, found: f.found}
		}
		return out, nil
	})
}
