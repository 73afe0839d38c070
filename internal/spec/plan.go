// A Plan is a Spec checked and resolved to field indexes. Invariant: Compile refuses, with the YAML
// path, everything the decoder, codec, tables or SQL could not handle exactly; what it accepts they
// handle without further checks.

package spec

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/order"
)

// Plan is a validated Spec. It is immutable and safe to share between goroutines.
type Plan struct {
	format string  // FormatJSON, FormatAvro or FormatJSONSchema
	fields []field // input fields in check order, then the event time
	aggs   []rollup
	limits Limits
	// builtin: compiled from Default (see Spec.builtin).
	builtin bool
}

type fieldType uint8

const (
	typeString fieldType = iota
	typeInt
	typeDecimal
	typeEpochMS
	typeRFC3339
)

type field struct {
	name             string
	path             []string
	typ              fieldType
	max              int   // string: byte bound (also the VARCHAR length)
	scale            int   // decimal: fractional digits
	unit             int64 // decimal: money units per 10^-scale
	invalid, tooLong Reason
}

type rollup struct {
	table    string
	windowMS int64
	dims     []dim
	measures []measure
	filter   *filter
	codec    Codec
}

type dim struct {
	column string
	field  int
}

type measureKind uint8

const (
	kindCount measureKind = iota
	kindSum
	kindMin
	kindMax
)

type measure struct {
	column string
	kind   measureKind
	field  int // -1 for count
	scale  int // rendered fractional digits (0 for int fields and count)
}

type filter struct {
	field int
	strs  []string
	ints  []int64
}

// Error is a refusal of a spec; Path is the YAML path under pipeline.
type Error struct {
	Path string
	Msg  string
}

func (e *Error) Error() string { return "pipeline." + e.Path + ": " + e.Msg }

func bad(path, format string, args ...any) error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

var (
	// Identifiers are spliced into SQL unquoted (as sink always did), so they are held to a plain
	// grammar and reserved words are refused.
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	typeRE  = regexp.MustCompile(`^(string|decimal)\(([0-9]{1,5})\)$|^int$`)
)

const (
	maxPathKeys = 8
	// maxKeyBytes is InnoDB's limit on an index (DYNAMIC rows); a string column counts 4 bytes per
	// character in utf8mb4, DATETIME 5, BIGINT 8.
	maxKeyBytes   = 3072
	maxVarchar    = 16383 // utf8mb4 VARCHAR bound
	maxFilterVals = 16
)

// Compile validates s. The first refusal wins, so an operator fixes one thing at a time.
func Compile(s Spec) (*Plan, error) {
	p := &Plan{limits: s.Input.Limits, builtin: s.builtin}
	// Limits come from input.*, not YAML; unset they would make every record too_large.
	if l := s.Input.Limits; l.MaxPayloadBytes < 1 || l.MinTS >= l.MaxTS || l.MaxUnits < 0 {
		return nil, bad("input", "limits are not set (max payload %d, event time %d..%d, max units %d)",
			l.MaxPayloadBytes, l.MinTS, l.MaxTS, l.MaxUnits)
	}
	switch s.Input.Format {
	case "", FormatJSON:
		p.format = FormatJSON
	case FormatAvro, FormatProtobuf, FormatJSONSchema:
		p.format = s.Input.Format
	default:
		return nil, bad("input.format", "%q is not json, avro, protobuf or json_schema", s.Input.Format)
	}
	byName := map[string]int{}
	for i, f := range s.Input.Fields {
		at := "input.fields." + f.Name
		if err := checkPath(at, f.Path); err != nil {
			return nil, err
		}
		if _, dup := byName[f.Name]; dup {
			return nil, bad(at, "declared twice")
		}
		cf, err := parseType(at, f)
		if err != nil {
			return nil, err
		}
		byName[f.Name] = i
		p.fields = append(p.fields, cf)
	}
	et := s.Input.EventTime
	if err := checkPath("input.event_time.field", et.Path); err != nil {
		return nil, err
	}
	if _, dup := byName[et.Field]; dup {
		return nil, bad("input.event_time.field", "%s is also in input.fields; the event time is declared only here", et.Field)
	}
	tf := field{name: et.Field, path: et.Path}
	switch et.Format {
	case "epoch_ms":
		tf.typ = typeEpochMS
	case "rfc3339":
		tf.typ = typeRFC3339
	default:
		return nil, bad("input.event_time.format", "%q is not epoch_ms or rfc3339", et.Format)
	}
	p.fields = append(p.fields, tf)
	if len(s.Aggregates) == 0 {
		return nil, bad("aggregates", "at least one aggregate is needed")
	}
	tables := map[string]int{}
	for i, a := range s.Aggregates {
		at := fmt.Sprintf("aggregates[%d]", i)
		if err := checkIdent(at+".table", a.Table); err != nil {
			return nil, err
		}
		if j, dup := tables[strings.ToLower(a.Table)]; dup {
			return nil, bad(at+".table", "%s is also aggregates[%d]'s table", a.Table, j)
		}
		tables[strings.ToLower(a.Table)] = i
		ca, err := p.compileAggregate(at, a, byName)
		if err != nil {
			return nil, err
		}
		p.aggs = append(p.aggs, ca)
	}
	return p, nil
}

func checkPath(at string, path []string) error {
	if len(path) == 0 || len(path) > maxPathKeys {
		return bad(at, "a path has 1 to %d keys", maxPathKeys)
	}
	// Any non-empty key is fine: keys are compared with the record's keys after unescaping.
	for _, k := range path {
		if k == "" {
			return bad(at, "%q is not a dotted path of keys: a key is empty", strings.Join(path, "."))
		}
	}
	return nil
}

func checkIdent(at, name string) error {
	if !identRE.MatchString(name) {
		return bad(at, "%q must match [A-Za-z_][A-Za-z0-9_]{0,63}", name)
	}
	if reserved[strings.ToLower(name)] {
		return bad(at, "%q is a reserved word in MySQL or MariaDB", name)
	}
	return nil
}

func parseType(at string, f Field) (field, error) {
	cf := field{name: f.Name, path: f.Path, invalid: f.invalid, tooLong: f.tooLong}
	if cf.invalid == 0 {
		cf.invalid, cf.tooLong = ReasonBadText, ReasonTooLong
	}
	m := typeRE.FindStringSubmatch(f.Type)
	if m == nil {
		return cf, bad(at, "unknown type %q (want string(N), int or decimal(S))", f.Type)
	}
	n, _ := strconv.Atoi(m[2])
	switch m[1] {
	case "string":
		if n < 1 || n > maxVarchar {
			return cf, bad(at, "string(%d): the byte bound must be 1..%d", n, maxVarchar)
		}
		cf.typ, cf.max = typeString, n
	case "decimal":
		if n > money.Scale {
			return cf, bad(at, "decimal(%d): the scale must be 0..%d (amounts are exact in 10^-%d units)", n, money.Scale, money.Scale)
		}
		cf.typ, cf.scale, cf.unit = typeDecimal, n, 1
		for k := n; k < money.Scale; k++ {
			cf.unit *= 10
		}
	default:
		cf.typ = typeInt
	}
	return cf, nil
}

func (p *Plan) compileAggregate(at string, a Aggregate, byName map[string]int) (rollup, error) {
	ca := rollup{table: a.Table, windowMS: a.Window.Milliseconds()}
	if a.Window < time.Second || a.Window%time.Second != 0 || 24*time.Hour%a.Window != 0 {
		return ca, bad(at+".window", "%s does not divide a day into whole seconds (window_start is a DATETIME)", a.Window)
	}
	columns := map[string]string{WindowColumn: WindowColumn}
	column := func(at, name string) error {
		if err := checkIdent(at, name); err != nil {
			return err
		}
		if other, dup := columns[strings.ToLower(name)]; dup {
			return bad(at, "%s collides with %s", name, other)
		}
		columns[strings.ToLower(name)] = at
		return nil
	}
	ref := func(at, name string, ok func(fieldType) bool, want string) (int, error) {
		f, found := byName[name]
		if !found {
			return 0, bad(at, "%q is not declared in input.fields", name)
		}
		if !ok(p.fields[f].typ) {
			return 0, bad(at, "%s must be %s", name, want)
		}
		return f, nil
	}
	keyable := func(t fieldType) bool { return t == typeString || t == typeInt }
	numeric := func(t fieldType) bool { return t == typeDecimal || t == typeInt }
	keyBytes := 5 // DATETIME
	for i, d := range a.Dimensions {
		dat := fmt.Sprintf("%s.dimensions[%d]", at, i)
		if err := column(dat+".column", d.Column); err != nil {
			return ca, err
		}
		f, err := ref(dat+".field", d.Field, keyable, "a string or int field")
		if err != nil {
			return ca, err
		}
		ca.dims = append(ca.dims, dim{column: d.Column, field: f})
		if p.fields[f].typ == typeInt {
			keyBytes += 8
		} else {
			keyBytes += 4 * p.fields[f].max
		}
	}
	if keyBytes > maxKeyBytes {
		return ca, bad(at+".dimensions", "the primary key needs %d bytes, InnoDB allows %d (a string(N) counts 4N)", keyBytes, maxKeyBytes)
	}
	if len(a.Measures) == 0 {
		return ca, bad(at+".measures", "at least one measure is needed")
	}
	for i, m := range a.Measures {
		mat := fmt.Sprintf("%s.measures[%d]", at, i)
		if err := column(mat+".column", m.Column); err != nil {
			return ca, err
		}
		cm := measure{column: m.Column, field: -1}
		switch m.Kind {
		case "count":
			if m.Field != "" {
				return ca, bad(mat+".field", "count takes no field")
			}
			cm.kind = kindCount
			ca.measures = append(ca.measures, cm)
			continue
		case "sum":
			cm.kind = kindSum
		case "min":
			cm.kind = kindMin
		case "max":
			cm.kind = kindMax
		default:
			return ca, bad(mat+".kind", "%q is not count, sum, min or max", m.Kind)
		}
		f, err := ref(mat+".field", m.Field, numeric, "a decimal or int field")
		if err != nil {
			return ca, err
		}
		cm.field, cm.scale = f, p.fields[f].scale
		ca.measures = append(ca.measures, cm)
	}
	if a.Filter != nil {
		f, err := ref(at+".filter.field", a.Filter.Field, keyable, "a string or int field")
		if err != nil {
			return ca, err
		}
		if len(a.Filter.In) == 0 || len(a.Filter.In) > maxFilterVals {
			return ca, bad(at+".filter.in", "needs 1 to %d values", maxFilterVals)
		}
		cf := &filter{field: f}
		for _, v := range a.Filter.In {
			if p.fields[f].typ == typeInt {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return ca, bad(at+".filter.in", "%q is not an int, as %s is", v, a.Filter.Field)
				}
				cf.ints = append(cf.ints, n)
			} else {
				cf.strs = append(cf.strs, v)
			}
		}
		ca.filter = cf
	}
	ca.codec = p.codec(ca.dims)
	return ca, nil
}

// InputFormat is how the plan's records are encoded: FormatJSON, FormatAvro or FormatJSONSchema.
func (p *Plan) InputFormat() string { return p.format }

// Reasons lists every reason this plan's decoder can return, in numeric order: the metric labels
// to pre-register. For the default spec it is order.AllReasons.
func (p *Plan) Reasons() []Reason {
	seen := map[Reason]bool{}
	for _, r := range []Reason{ReasonTooLarge, ReasonMissingField, ReasonWrongType} {
		seen[r] = true
	}
	// JSON Schema records are JSON after the registry's header: both sets of reasons.
	if p.format == FormatJSON || p.format == FormatJSONSchema {
		seen[Reason(order.ReasonNotJSON)], seen[Reason(order.ReasonNotObject)] = true, true
	}
	if p.format != FormatJSON {
		seen[ReasonBadHeader], seen[ReasonUnknownSchema], seen[ReasonBadEncoding] = true, true, true
	}
	for _, f := range p.fields {
		var rs []Reason
		switch f.typ {
		case typeString:
			rs = []Reason{Reason(order.ReasonEmptyField), f.invalid, f.tooLong}
		case typeInt:
			rs = []Reason{ReasonBadInt}
		case typeDecimal:
			rs = []Reason{Reason(order.ReasonBadAmount), Reason(order.ReasonAmountPrecision), Reason(order.ReasonAmountRange)}
		default:
			rs = []Reason{Reason(order.ReasonBadTS), Reason(order.ReasonTSRange)}
		}
		for _, r := range rs {
			seen[r] = true
		}
	}
	var out []Reason
	for r := range 256 {
		if seen[Reason(r)] {
			out = append(out, Reason(r))
		}
	}
	return out
}
