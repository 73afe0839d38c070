// The fold. Invariant: each table is a plain map from its primary key (window start, dimension
// values) to exact totals, rendered as MySQL prints the columns and sorted in primary-key order
// (window, then strings by bytes and integers by value, column by column).

package oracle

import (
	"cmp"
	"math/big"
	"slices"
	"strconv"
	"time"
)

// Result is what relay must have written for a sequence of records.
type Result struct {
	Tables []Rows // in spec order
	Bad    []Bad  // in record order
}

// Rows is one aggregate table's expected content.
type Rows struct {
	Table   string
	Columns []string   // window_start, the dimensions, the measures
	Rows    [][]string // as MySQL prints them (SELECT CAST(c AS CHAR)), in primary-key order
}

// Bad is a record relay must refuse: its index in the sequence, the reason (relay's metric and
// DLQ label) and the field it is about ("" for the record as a whole).
type Bad struct {
	Index  int
	Reason string
	Field  string
}

// Table returns the rows of the named table, or nil.
func (r *Result) Table(name string) *Rows {
	for i := range r.Tables {
		if r.Tables[i].Table == name {
			return &r.Tables[i]
		}
	}
	return nil
}

// Check decodes one record: "" if relay must accept it, else the reason and the field.
func (s *Spec) Check(payload []byte) (reason, field string) {
	_, _, reason, field = s.decode(payload)
	return reason, field
}

// group is one row being accumulated.
type group struct {
	window time.Time
	dims   []value
	count  int64
	acc    []*big.Rat // per measure: sum, min or max; nil for count
}

// Fold decodes every payload and folds the valid ones into every table whose filter they pass.
// The order of payloads does not change the tables, only the indexes of Bad.
func (s *Spec) Fold(payloads [][]byte) *Result {
	return s.fold(len(payloads), func(i int) (map[string]value, time.Time, string, string) { return s.decode(payloads[i]) })
}

// fold folds records 0..n-1, each decoded by decode (values, event time, or the reason and field).
func (s *Spec) fold(n int, decode func(i int) (vals map[string]value, ts time.Time, reason, field string)) *Result {
	res := &Result{}
	groups := make([]map[string]*group, len(s.Tables))
	for i := range groups {
		groups[i] = map[string]*group{}
	}
	for i := range n {
		vals, ts, reason, field := decode(i)
		if reason != "" {
			res.Bad = append(res.Bad, Bad{Index: i, Reason: reason, Field: field})
			continue
		}
		for t, tb := range s.Tables {
			if tb.Filter != nil && !s.keeps(tb.Filter, vals[tb.Filter.Field]) {
				continue
			}
			// Truncate counts from the zero time, a midnight: for a window dividing a day that is
			// flooring since the Unix epoch, before 1970 too.
			g := &group{window: ts.Truncate(tb.Window)}
			k := g.window.Format(time.RFC3339)
			for _, d := range tb.Dimensions {
				v := vals[d.Field]
				g.dims = append(g.dims, v)
				k += "," + strconv.Quote(v.String())
			}
			if old, ok := groups[t][k]; ok {
				g = old
			} else {
				groups[t][k] = g
				g.acc = make([]*big.Rat, len(tb.Measures))
			}
			g.count++
			for m, ms := range tb.Measures {
				if ms.Kind == "count" {
					continue
				}
				v := vals[ms.Field].num
				switch a := g.acc[m]; {
				case a == nil:
					g.acc[m] = new(big.Rat).Set(v)
				case ms.Kind == "sum":
					a.Add(a, v)
				case ms.Kind == "min" && v.Cmp(a) < 0, ms.Kind == "max" && v.Cmp(a) > 0:
					a.Set(v)
				}
			}
		}
	}
	for t, tb := range s.Tables {
		rows := Rows{Table: tb.Name, Columns: []string{"window_start"}}
		for _, d := range tb.Dimensions {
			rows.Columns = append(rows.Columns, d.Column)
		}
		for _, m := range tb.Measures {
			rows.Columns = append(rows.Columns, m.Column)
		}
		gs := make([]*group, 0, len(groups[t]))
		for _, g := range groups[t] {
			gs = append(gs, g)
		}
		slices.SortFunc(gs, func(x, y *group) int {
			if c := x.window.Compare(y.window); c != 0 {
				return c
			}
			for i := range x.dims {
				if c := x.dims[i].compare(y.dims[i]); c != 0 {
					return c
				}
			}
			return 0
		})
		for _, g := range gs {
			row := []string{g.window.Format("2006-01-02 15:04:05")}
			for _, d := range g.dims {
				row = append(row, d.String())
			}
			for m, ms := range tb.Measures {
				row = append(row, s.render(ms, g.count, g.acc[m]))
			}
			rows.Rows = append(rows.Rows, row)
		}
		res.Tables = append(res.Tables, rows)
	}
	return res
}

// keeps says whether a filter passes v: a string equal to one of In, or an int equal in value.
func (s *Spec) keeps(f *Filter, v value) bool {
	for _, in := range f.In {
		if v.num == nil && v.text == in {
			return true
		}
		if n, ok := new(big.Rat).SetString(in); ok && v.num != nil && n.IsInt() && n.Cmp(v.num) == 0 {
			return true
		}
	}
	return false
}

// render prints a measure as MySQL does: a count or a min/max of an int as BIGINT, a sum of an int
// as DECIMAL(38,0), a decimal(S)'s sum, min or max as DECIMAL(38,S).
func (s *Spec) render(m Measure, count int64, acc *big.Rat) string {
	if m.Kind == "count" {
		return big.NewInt(count).String()
	}
	return acc.FloatString(s.field(m.Field).Scale)
}

// String is a dimension value as MySQL prints its column.
func (v value) String() string {
	if v.num != nil {
		return v.num.FloatString(0)
	}
	return v.text
}

func (v value) compare(w value) int {
	if v.num != nil {
		return v.num.Cmp(w.num)
	}
	return cmp.Compare(v.text, w.text)
}
