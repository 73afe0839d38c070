// Package spec is the one declaration of a pipeline's shape: which fields a record has, and which
// aggregate tables (window, dimensions, measures, filter) it folds into. The decoder's field table,
// the primary-key codec, the per-epoch tables, the fold and the SQL all derive from a Plan compiled
// from a Spec, so they cannot disagree about the shape.
//
// Invariant: a Spec that Compile accepts can be decoded, folded and written; every refusal names the
// offending key by its YAML path under pipeline (pipeline.aggregates[1].window: ...).
package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/order"
)

// Spec is the pipeline block of the configuration.
type Spec struct {
	Input      Input       `yaml:"input"`
	Aggregates []Aggregate `yaml:"aggregates"`
	// builtin marks Default's spec, whose parts are named by the settings it is built from
	// (input.window, not pipeline.aggregates[0].window).
	builtin bool
}

// Input is what a record must hold. Every declared field is required: a record missing one is bad
// input whose reason names it.
type Input struct {
	// Format is how a record's value is encoded: FormatJSON (also when empty), FormatAvro or
	// FormatJSONSchema.
	Format    string    `yaml:"format"`
	Fields    Fields    `yaml:"fields"`
	EventTime EventTime `yaml:"event_time"`
	// Limits come from the input.* settings, not from the pipeline block.
	Limits Limits `yaml:"-"`
}

// Limits bound a record; outside them it is bad input, never clamped.
type Limits struct {
	MaxPayloadBytes int   // larger records are too_large
	MinTS, MaxTS    int64 // event time: inclusive min, exclusive max, epoch milliseconds
	MaxUnits        int64 // |decimal| in money units (10^-money.Scale) must be <= this
}

// Fields keeps declaration order, which is also the order fields are checked in.
type Fields []Field

// Field is one input field.
type Field struct {
	// Name is how dimensions, measures and filters refer to the field; in YAML it is the dotted
	// path (customer.region).
	Name string
	// Path is the keys from the top-level object down to the value. Parse splits Name at dots;
	// Default uses the configured key as one literal key, as input.*_field always did.
	Path []string
	// Type is string(N) (at most N bytes of UTF-8, non-empty), int (int64) or decimal(S) (S
	// fractional digits, 0..money.Scale).
	Type string
	// invalid and tooLong are the reasons of a string field that is not UTF-8 once unescaped or
	// longer than N; zero means the generic bad_text and too_long. Only Default sets them: today's
	// sku and order_id reasons are part of the contract.
	invalid, tooLong Reason
}

// EventTime names the field that places a record in a window.
type EventTime struct {
	Field  string   `yaml:"field"`
	Path   []string `yaml:"-"`      // as Field.Path
	Format string   `yaml:"format"` // epoch_ms (integer or digit string) or rfc3339
}

// Aggregate is one table of per-window totals.
type Aggregate struct {
	Table      string        `yaml:"table"`
	Window     time.Duration `yaml:"window"` // tumbling; whole seconds dividing a day
	Dimensions []Dimension   `yaml:"dimensions"`
	Measures   []Measure     `yaml:"measures"`
	Filter     *Filter       `yaml:"filter"`
}

// Dimension is one primary-key column after window_start.
type Dimension struct {
	Column string `yaml:"column"`
	Field  string `yaml:"field"` // a string or int field
}

// Measure is one accumulated column.
type Measure struct {
	Column string `yaml:"column"`
	Kind   string `yaml:"kind"`  // count, sum, min or max
	Field  string `yaml:"field"` // a decimal or int field; none for count
}

// Filter keeps the records whose field equals one of In; the others do not reach this aggregate
// (they are not bad input).
type Filter struct {
	Field string   `yaml:"field"`
	In    []string `yaml:"in"`
}

// Input formats. Avro, Protobuf and JSON Schema records come in a Schema Registry's wire format
// (internal/format).
const (
	FormatJSON       = "json"
	FormatAvro       = "avro"
	FormatProtobuf   = "protobuf"
	FormatJSONSchema = "json_schema"
)

// WindowColumn is the first primary-key column of every aggregate table.
const WindowColumn = "window_start"

// Parse reads a pipeline block (the YAML under pipeline:) and validates it. Unknown keys are errors.
func Parse(b []byte, l Limits) (*Plan, error) {
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	// An empty document is an empty spec, which Compile refuses by name.
	var se *Error
	if err := dec.Decode(&s); errors.As(err, &se) {
		return nil, err
	} else if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	return s.Compile(l)
}

// Compile validates a spec read from YAML (here or as the configuration's pipeline block): its
// dotted field names become paths and l its limits. s itself is not changed.
func (s Spec) Compile(l Limits) (*Plan, error) {
	s.Input.Limits = l
	s.Input.Fields = slices.Clone(s.Input.Fields)
	for i := range s.Input.Fields {
		s.Input.Fields[i].Path = strings.Split(s.Input.Fields[i].Name, ".")
	}
	s.Input.EventTime.Path = strings.Split(s.Input.EventTime.Field, ".")
	return Compile(s)
}

// UnmarshalYAML reads a mapping of dotted path to type, keeping its order.
func (f *Fields) UnmarshalYAML(n *yaml.Node) error {
	if err := checkNode("input.fields", n, fieldsType); err != nil {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		*f = append(*f, Field{Name: n.Content[i].Value, Type: n.Content[i+1].Value})
	}
	return nil
}

// MarshalYAML writes the mapping UnmarshalYAML reads, so a Config renders its pipeline block
// (relay config check).
func (f Fields) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, field := range f {
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: field.Name}, &yaml.Node{Kind: yaml.ScalarNode, Value: field.Type})
	}
	return n, nil
}

// Default is the shape relay had before specs, from the input.* settings: order_id, sku, amount and
// ts by their configured keys (each one literal top-level key), one aggregate table of
// (window_start, sku) with order_count and amount_sum. Its DDL and upserts are byte for byte the
// statements relay ran then (default_test.go), its reasons order's.
func Default(f order.Fields, l order.Limits, table string, window time.Duration) Spec {
	str := func(name string, max int, invalid, tooLong order.Reason) Field {
		return Field{Name: name, Path: []string{name}, Type: fmt.Sprintf("string(%d)", max),
			invalid: Reason(invalid), tooLong: Reason(tooLong)}
	}
	return Spec{
		builtin: true,
		Input: Input{
			Fields: Fields{
				str(f.OrderID, l.MaxOrderIDBytes, order.ReasonBadOrderID, order.ReasonOrderIDTooLong),
				str(f.SKU, l.MaxSKUBytes, order.ReasonBadSKU, order.ReasonSKUTooLong),
				{Name: f.Amount, Path: []string{f.Amount}, Type: "decimal(4)"},
			},
			EventTime: EventTime{Field: f.TS, Path: []string{f.TS}, Format: "epoch_ms"},
			Limits:    Limits{MaxPayloadBytes: l.MaxPayloadBytes, MinTS: l.MinTS, MaxTS: l.MaxTS, MaxUnits: l.MaxAmountUnits},
		},
		Aggregates: []Aggregate{{
			Table:      table,
			Window:     window,
			Dimensions: []Dimension{{Column: "sku", Field: f.SKU}},
			Measures:   []Measure{{Column: "order_count", Kind: "count"}, {Column: "amount_sum", Kind: "sum", Field: f.Amount}},
		}},
	}
}
