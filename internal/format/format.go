// Package format turns a Kafka record's value into a spec.Record, one implementation per input
// format: JSON (the spec's own decoder), and Avro, Protobuf and JSON Schema in a Schema Registry's
// wire format (docs/FORMATS.md).
//
// Invariant: every format fills a record with the same values and the same reasons the JSON path
// gives the same fields (spec.Plan's Set methods hold them to one set of rules), so the fold, the
// sink and the dead-letter table do not know which format a record came in; and a record whose
// verdict depends on a registry that could not be reached gets an error, never a reason: a good
// record is never dead-lettered because the registry was down.
package format

import (
	"context"
	"fmt"

	"github.com/relay-sh/relay/internal/spec"
)

// Decoder decodes records of one plan in one format. Not safe for concurrent use; use one per
// goroutine.
type Decoder interface {
	// Decode fills rec from payload and returns spec.OK, or the first reason the record is bad
	// input and the field it is about ("" for the record as a whole). A non-nil error means the
	// record could not be judged (the registry is unreachable or failing): it is not bad input, and
	// the caller decodes it again later. On anything but OK with a nil error, rec is unspecified.
	Decode(ctx context.Context, payload []byte, rec *spec.Record) (spec.Reason, string, error)
}

// New returns the decoder of p's input format: JSON, or Avro, Protobuf or JSON Schema with writer
// schemas from reg (which JSON asks nothing of: nil will do).
func New(p *spec.Plan, reg *Registry) (Decoder, error) {
	f := p.InputFormat()
	if f != spec.FormatJSON && reg == nil {
		return nil, fmt.Errorf("input format %s needs a schema registry", f)
	}
	switch f {
	case spec.FormatJSON:
		return NewJSON(p), nil
	case spec.FormatAvro:
		return NewAvro(p, reg, 0), nil
	case spec.FormatProtobuf:
		return NewProtobuf(p, reg, 0), nil
	case spec.FormatJSONSchema:
		return NewJSONSchema(p, reg, 0), nil
	default:
		return nil, fmt.Errorf("input format %s is not read", f)
	}
}

// JSON is the format relay always read: one JSON object per record, decoded by the spec's own
// scanner, with no registry.
type JSON struct{ d *spec.Decoder }

// NewJSON returns the JSON decoder of p.
func NewJSON(p *spec.Plan) *JSON { return &JSON{d: p.NewDecoder()} }

// Decode decodes one JSON record; it never returns an error.
func (j *JSON) Decode(_ context.Context, payload []byte, rec *spec.Record) (spec.Reason, string, error) {
	r, f := j.d.Decode(payload, rec)
	return r, f, nil
}
