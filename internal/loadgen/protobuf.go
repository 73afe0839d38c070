// Protobuf records (input.format protobuf): the generator's records written in Confluent's wire
// format (message indexes [0]) under a proto3 schema loadgen registers. Invariant: a Protobuf record
// carries exactly the values of the JSON record it is made from (its twin, which Totals folds with
// the spec's own decoder), so the totals of a Protobuf run are those of the same JSON run; a bad
// record's reason is the one its bytes alone decide, as for Avro (badFramer).

package loadgen

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/spec"
)

// protoWriter writes one spec's records as Protobuf under the schema it registered.
type protoWriter struct {
	plan *spec.Plan
	root *protoNode
	// headers are the wire format's header and the message indexes [0] of each writer schema
	// registered, the first loadgen's own (evolve adds the second); records take them in turn.
	headers [][]byte
	n       int
	reg     *format.Registry
	subject string
	bad     badFramer
}

// noteNumber is the field number of noteField in evolve's second schema.
const noteNumber = 1000

// protoNode is a message of the schema: its fields in order, numbered from 1; a field is a spec
// field (leaf) or a nested message (child) for a dotted path.
type protoNode struct {
	keys   []string
	leaves []*spec.InputField
	kids   []*protoNode
}

func (n *protoNode) child(k string) *protoNode {
	for i, key := range n.keys {
		if key == k && n.kids[i] != nil {
			return n.kids[i]
		}
	}
	c := &protoNode{}
	n.keys, n.leaves, n.kids = append(n.keys, k), append(n.leaves, nil), append(n.kids, c)
	return c
}

// protoTree is p's fields as messages: declaration order, the event time last.
func protoTree(p *spec.Plan) *protoNode {
	root := &protoNode{}
	for _, f := range p.InputFields() {
		n := root
		for _, k := range f.Path[:len(f.Path)-1] {
			n = n.child(k)
		}
		n.keys, n.leaves, n.kids = append(n.keys, f.Path[len(f.Path)-1]), append(n.leaves, &f), append(n.kids, nil)
	}
	return root
}

// ProtobufSchema is the proto3 schema loadgen writes p's records under: message relay.loadgen.Order
// of p's fields, a dotted path as nested messages (named after their path); a string is string, an
// int int64, a decimal google.type.Decimal (its exact text), an epoch_ms time
// google.protobuf.Timestamp, an rfc3339 time a string.
func ProtobufSchema(p *spec.Plan) (string, error) {
	var b strings.Builder
	b.WriteString("syntax = \"proto3\";\npackage relay.loadgen;\nimport \"google/protobuf/timestamp.proto\";\nimport \"google/type/decimal.proto\";\n\n")
	var write func(n *protoNode, name, indent string) error
	write = func(n *protoNode, name, indent string) error {
		fmt.Fprintf(&b, "%smessage %s {\n", indent, name)
		for i, k := range n.keys {
			var typ string
			if c := n.kids[i]; c != nil {
				typ = "M_" + k
				if err := write(c, typ, indent+"  "); err != nil {
					return err
				}
			} else {
				switch f := n.leaves[i]; f.Kind {
				case spec.KindString, spec.KindRFC3339:
					typ = "string"
				case spec.KindInt:
					typ = "int64"
				case spec.KindDecimal:
					typ = "google.type.Decimal"
				case spec.KindEpochMS:
					typ = "google.protobuf.Timestamp"
				default:
					return fmt.Errorf("loadgen: field %s: kind %s has no Protobuf type here", f.Name, f.Kind)
				}
			}
			fmt.Fprintf(&b, "%s  %s %s = %d;\n", indent, typ, k, i+1)
		}
		fmt.Fprintf(&b, "%s}\n", indent)
		return nil
	}
	err := write(protoTree(p), "Order", "")
	return b.String(), err
}

// newProtoWriter registers p's schema under the topic's subject (<topic>-value) and returns a
// writer of records under it.
func newProtoWriter(p *spec.Plan, reg *format.Registry, topic string) (*protoWriter, error) {
	text, err := ProtobufSchema(p)
	if err != nil {
		return nil, err
	}
	w := &protoWriter{plan: p, root: protoTree(p), reg: reg, subject: topic + "-value"}
	return w, w.register(text)
}

// register registers text under the writer's subject and adds it to the versions records take.
func (w *protoWriter) register(text string) error {
	id, err := w.reg.Client().Register(w.subject, schemaregistry.SchemaInfo{Schema: text, SchemaType: "PROTOBUF"}, false)
	if err != nil {
		return fmt.Errorf("loadgen: register the Protobuf schema under %s: %w", w.subject, err)
	}
	w.headers = append(w.headers, append(format.AppendHeader(nil, id), 0))
	return nil
}

// evolve registers a second writer schema, Order with noteField added, and writes every other
// record under it from now on.
func (w *protoWriter) evolve() error {
	text, err := ProtobufSchema(w.plan)
	if err != nil {
		return err
	}
	end := strings.LastIndex(text, "}")
	return w.register(fmt.Sprintf("%s  string %s = %d;\n}\n", text[:end], noteField, noteNumber))
}

// write turns the generator's record into what is produced: a good record's Protobuf encoding
// (its JSON twin kept to fold), a bad one's bytes with the reason they alone decide.
func (w *protoWriter) write(r pendingRec) (pendingRec, error) {
	if r.bad != nil {
		return w.bad.frame(w.plan, r, []byte{0}), nil
	}
	obj, err := jsonObject(r.payload)
	if err != nil {
		return r, err
	}
	i := w.n % len(w.headers)
	w.n++
	// Every eighth record's decimals in a form only decimal.proto's grammar allows (decimalProtoForm):
	// enough that every run folds them, few enough that a benchmark's records stay what producers
	// write (Java's BigDecimal, Go's decimal libraries write a JSON number's form).
	out, err := appendMessage(append([]byte(nil), w.headers[i]...), w.root, obj, w.n%8 == 5)
	if err != nil {
		return r, fmt.Errorf("loadgen: Protobuf encoding of %s: %w", r.payload, err)
	}
	if i > 0 {
		out = protowire.AppendString(protowire.AppendTag(out, noteNumber, protowire.BytesType), "v2")
	}
	return pendingRec{payload: out, twin: r.payload}, nil
}

// decimalProtoForm writes a decimal in a form decimal.proto's grammar allows and a JSON number's
// does not: an integer with a point and no digit after it ("12."), a fraction with no digit before
// the point (".5"), or else a '+' sign, chosen by the parity of the text's bytes among the forms
// it allows (and as it came for the other parity).
func decimalProtoForm(text string) string {
	h := 0
	for _, c := range []byte(text) {
		h += int(c)
	}
	unsigned := strings.TrimPrefix(text, "-")
	sign := text[:len(text)-len(unsigned)]
	switch {
	case h%2 == 0:
		return text
	case strings.Trim(unsigned, "0123456789") == "":
		return text + "."
	case strings.HasPrefix(unsigned, "0."):
		return sign + unsigned[1:]
	case sign == "":
		return "+" + text
	}
	return text
}

// appendMessage appends the fields of message n taken from JSON object obj.
func appendMessage(b []byte, n *protoNode, obj map[string]any, altDecimals bool) ([]byte, error) {
	for i, k := range n.keys {
		num := protowire.Number(i + 1)
		if c := n.kids[i]; c != nil {
			sub, _ := obj[k].(map[string]any)
			inner, err := appendMessage(nil, c, sub, altDecimals)
			if err != nil {
				return nil, err
			}
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), inner)
			continue
		}
		f, v := n.leaves[i], obj[k]
		text := fmt.Sprint(v) // a json.Number's or a string's text
		switch f.Kind {
		case spec.KindString, spec.KindRFC3339:
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%s: %v is not a string", f.Name, v)
			}
			b = protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
		case spec.KindInt:
			x, err := strconv.ParseInt(text, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), uint64(x))
		case spec.KindDecimal:
			if _, ok := new(big.Rat).SetString(text); !ok {
				return nil, fmt.Errorf("%s: %q is not a decimal", f.Name, text)
			}
			if altDecimals {
				text = decimalProtoForm(text)
			}
			inner := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), text)
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), inner)
		case spec.KindEpochMS:
			ms, err := strconv.ParseInt(text, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			// A Timestamp's nanos are never negative: the seconds floor.
			sec, rem := ms/1000, ms%1000
			if rem < 0 {
				sec, rem = sec-1, rem+1000
			}
			inner := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(sec))
			inner = protowire.AppendVarint(protowire.AppendTag(inner, 2, protowire.VarintType), uint64(rem*1_000_000))
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), inner)
		default:
			return nil, fmt.Errorf("%s: kind %s", f.Name, f.Kind)
		}
	}
	return b, nil
}
