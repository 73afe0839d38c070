// JSON Schema records in Confluent's wire format, read without any of relay's code: the header
// parsed by registry.go, the id looked up by plain HTTP, the JSON text after it judged and folded
// by the oracle's own JSON rules (decode.go, fold.go).
//
// Invariant: a framed record whose id the registry has as a JSON Schema is judged exactly as its
// JSON text would be on a JSON topic (the schema itself judges nothing: relay validates no record
// against it); what only the bytes or the registry decide comes first, in relay's order:
// too_large (the whole value), bad_header, unknown_schema (the registry answers 404), bad_encoding
// (an id of another schema type).

package oracle

// JSONSchemaReader reads framed JSON records against the schema ids of one registry.
type JSONSchemaReader struct {
	reg registry
	// types are the registry's schema types by id: "" for an id it answered 404 for.
	types map[uint32]string
}

// NewJSONSchemaReader reads against the Confluent API at url (e.g. Apicurio's .../apis/ccompat/v7).
func NewJSONSchemaReader(url string) *JSONSchemaReader {
	return &JSONSchemaReader{reg: newRegistry(url), types: map[uint32]string{}}
}

// FoldJSONSchema folds JSON Schema records as Fold folds JSON ones. An error is the registry's,
// not a record's.
func (s *Spec) FoldJSONSchema(r *JSONSchemaReader, payloads [][]byte) (*Result, error) {
	return s.foldFramed(payloads, r.text)
}

// text is the JSON text of a record of schema id, or the verdict the registry's answer decides.
func (r *JSONSchemaReader) text(id uint32, body []byte) ([]byte, string, error) {
	typ, seen := r.types[id]
	if !seen {
		got, found, err := r.reg.schema(id)
		if err != nil {
			return nil, "", err
		}
		if found {
			typ = got.SchemaType
			if typ == "" {
				typ = "AVRO" // the Confluent API leaves out Avro's type
			}
		}
		r.types[id] = typ
	}
	switch typ {
	case "":
		return nil, "unknown_schema", nil
	case "JSON":
		return body, "", nil
	}
	return nil, "bad_encoding", nil
}
