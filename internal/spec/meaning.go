// A table's meaning: what its rows add up, in the form the ledger keeps (relay_table_specs), and
// the comparison of a spec with the meanings recorded for a job.
//
// Invariant: two specs give a table the same Meaning exactly when its rows, fed the same valid
// records, get the same values. Only what decides a row's key and values from a record is in it
// (the input format, which reads the same bytes as other values; the window, the event time's path
// and format, each dimension's column and field path and type,
// each measure's column, kind and field path and type, the filter's field and set of values). Not
// in it, so changing it is never drift: how the YAML is written (key order, comments, the names
// given to fields in input.fields, the order of measures and of filter values), other tables, and
// what decides which records are valid for every table alike (a field in input.fields no table
// reads, its string(N) limit, input.max_payload_bytes, the event time's bounds): such a change
// sends other records to the dead-letter table, so the same records can then give other values;
// docs/PIPELINES.md "Changing a spec" says so. Every difference Compare reports names the YAML key
// to change back, in the form Compile's refusals use.

package spec

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Meaning is one aggregate table's canonical spec; its JSON is what the ledger records.
type Meaning struct {
	// Format is the input format, empty for JSON: the meanings recorded before there were other
	// formats are JSON's, byte for byte.
	Format        string         `json:"format,omitempty"`
	WindowSeconds int64          `json:"window_seconds"`
	EventTime     MeaningField   `json:"event_time"` // Type is the format: epoch_ms or rfc3339
	Dimensions    []MeaningDim   `json:"dimensions"` // in primary-key order
	Measures      []MeaningMeas  `json:"measures"`   // by column
	Filter        *MeaningFilter `json:"filter,omitempty"`
}

// MeaningField is a field a table reads: its JSON path and its type (string(N), int, decimal(S)).
type MeaningField struct {
	Path []string `json:"path"`
	Type string   `json:"type"`
}

// MeaningDim is one key column after window_start.
type MeaningDim struct {
	Column string       `json:"column"`
	Field  MeaningField `json:"field"`
}

// MeaningMeas is one accumulated column; a count has no field.
type MeaningMeas struct {
	Column string        `json:"column"`
	Kind   string        `json:"kind"`
	Field  *MeaningField `json:"field,omitempty"`
}

// MeaningFilter keeps the records whose field is one of In (sorted, each value once, ints in
// canonical form).
type MeaningFilter struct {
	Field MeaningField `json:"field"`
	In    []string     `json:"in"`
}

// Meaning is aggregate a's meaning.
func (p *Plan) Meaning(a int) Meaning {
	ag := &p.aggs[a]
	m := Meaning{WindowSeconds: ag.windowMS / 1000, EventTime: p.meaningField(len(p.fields) - 1),
		Dimensions: []MeaningDim{}, Measures: []MeaningMeas{}}
	if p.format != FormatJSON {
		m.Format = p.format
	}
	for _, d := range ag.dims {
		m.Dimensions = append(m.Dimensions, MeaningDim{Column: d.column, Field: p.meaningField(d.field)})
	}
	for _, ms := range ag.measures {
		mm := MeaningMeas{Column: ms.column, Kind: kindNames[ms.kind]}
		if ms.field >= 0 {
			f := p.meaningField(ms.field)
			mm.Field = &f
		}
		m.Measures = append(m.Measures, mm)
	}
	slices.SortFunc(m.Measures, func(x, y MeaningMeas) int { return strings.Compare(x.Column, y.Column) })
	if f := ag.filter; f != nil {
		mf := &MeaningFilter{Field: p.meaningField(f.field)}
		for _, n := range f.ints {
			mf.In = append(mf.In, strconv.FormatInt(n, 10))
		}
		mf.In = append(mf.In, f.strs...)
		slices.Sort(mf.In)
		mf.In = slices.Compact(mf.In)
		m.Filter = mf
	}
	return m
}

var kindNames = map[measureKind]string{kindCount: "count", kindSum: "sum", kindMin: "min", kindMax: "max"}

func (p *Plan) meaningField(i int) MeaningField {
	f := &p.fields[i]
	mf := MeaningField{Path: slices.Clone(f.path)}
	switch f.typ {
	case typeString:
		mf.Type = fmt.Sprintf("string(%d)", f.max)
	case typeInt:
		mf.Type = "int"
	case typeDecimal:
		mf.Type = fmt.Sprintf("decimal(%d)", f.scale)
	case typeEpochMS:
		mf.Type = "epoch_ms"
	case typeRFC3339:
		mf.Type = "rfc3339"
	}
	return mf
}

// Encode is the meaning as the ledger records it.
func (m Meaning) Encode() string {
	b, _ := json.Marshal(m) // plain structs of strings and numbers: cannot fail
	return string(b)
}

// ParseMeaning reads a recorded meaning.
func ParseMeaning(s string) (Meaning, error) {
	var m Meaning
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return m, fmt.Errorf("recorded table meaning %q: %w", s, err)
	}
	return m, nil
}

// Table states of a comparison.
const (
	StateUnchanged = "unchanged"  // the recorded meaning
	StateChanged   = "changed"    // another meaning: refused
	StateNew       = "new"        // not recorded while the job has committed: needs relay spec accept
	StateRemoved   = "removed"    // recorded, no longer in the spec: needs relay spec accept
	StateFirstUse  = "first_use"  // the job never committed: relay run records the spec's meaning
	StateForgotten = "forgotten"  // recorded, not in the spec, and the job never committed: relay run drops it
	StateUnrecord  = "unrecorded" // a ledger from before relay recorded meanings: relay run records it
)

// Recorded is what the ledger holds for a job in one sink database.
type Recorded struct {
	Meanings  map[string]string // table -> recorded meaning (Encode)
	Claimed   map[string]bool   // tables whose recorded owner is the job
	Committed bool              // the job has committed offsets: its tables may hold its rows
}

// TableDiff is one table's comparison.
type TableDiff struct {
	Table   string   `json:"table"`
	Key     string   `json:"key"` // the YAML path of its aggregate; "" for a removed table
	State   string   `json:"state"`
	Changes []Change `json:"changes,omitempty"` // StateChanged: each difference
	Meaning string   `json:"-"`                 // the spec's meaning (Encode); "" for a removed table
}

// Change is one difference: the YAML path and the recorded and the new value.
type Change struct {
	Path string `json:"path"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

func (c Change) String() string { return c.Path + ": " + c.Old + " -> " + c.New }

// Compare holds every aggregate of p to the ledger's record: the spec's tables in spec order, then
// the recorded tables the spec no longer has, by name.
func (p *Plan) Compare(r Recorded) ([]TableDiff, error) {
	var out []TableDiff
	inSpec := map[string]bool{}
	for a := range p.aggs {
		t := p.aggs[a].table
		inSpec[t] = true
		m := p.Meaning(a)
		d := TableDiff{Table: t, Key: p.names().aggregate(a), Meaning: m.Encode()}
		old, recorded := r.Meanings[t]
		switch {
		case !r.Committed:
			d.State = StateFirstUse
		case !recorded && len(r.Meanings) == 0 && r.Claimed[t]:
			d.State = StateUnrecord
		case !recorded:
			d.State = StateNew
		case old == d.Meaning:
			d.State = StateUnchanged
		default:
			om, err := ParseMeaning(old)
			if err != nil {
				return nil, err
			}
			d.Changes = p.changes(a, om, m)
			d.State = StateChanged
			if len(d.Changes) == 0 {
				// Equal once parsed: recorded by a relay that wrote the JSON otherwise.
				d.State = StateUnchanged
			}
		}
		out = append(out, d)
	}
	var gone []string
	for t := range r.Meanings {
		if !inSpec[t] {
			gone = append(gone, t)
		}
	}
	slices.Sort(gone)
	for _, t := range gone {
		st := StateRemoved
		if !r.Committed {
			st = StateForgotten
		}
		out = append(out, TableDiff{Table: t, State: st})
	}
	return out, nil
}

// changes lists the differences between aggregate a's recorded meaning o and its meaning n.
func (p *Plan) changes(a int, o, n Meaning) []Change {
	k := p.names()
	var cs []Change
	add := func(path, old, new string) {
		if old != new {
			cs = append(cs, Change{Path: path, Old: old, New: new})
		}
	}
	add(k.format(), showFormat(o.Format), showFormat(n.Format))
	add(k.window(a), showWindow(o.WindowSeconds), showWindow(n.WindowSeconds))
	add(k.eventTime("field"), showPath(o.EventTime.Path), showPath(n.EventTime.Path))
	add(k.eventTime("format"), o.EventTime.Type, n.EventTime.Type)
	ag := &p.aggs[a]
	for j := range max(len(o.Dimensions), len(n.Dimensions)) {
		at := k.dimension(a, j)
		switch {
		case j >= len(o.Dimensions):
			add(at, "none", showDim(n.Dimensions[j]))
		case j >= len(n.Dimensions):
			add(at, showDim(o.Dimensions[j]), "none")
		default:
			od, nd := o.Dimensions[j], n.Dimensions[j]
			add(at+".column", od.Column, nd.Column)
			cs = append(cs, p.fieldChanges(at+".field", ag.dims[j].field, od.Field, nd.Field)...)
		}
	}
	old := map[string]MeaningMeas{}
	for _, m := range o.Measures {
		old[m.Column] = m
	}
	for j, ms := range ag.measures {
		at := k.measure(a, j)
		nm := n.Measures[slices.IndexFunc(n.Measures, func(x MeaningMeas) bool { return x.Column == ms.column })]
		om, ok := old[ms.column]
		delete(old, ms.column)
		if !ok {
			add(at, "none", showMeasure(nm))
			continue
		}
		add(at+".kind", om.Kind, nm.Kind)
		switch {
		case om.Field == nil || nm.Field == nil:
			add(at+".field", showOptField(om.Field), showOptField(nm.Field))
		default:
			cs = append(cs, p.fieldChanges(at+".field", ms.field, *om.Field, *nm.Field)...)
		}
	}
	for _, m := range o.Measures {
		if _, gone := old[m.Column]; gone {
			add(k.measures(a), showMeasure(m), "no column "+m.Column)
		}
	}
	of, nf := o.Filter, n.Filter
	switch {
	case of == nil && nf == nil:
	case of == nil || nf == nil:
		add(k.filter(a), showFilter(of), showFilter(nf))
	default:
		cs = append(cs, p.fieldChanges(k.filter(a)+".field", ag.filter.field, of.Field, nf.Field)...)
		add(k.filter(a)+".in", "["+strings.Join(of.In, ", ")+"]", "["+strings.Join(nf.In, ", ")+"]")
	}
	// A field's declaration read by several measures is one change.
	seen := map[Change]bool{}
	return slices.DeleteFunc(cs, func(c Change) bool {
		dup := seen[c]
		seen[c] = true
		return dup
	})
}

// fieldChanges compares a field a table reads: another path is the reference's change (at), the
// same path with another type is the field's declaration's.
func (p *Plan) fieldChanges(at string, f int, o, n MeaningField) []Change {
	if !slices.Equal(o.Path, n.Path) {
		return []Change{{Path: p.names().ref(at, f), Old: showField(o), New: showField(n)}}
	}
	if o.Type != n.Type {
		return []Change{{Path: p.names().field(f), Old: o.Type, New: n.Type}}
	}
	return nil
}

func showWindow(s int64) string {
	w := (time.Duration(s) * time.Second).String() // 1h0m0s, 5m0s, 1m30s
	if strings.HasSuffix(w, "m0s") {
		w = strings.TrimSuffix(w, "0s")
	}
	if strings.HasSuffix(w, "h0m") {
		w = strings.TrimSuffix(w, "0m")
	}
	return w
}

func showFormat(f string) string {
	if f == "" {
		return FormatJSON
	}
	return f
}

func showPath(p []string) string { return strings.Join(p, ".") }

func showField(f MeaningField) string { return showPath(f.Path) + " " + f.Type }

func showOptField(f *MeaningField) string {
	if f == nil {
		return "none"
	}
	return showField(*f)
}

func showDim(d MeaningDim) string { return d.Column + " from " + showField(d.Field) }

func showMeasure(m MeaningMeas) string {
	if m.Field == nil {
		return m.Column + " (" + m.Kind + ")"
	}
	return m.Column + " (" + m.Kind + " of " + showField(*m.Field) + ")"
}

func showFilter(f *MeaningFilter) string {
	if f == nil {
		return "none"
	}
	return showField(f.Field) + " in [" + strings.Join(f.In, ", ") + "]"
}

// names are the YAML paths of a plan's parts: under pipeline for a pipeline block, the settings
// the default spec is built from for the default.
type names struct{ p *Plan }

func (p *Plan) names() names { return names{p} }

// defaultKeys are the settings of the default spec's fields, in Default's field order, then the
// event time.
var defaultKeys = []string{"input.order_id_field", "input.sku_field", "input.amount_field", "input.ts_field"}

func (k names) aggregate(a int) string {
	if k.p.builtin {
		return "mysql.table"
	}
	return fmt.Sprintf("pipeline.aggregates[%d]", a)
}

func (k names) format() string {
	if k.p.builtin {
		return "input.format"
	}
	return "pipeline.input.format"
}

func (k names) window(a int) string {
	if k.p.builtin {
		return "input.window"
	}
	return k.aggregate(a) + ".window"
}

func (k names) eventTime(part string) string {
	if k.p.builtin {
		return "input.ts_field"
	}
	return "pipeline.input.event_time." + part
}

func (k names) dimension(a, j int) string {
	return fmt.Sprintf("%s.dimensions[%d]", k.aggregate(a), j)
}

func (k names) measures(a int) string { return k.aggregate(a) + ".measures" }

func (k names) measure(a, j int) string { return fmt.Sprintf("%s[%d]", k.measures(a), j) }

func (k names) filter(a int) string { return k.aggregate(a) + ".filter" }

// ref is the key naming the field a dimension, measure or filter reads (at); the default spec
// names it by the setting that holds it.
func (k names) ref(at string, f int) string {
	if k.p.builtin {
		return defaultKeys[f]
	}
	return at
}

// fieldKey is the key declaring field f, the event time (the last field) included.
func (k names) fieldKey(f int) string {
	if f == len(k.p.fields)-1 {
		return k.eventTime("field")
	}
	return k.field(f)
}

// field is the key declaring field f's type.
func (k names) field(f int) string {
	if k.p.builtin {
		return defaultKeys[f]
	}
	return "pipeline.input.fields." + k.p.fields[f].name
}
