// Package oracle is a reference implementation of relay's pipeline, written apart from it, for
// tests to hold relay to: records decoded with encoding/json into plain Go values, decimals exact
// in math/big, times parsed and floored with the time package, and a plain map fold. It imports
// none of relay's packages (order, spec, money, sink or anything that does), so a bug in relay's
// scanner, decimal parser, key codec or fold cannot hide in the answer it is checked against.
//
// Invariant: for a spec relay accepts and the same limits, Fold gives the rows relay's tables
// must hold (as MySQL prints them, in primary-key order) and the bad records with relay's reason
// names, following docs/PIPELINES.md and encoding/json's semantics (a repeated member: the last
// one wins; keys compare exactly). Where relay is stricter than encoding/json on purpose (invalid
// UTF-8, lone surrogate escapes, RFC 3339 offsets), this package says so where it checks it.
//
// Use: s := Default() (or Parse of the pipeline YAML relay ran; set s.Limits if relay's input.*
// limits are not the defaults); res := s.Fold(payloads), the record values in any order (only
// Bad's indexes depend on it); then read each table with SELECT CAST(c AS CHAR) of res.Table(name).
// Columns, ORDER BY window_start and the dimensions, and compare with its Rows; res.Bad are the
// records relay_dlq must hold, with their reasons.
package oracle

import (
	"bytes"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Limits bound a record, as relay's input.* settings do.
type Limits struct {
	MaxPayloadBytes int
	// MinEventTime is inclusive, MaxEventTime exclusive (input.min_event_time, max_event_time).
	MinEventTime, MaxEventTime time.Time
	// MaxAmount bounds |value| of every decimal field.
	MaxAmount *big.Rat
}

// DefaultLimits are relay's defaults: 64 KiB records, event times in [2000, 2100), decimals of
// at most 18 digits at scale 4.
func DefaultLimits() Limits {
	max, _ := new(big.Rat).SetString("99999999999999.9999")
	return Limits{
		MaxPayloadBytes: 65536,
		MinEventTime:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		MaxEventTime:    time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		MaxAmount:       max,
	}
}

// Spec is a pipeline spec as the oracle reads it. Limits may be changed before Fold.
type Spec struct {
	Fields    []Field
	EventTime Field // Type is "epoch_ms" or "rfc3339"
	Tables    []Table
	Limits    Limits
}

// Field is an input field: a path of keys and a type.
type Field struct {
	Name  string
	Path  []string
	Type  string // "string", "int", "decimal", or for the event time "epoch_ms" / "rfc3339"
	Max   int    // string: bytes
	Scale int    // decimal: fractional digits
	// Bad and TooLong are the reasons of a string field with a lone surrogate escape or past Max:
	// the default spec keeps relay's historic names (bad_sku, sku_too_long, ...).
	Bad, TooLong string
}

// Table is an aggregate.
type Table struct {
	Name       string
	Window     time.Duration
	Dimensions []Column
	Measures   []Measure
	Filter     *Filter
}

// Column is a dimension: a column and the field it holds.
type Column struct{ Column, Field string }

// Measure is a count, sum, min or max column.
type Measure struct{ Column, Kind, Field string }

// Filter keeps records whose field equals one of In.
type Filter struct {
	Field string
	In    []string
}

// Default is relay's default spec: order_id string(128), sku string(64), amount decimal(4),
// event time ts in epoch milliseconds, one table order_stats_minute by sku per minute.
func Default() *Spec {
	return &Spec{
		Fields: []Field{
			{Name: "order_id", Path: []string{"order_id"}, Type: "string", Max: 128, Bad: "bad_order_id", TooLong: "order_id_too_long"},
			{Name: "sku", Path: []string{"sku"}, Type: "string", Max: 64, Bad: "bad_sku", TooLong: "sku_too_long"},
			{Name: "amount", Path: []string{"amount"}, Type: "decimal", Scale: 4},
		},
		EventTime: Field{Name: "ts", Path: []string{"ts"}, Type: "epoch_ms"},
		Tables: []Table{{
			Name:       "order_stats_minute",
			Window:     time.Minute,
			Dimensions: []Column{{Column: "sku", Field: "sku"}},
			Measures:   []Measure{{Column: "order_count", Kind: "count"}, {Column: "amount_sum", Kind: "sum", Field: "amount"}},
		}},
		Limits: DefaultLimits(),
	}
}

// yamlSpec is the document relay reads as its pipeline block (or pipeline_file).
type yamlSpec struct {
	Input struct {
		// Format is read only to be allowed: how the records are decoded is the caller's choice
		// (Fold for JSON, FoldAvro for avro).
		Format    string    `yaml:"format"`
		Fields    yaml.Node `yaml:"fields"`
		EventTime struct {
			Field  string `yaml:"field"`
			Format string `yaml:"format"`
		} `yaml:"event_time"`
	} `yaml:"input"`
	Aggregates []struct {
		Table      string    `yaml:"table"`
		Window     string    `yaml:"window"`
		Dimensions []Column  `yaml:"dimensions"`
		Measures   []Measure `yaml:"measures"`
		Filter     *Filter   `yaml:"filter"`
	} `yaml:"aggregates"`
}

var typeRE = regexp.MustCompile(`^(?:(string|decimal)\((\d+)\)|(int))$`)

// Parse reads what relay's pipeline block holds (input, aggregates), with DefaultLimits. It checks
// only what it needs to fold; whether relay accepts the spec is relay's business.
func Parse(b []byte) (*Spec, error) {
	var y yamlSpec
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	s := &Spec{Limits: DefaultLimits()}
	n := y.Input.Fields
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("oracle: input.fields is not a mapping")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, typ := n.Content[i].Value, n.Content[i+1].Value
		m := typeRE.FindStringSubmatch(typ)
		if m == nil {
			return nil, fmt.Errorf("oracle: input.fields.%s: type %q", name, typ)
		}
		f := Field{Name: name, Path: strings.Split(name, "."), Type: m[1] + m[3], Bad: "bad_text", TooLong: "too_long"}
		k, _ := strconv.Atoi(m[2])
		if f.Type == "string" {
			f.Max = k
		} else {
			f.Scale = k
		}
		s.Fields = append(s.Fields, f)
	}
	et := y.Input.EventTime
	if et.Format != "epoch_ms" && et.Format != "rfc3339" {
		return nil, fmt.Errorf("oracle: input.event_time.format %q", et.Format)
	}
	s.EventTime = Field{Name: et.Field, Path: strings.Split(et.Field, "."), Type: et.Format}
	for _, a := range y.Aggregates {
		w, err := time.ParseDuration(a.Window)
		if err != nil || w <= 0 {
			return nil, fmt.Errorf("oracle: %s: window %q", a.Table, a.Window)
		}
		s.Tables = append(s.Tables, Table{Name: a.Table, Window: w, Dimensions: a.Dimensions, Measures: a.Measures, Filter: a.Filter})
	}
	for _, t := range s.Tables {
		for _, c := range t.Dimensions {
			if s.field(c.Field) == nil {
				return nil, fmt.Errorf("oracle: %s: dimension field %q is not declared", t.Name, c.Field)
			}
		}
		for _, m := range t.Measures {
			if m.Kind != "count" && s.field(m.Field) == nil {
				return nil, fmt.Errorf("oracle: %s: measure field %q is not declared", t.Name, m.Field)
			}
		}
		if t.Filter != nil && s.field(t.Filter.Field) == nil {
			return nil, fmt.Errorf("oracle: %s: filter field %q is not declared", t.Name, t.Filter.Field)
		}
	}
	return s, nil
}

func (s *Spec) field(name string) *Field {
	for i := range s.Fields {
		if s.Fields[i].Name == name {
			return &s.Fields[i]
		}
	}
	return nil
}
