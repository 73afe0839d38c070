// Protobuf records in Confluent's wire format, read without any of relay's code: writer schemas
// (and the schemas they reference) fetched by plain HTTP from the registry and compiled with
// bufbuild/protocompile (the compiler relay uses too: the .proto language has one well-kept Go
// compiler, and what is checked here is the reading), each record decoded whole by proto.Unmarshal
// into a dynamicpb message (relay walks the wire with protowire and reads only the spec's fields),
// each spec field then judged by docs/FORMATS.md's rules with the oracle's own JSON code.
//
// Invariant: a Protobuf record becomes the JSON object its spec fields would be in a JSON topic
// (its twin) only where docs/FORMATS.md says the Protobuf type holds the field exactly (string or
// an open enum's name for a string; an integer kind for an int; an integer kind, a string,
// google.type.Decimal or confluent.type.Decimal for a decimal; an integer kind or a Timestamp for
// epoch_ms; a string for rfc3339; the google.protobuf wrappers of those); any other type becomes a
// JSON value the field's JSON rules call wrong_type. A field with presence that is absent is
// missing; one without holds its zero value. What only the bytes decide (too_large, bad_header,
// unknown_schema, bad_encoding) is decided before.

package oracle

import (
	"context"
	"fmt"
	"math/big"
	"regexp"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	// The files a schema imports without a reference, registered in protoregistry.GlobalFiles by
	// the packages Confluent's Protobuf serde imports to build them in.
	_ "github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/protobuf"
)

// ProtobufReader reads framed Protobuf records against the writer schemas of one registry.
type ProtobufReader struct {
	reg registry
	// files are the compiled writer schemas by id: nil for an id the registry answered 404 for.
	files map[uint32]protoreflect.FileDescriptor
}

// NewProtobufReader reads against the Confluent API at url.
func NewProtobufReader(url string) *ProtobufReader {
	return &ProtobufReader{reg: newRegistry(url), files: map[uint32]protoreflect.FileDescriptor{}}
}

// decimalText is a google.type.Decimal's value: decimal text a decimal field takes, and no other.
type decimalText string

// decimalProto is decimal.proto's grammar of a google.type.Decimal's value: a sign (+ or -),
// digits, a point and digits (the digits of one side may be left out, not of both), an exponent.
var decimalProto = regexp.MustCompile(`^([-+]?)(\d*)(\.(\d*))?([eE][-+]?\d+)?$`)

// asJSONNumber is a google.type.Decimal's text as a JSON number writes the same value ("+.5" is
// "0.5", "5." is "5"), or the text as it came when it is not in decimal.proto's grammar (no JSON
// number is, so the JSON rules refuse it as they refuse any text that is no number).
func asJSONNumber(s string) string {
	m := decimalProto.FindStringSubmatch(s)
	if m == nil || m[2] == "" && m[4] == "" {
		return s
	}
	sign, integer, fraction := strings.TrimPrefix(m[1], "+"), m[2], m[4]
	if integer == "" {
		integer = "0"
	}
	if fraction != "" {
		fraction = "." + fraction
	}
	return sign + integer + fraction + m[5]
}

// protoString is a Protobuf string: a string, an rfc3339 time, or a decimal's text.
type protoString string

// FoldProtobuf folds Protobuf records as Fold folds JSON ones. An error is the registry's.
func (s *Spec) FoldProtobuf(r *ProtobufReader, payloads [][]byte) (*Result, error) {
	return s.foldFramed(payloads, func(id uint32, body []byte) ([]byte, string, error) { return r.twin(s, id, body) })
}

// twin is the JSON twin of a record of schema id (body: the message indexes, then the message),
// or the verdict its bytes alone decide.
func (r *ProtobufReader) twin(s *Spec, id uint32, b []byte) ([]byte, string, error) {
	// The message-index list: a zigzag count (0 alone means [0]), then the zigzag indexes.
	count, n := protowire.ConsumeVarint(b)
	if c := protowire.DecodeZigZag(count); n < 0 || c < 0 || c > 100 {
		return nil, "bad_header", nil
	}
	b = b[n:]
	indexes := []int64{0}
	if c := protowire.DecodeZigZag(count); c > 0 {
		indexes = indexes[:0]
		for range c {
			v, n := protowire.ConsumeVarint(b)
			if i := protowire.DecodeZigZag(v); n < 0 || i < 0 || i > 1<<31-1 {
				return nil, "bad_header", nil
			}
			indexes = append(indexes, protowire.DecodeZigZag(v))
			b = b[n:]
		}
	}
	file, err := r.file(id)
	if err != nil {
		return nil, "", err
	}
	if file == nil {
		return nil, "unknown_schema", nil
	}
	var md protoreflect.MessageDescriptor
	msgs := file.Messages()
	for _, i := range indexes {
		if int(i) >= msgs.Len() {
			return nil, "bad_encoding", nil
		}
		md = msgs.Get(int(i))
		msgs = md.Messages()
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, "bad_encoding", nil
	}
	out, err := s.twinOf(plainMessage(m))
	return out, "", err
}

// plainMessage is m as place reads a record: each field by name; one with presence that is not
// set as absentField (missing, or wrong_type where its type could never hold the field); a
// message as a map, a well-known one as the value it holds (and its fields, for a path through it).
func plainMessage(m protoreflect.Message) map[string]any {
	out := map[string]any{}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.HasPresence() && !m.Has(fd) {
			out[string(fd.Name())] = absentField{fd}
			continue
		}
		out[string(fd.Name())] = plainValue(fd, m.Get(fd))
	}
	return out
}

// absentField is a field with presence that the record does not set.
type absentField struct{ fd protoreflect.FieldDescriptor }

// enumName is an open enum's value name: a string field takes it, nothing else.
type enumName string

// epochMillis is a Timestamp's seconds × 1000 + ⌊nanos / 10^6⌋, exactly (it may be past int64).
type epochMillis struct{ ms *big.Int }

// unscaledDecimal is confluent.type.Decimal's n × 10^-scale.
type unscaledDecimal struct {
	n     *big.Int
	scale int64
}

// wellKnown is a well-known message: the value a field of it is (value), and its fields (fields),
// which a path may lead through.
type wellKnown struct {
	value  any
	fields map[string]any
}

// plainValue is one field's value as jsonOf takes it.
func plainValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	if fd.IsList() || fd.IsMap() {
		return multiUnion{}
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoString(v.String())
	case protoreflect.EnumKind:
		ev := fd.Enum().Values().ByNumber(v.Enum())
		if ev == nil || fd.Enum().IsClosed() {
			return multiUnion{}
		}
		return enumName(ev.Name())
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		return v.Int()
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return v.Uint()
	case protoreflect.MessageKind:
		m := v.Message()
		fields := plainMessage(m)
		if value, ok := wellKnownValue(m); ok {
			return wellKnown{value, fields}
		}
		return fields
	}
	return multiUnion{} // bool, bytes, float, double, group
}

// wrappers are the google.protobuf wrapper messages of a string or an integer, whose value field
// a field of them is.
var wrappers = map[protoreflect.FullName]bool{"google.protobuf.StringValue": true, "google.protobuf.Int64Value": true,
	"google.protobuf.UInt64Value": true, "google.protobuf.Int32Value": true, "google.protobuf.UInt32Value": true}

// wellKnownValue is the value a well-known message holds: a Timestamp's instant, a decimal, what a
// wrapper wraps; ok is false for any other message.
func wellKnownValue(m protoreflect.Message) (any, bool) {
	get := func(name protoreflect.Name) protoreflect.Value { return m.Get(m.Descriptor().Fields().ByName(name)) }
	switch name := m.Descriptor().FullName(); {
	case name == "google.protobuf.Timestamp":
		ms := new(big.Int).Mul(big.NewInt(get("seconds").Int()), big.NewInt(1000))
		return epochMillis{ms.Add(ms, new(big.Int).Div(big.NewInt(get("nanos").Int()), big.NewInt(1e6)))}, true
	case name == "google.type.Decimal":
		return decimalText(asJSONNumber(get("value").String())), true
	case name == "confluent.type.Decimal":
		b := get("value").Bytes()
		n := new(big.Int).SetBytes(b)
		if len(b) > 0 && b[0]&0x80 != 0 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
		}
		return unscaledDecimal{n, get("scale").Int()}, true
	case wrappers[name]:
		fd := m.Descriptor().Fields().ByName("value")
		return plainValue(fd, m.Get(fd)), true
	}
	return nil, false
}

// holds says whether a field of fd's type could hold spec field type typ (docs/FORMATS.md's
// Protobuf table): an absent field whose type could not is wrong_type, not missing.
func holds(typ string, fd protoreflect.FieldDescriptor) bool {
	if fd.IsList() || fd.IsMap() {
		return false
	}
	integer := false
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind, protoreflect.Sfixed32Kind,
		protoreflect.Sfixed64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		integer = true
	case protoreflect.StringKind:
		return typ == "string" || typ == "decimal" || typ == "rfc3339"
	case protoreflect.EnumKind:
		return typ == "string" && !fd.Enum().IsClosed()
	case protoreflect.MessageKind:
		switch name := fd.Message().FullName(); {
		case name == "google.protobuf.Timestamp":
			return typ == "epoch_ms"
		case name == "google.type.Decimal" || name == "confluent.type.Decimal":
			return typ == "decimal"
		case wrappers[name]:
			return holds(typ, fd.Message().Fields().ByName("value"))
		}
		return false
	}
	return integer && (typ == "int" || typ == "decimal" || typ == "epoch_ms")
}

// file fetches (once) and compiles the schema of id; nil for an id the registry does not know
// (or one that is not Protobuf: its records are bad_encoding, which a nil file is not, so those
// get a file with no message).
func (r *ProtobufReader) file(id uint32) (protoreflect.FileDescriptor, error) {
	if f, ok := r.files[id]; ok {
		return f, nil
	}
	got, found, err := r.reg.schema(id)
	if err != nil {
		return nil, err // the registry's failure: asked again next time
	}
	if !found {
		r.files[id] = nil
		return nil, nil
	}
	const name = "oracle/writer.proto"
	sources := map[string]string{name: got.Schema}
	if got.SchemaType != "PROTOBUF" {
		sources[name] = `syntax = "proto3";` // not Protobuf: no message, every record bad_encoding
	}
	if err := r.references(got, sources); err != nil {
		return nil, err
	}
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(protocompile.CompositeResolver{
		&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(sources)}, protocompile.ResolverFunc(builtinImport)})}
	files, err := c.Compile(context.Background(), name)
	if err != nil {
		return nil, fmt.Errorf("oracle: schema %d does not compile: %w", id, err)
	}
	r.files[id] = files[0]
	return r.files[id], nil
}

// references adds the text of every schema s references, under the name it is imported by.
func (r *ProtobufReader) references(s registered, sources map[string]string) error {
	for _, ref := range s.References {
		if _, ok := sources[ref.Name]; ok {
			continue
		}
		got, found, err := r.reg.version(ref.Subject, ref.Version)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("oracle: reference %s (%s version %d) not found", ref.Name, ref.Subject, ref.Version)
		}
		sources[ref.Name] = got.Schema
		if err := r.references(got, sources); err != nil {
			return err
		}
	}
	return nil
}

// builtinImport is a file a schema imports without a reference, from the Go package that
// generated it (Confluent's decimal is generated as confluent/types/, imported as confluent/type/).
func builtinImport(path string) (protocompile.SearchResult, error) {
	fd, err := protoregistry.GlobalFiles.FindFileByPath(strings.Replace(path, "confluent/type/", "confluent/types/", 1))
	if err != nil {
		return protocompile.SearchResult{}, err
	}
	p := protodesc.ToFileDescriptorProto(fd)
	p.Name = &path
	return protocompile.SearchResult{Proto: p}, nil
}

// unscaledText is d's value as JSON number text, n and an exponent (the JSON rules read a
// number's exponent exactly, however large).
func unscaledText(d unscaledDecimal) string {
	return fmt.Sprintf("%se%d", d.n, -d.scale)
}
