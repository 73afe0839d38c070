// The plan's input as data, for tools that make records of it (loadgen). Invariant: a record that
// gives every InputField a value of its Kind within its bounds, at its Path, decodes OK (given the
// event time within the limits): the description is read off the same fields the decoder checks.

package spec

import (
	"slices"
	"strconv"
)

// Kinds of an InputField.
const (
	KindString  = "string"
	KindInt     = "int"
	KindDecimal = "decimal"
	KindEpochMS = "epoch_ms"
	KindRFC3339 = "rfc3339"
)

// InputField describes one field a record of the plan must hold.
type InputField struct {
	Name  string
	Key   string   // the YAML key that declares it, as refusals name it (pipeline.input.fields.price, input.amount_field)
	Path  []string // the keys from the top-level object down to the value
	Kind  string   // KindString, KindInt, KindDecimal, or for the event time KindEpochMS / KindRFC3339
	Max   int      // string: at most this many bytes, at least one
	Scale int      // decimal: at most this many fractional digits
	// Grouped says some aggregate has the field as a dimension; Filter is the union, in spec order,
	// of the values aggregates' filters on it keep (as YAML wrote them).
	Grouped bool
	Filter  []string
}

// InputFields lists the declared fields in declaration order, then the event time.
func (p *Plan) InputFields() []InputField {
	out := make([]InputField, len(p.fields))
	for i, f := range p.fields {
		out[i] = InputField{Name: f.name, Key: p.names().fieldKey(i), Path: f.path, Max: f.max, Scale: f.scale}
		out[i].Kind = [...]string{typeString: KindString, typeInt: KindInt, typeDecimal: KindDecimal,
			typeEpochMS: KindEpochMS, typeRFC3339: KindRFC3339}[f.typ]
	}
	for _, ag := range p.aggs {
		for _, d := range ag.dims {
			out[d.field].Grouped = true
		}
		if f := ag.filter; f != nil {
			in := &out[f.field]
			vals := slices.Clone(f.strs)
			for _, n := range f.ints {
				vals = append(vals, strconv.FormatInt(n, 10))
			}
			for _, v := range vals {
				if !slices.Contains(in.Filter, v) {
					in.Filter = append(in.Filter, v)
				}
			}
		}
	}
	return out
}
