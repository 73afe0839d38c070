// The generator: a deterministic stream of one spec's records, good and bad. Invariant: a seed and
// the options decide every record, and each record carries what it must become (its payload, or the
// bad kind with the reason the spec's decoder files it under), so Totals never guesses.

package loadgen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/spec"
)

// amounts mixes edge values (exactness: 0.1, 0.0001, the largest 8.4 value, negatives) with
// ordinary ones; a decimal(S) field takes them cut to S fractional digits.
var amounts = []string{"0.1", "0.0001", "99999999.9999", "12.34", "-5.5", "1", "0.3333", "250.00", "7.77"}

// badRecords are the bad-input kinds with the reason the default spec gives each; another spec's
// decoder may file them under another reason (Totals asks it).
var badRecords = []Bad{
	{"not_json", `{"order_id": "x", "sku": `},
	{"not_object", `[1,2,3]`},
	{"missing_field", `{"order_id":"b1","sku":"SKU-1","ts":1764000000000}`},
	{"wrong_type", `{"order_id":"b2","sku":17,"amount":"1.00","ts":1764000000000}`},
	{"empty_field", `{"order_id":"","sku":"SKU-1","amount":"1.00","ts":1764000000000}`},
	{"bad_amount", `{"order_id":"b3","sku":"SKU-1","amount":"12,50","ts":1764000000000}`},
	{"amount_precision", `{"order_id":"b4","sku":"SKU-1","amount":"0.00001","ts":1764000000000}`},
	{"amount_range", `{"order_id":"b5","sku":"SKU-1","amount":"1e30","ts":1764000000000}`},
	{"bad_ts", `{"order_id":"b6","sku":"SKU-1","amount":"1.00","ts":"soon"}`},
	{"ts_range", `{"order_id":"b7","sku":"SKU-1","amount":"1.00","ts":-5}`},
	{"sku_too_long", `{"order_id":"b8","sku":"SKU-0123456789012345678901234567890123456789012345678901234567890123","amount":"1.00","ts":1764000000000}`},
	{"bad_sku", `{"order_id":"b9","sku":"SKU-\uD800","amount":"1.00","ts":1764000000000}`},
	{"order_id_too_long", `{"order_id":"` + strings.Repeat("o", 129) + `","sku":"SKU-1","amount":"1.00","ts":1764000000000}`},
	{"bad_order_id", `{"order_id":"b10-\uDC00","sku":"SKU-1","amount":"1.00","ts":1764000000000}`},
	// Over the default 64 KiB payload limit; relay keeps only a bounded prefix in the DLQ.
	{"too_large", `{"order_id":"b11","sku":"SKU-1","amount":"1.00","ts":1764000000000,"pad":"` + strings.Repeat("x", 70000) + `"}`},
}

// BadReasons lists the reasons of every bad-input kind the generator makes.
func BadReasons() []string {
	out := make([]string, len(badRecords))
	for i, b := range badRecords {
		out[i] = b.Reason
	}
	return out
}

// Generator makes the deterministic stream of one spec's records.
type Generator struct {
	o      Options
	plan   *spec.Plan
	fields []spec.InputField
	values [][]string // per field: the values it is drawn from (nil: see raw)
	plains [][]string // values as the plain records write them (see plain), rendered once
	draw   []int      // the fields in the order values are drawn: grouped or filtered, the event time, the rest
	layout []node     // the record's top-level keys
	rng    *rand.Rand
	sp     *speller // with Escape: how each record is written
	seq    int64
	bad    int      // bad records made so far
	vals   []string // this record's values, by field (as raw gives them)
	lits   []string // and as the plain records write them
}

// node is one key of the record: a field's value, or an object of fields sharing a path prefix.
type node struct {
	key   string
	field int // -1: an object of kids
	kids  []node
}

// NewGenerator seeds a stream.
func NewGenerator(o Options) *Generator {
	if o.SKUs <= 0 {
		o.SKUs = 100
	}
	if o.Windows <= 0 {
		o.Windows = 10
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.StartTS == 0 {
		o.StartTS = 1764000000000 - 1764000000000%60000
	}
	g := &Generator{o: o, plan: o.Plan, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
	if o.Escape {
		g.sp = newSpeller(o.Seed)
	}
	if g.plan == nil {
		g.plan = DefaultPlan()
	}
	g.fields = g.plan.InputFields()
	g.values, g.plains = make([][]string, len(g.fields)), make([][]string, len(g.fields))
	g.vals, g.lits = make([]string, len(g.fields)), make([]string, len(g.fields))
	et := len(g.fields) - 1
	var rest []int
	for i, f := range g.fields[:et] {
		g.values[i] = choices(f, o)
		for _, v := range g.values[i] {
			g.plains[i] = append(g.plains[i], plain(&f, v))
		}
		g.layout = place(g.layout, f.Path, i)
		if f.Grouped || f.Filter != nil {
			g.draw = append(g.draw, i)
		} else {
			rest = append(rest, i)
		}
	}
	g.layout = place(g.layout, g.fields[et].Path, et)
	g.draw = append(append(g.draw, et), rest...)
	return g
}

// choices are the values a field is drawn from: a filter's values and one it drops, a small
// vocabulary for a grouped field (so keys collide), the edge amounts for a decimal. An ungrouped
// string is an order id and an ungrouped int any small number (nil: raw makes them).
func choices(f spec.InputField, o Options) []string {
	n := o.SKUs
	if d, ok := o.Distinct[f.Name]; ok && d > 0 {
		n = d
	}
	var out []string
	switch {
	case f.Filter != nil:
		out = slices.Clone(f.Filter)
		// One value the filters drop, so records both reach and miss the filtered aggregates.
		for k := 0; ; k++ {
			v := vocabulary(f, k, o.Escape)
			if !slices.Contains(f.Filter, v) {
				return append(out, v)
			}
		}
	case f.Kind == spec.KindDecimal:
		for _, a := range amounts {
			out = append(out, cut(a, f.Scale))
		}
	case f.Grouped:
		for k := range n {
			out = append(out, vocabulary(f, k, o.Escape))
		}
	}
	return out
}

// vocabulary is a grouped field's k-th value: SKU-k for a field sku, k for an int, within the
// field's byte bound. With escape, a string carries the k-th decoration (SKU-café-1, SKU-日本語-4):
// the decomposed one the previous value's number, so both spell the same visible text.
func vocabulary(f spec.InputField, k int, escape bool) string {
	if f.Kind == spec.KindInt {
		return strconv.Itoa(k)
	}
	deco, num := "", k
	if escape {
		deco = decorations[k%len(decorations)]
		if k%len(decorations) == nfdDecoration {
			num = k - 1
		}
	}
	return fitTail(strings.ToUpper(f.Path[len(f.Path)-1])+"-"+deco+strconv.Itoa(num), f.Max)
}

// cut drops the fractional digits of a past scale (an amount for a decimal(scale) field).
func cut(a string, scale int) string {
	i := strings.IndexByte(a, '.')
	switch {
	case i < 0 || len(a)-i-1 <= scale:
		return a
	case scale == 0:
		return a[:i]
	}
	return a[:i+1+scale]
}

// place adds field at path to the layout, inside the objects of its leading keys.
func place(layout []node, path []string, field int) []node {
	if len(path) == 1 {
		return append(layout, node{key: path[0], field: field})
	}
	for i := range layout {
		if layout[i].key == path[0] && layout[i].field < 0 {
			layout[i].kids = place(layout[i].kids, path[1:], field)
			return layout
		}
	}
	return append(layout, node{key: path[0], field: -1, kids: place(nil, path[1:], field)})
}

// Next returns one record and what it must become.
func (g *Generator) Next() ([]byte, pendingRec) {
	g.seq++
	if g.o.BadRate > 0 && g.rng.Float64() < g.o.BadRate {
		// In turn, not at random: every kind appears once there are as many bad records as kinds.
		b := badRecords[g.bad%len(badRecords)]
		g.bad++
		return []byte(b.Payload), pendingRec{payload: []byte(b.Payload), bad: &b}
	}
	for _, i := range g.draw {
		var k int
		g.vals[i], k = g.raw(i)
		if g.sp == nil {
			if k >= 0 {
				g.lits[i] = g.plains[i][k]
			} else {
				g.lits[i] = plain(&g.fields[i], g.vals[i])
			}
		}
	}
	var rec []byte
	if g.sp != nil {
		rec = g.sp.record(nil, g.layout, g.fields, g.vals)
	} else {
		rec = appendObject(nil, g.layout, g.lits)
	}
	return rec, pendingRec{payload: rec}
}

// raw draws field i's value (a string's text, a number's digits, a time's epoch milliseconds) and
// its index in g.values[i], -1 for a value made here.
func (g *Generator) raw(i int) (string, int) {
	f := &g.fields[i]
	if vs := g.values[i]; vs != nil {
		k := g.rng.IntN(len(vs))
		return vs[k], k
	}
	switch f.Kind {
	case spec.KindEpochMS, spec.KindRFC3339:
		return strconv.FormatInt(g.o.StartTS+g.rng.Int64N(int64(g.o.Windows)*g.o.Window.Milliseconds()), 10), -1
	case spec.KindInt:
		return strconv.Itoa(g.rng.IntN(1000) - 100), -1
	}
	id := fmt.Sprintf("o-%d-%d", g.o.Seed, g.seq)
	if g.sp != nil {
		id += idSuffixes[g.seq%int64(len(idSuffixes))]
	}
	return fitHead(id, f.Max), -1
}

// plain is value v of field f as the plain records write it: strings, decimals and RFC 3339
// times quoted, integers and epoch milliseconds bare.
func plain(f *spec.InputField, v string) string {
	switch f.Kind {
	case spec.KindInt, spec.KindEpochMS:
		return v
	case spec.KindRFC3339:
		ms, _ := strconv.ParseInt(v, 10, 64)
		v = time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	return strconv.Quote(v)
}

func appendObject(dst []byte, layout []node, lits []string) []byte {
	dst = append(dst, '{')
	for i, n := range layout {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendQuote(dst, n.key)
		dst = append(dst, ':')
		if n.field >= 0 {
			dst = append(dst, lits[n.field]...)
		} else {
			dst = appendObject(dst, n.kids, lits)
		}
	}
	return append(dst, '}')
}
