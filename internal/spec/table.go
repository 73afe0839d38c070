// Per-epoch tables and the fold. Invariant: Fold is the only way a record reaches a table, for the
// pipeline and for verify's recount alike, so they cannot count differently; a key lives in exactly
// one subtask's table (hash of the encoded primary key); Rows come out sorted by encoded key, which
// is primary-key order (see Codec); sums are exact (money.Sum), min/max start from the first value.

package spec

import (
	"slices"
	"strings"

	"github.com/relay-sh/relay/internal/money"
)

// Acc is one measure of one key: N is the count, or the min/max value; Sum is a sum. Decimal
// values are in units of 10^-scale of their field.
type Acc struct {
	N   int64
	Sum money.Sum
}

// Row is one key's deltas: its encoded key and one Acc per measure, in measure order.
type Row struct {
	Key  string
	Accs []Acc
}

// Tables is one subtask's share of an epoch: a table per aggregate.
type Tables struct {
	aggs []table
}

type table struct {
	index map[string]int // key -> offset of its first Acc in accs
	accs  []Acc          // len(measures) per key
}

// NewTables returns empty tables for every aggregate of p.
func (p *Plan) NewTables() *Tables {
	t := &Tables{aggs: make([]table, len(p.aggs))}
	for i := range t.aggs {
		t.aggs[i].index = map[string]int{}
	}
	return t
}

// Len is the number of distinct keys of aggregate a.
func (t *Tables) Len(a int) int { return len(t.aggs[a].index) }

// Keys is the number of distinct keys of all aggregates: what checkpoint.buffer_keys bounds.
func (t *Tables) Keys() int {
	n := 0
	for a := range t.aggs {
		n += len(t.aggs[a].index)
	}
	return n
}

// Fold adds a decoded, valid record to every aggregate whose filter it passes, each key into the
// subtask its hash picks among subtasks. It allocates only for a key new to its table.
func (p *Plan) Fold(rec *Record, subtasks []*Tables) {
	for a := range p.aggs {
		ag := &p.aggs[a]
		if ag.filter != nil && !ag.filter.pass(&rec.Vals[ag.filter.field]) {
			continue
		}
		w := rec.TS - mod(rec.TS, ag.windowMS)
		rec.key = ag.codec.Append(rec.key[:0], w, rec.Vals)
		t := &subtasks[route(rec.key, len(subtasks))].aggs[a]
		off, ok := t.index[string(rec.key)]
		if !ok {
			off = len(t.accs)
			t.accs = slices.Grow(t.accs, len(ag.measures))[:off+len(ag.measures)]
			t.index[string(rec.key)] = off
		}
		for m := range ag.measures {
			ms, acc := &ag.measures[m], &t.accs[off+m]
			var v int64
			if ms.field >= 0 {
				v = rec.Vals[ms.field].Int
			}
			switch ms.kind {
			case kindCount:
				acc.N++
			case kindSum:
				acc.Sum.Add(v)
			case kindMin:
				if !ok || v < acc.N {
					acc.N = v
				}
			case kindMax:
				if !ok || v > acc.N {
					acc.N = v
				}
			}
		}
	}
}

// mod is the non-negative remainder, so windows floor for event times before 1970 too.
func mod(ts, w int64) int64 {
	if r := ts % w; r < 0 {
		return r + w
	}
	return ts % w
}

// route is FNV-1a of the encoded key: stable across processes and restarts.
func route(key []byte, n int) int {
	if n == 1 {
		return 0
	}
	h := uint64(14695981039346656037)
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return int(h % uint64(n))
}

func (f *filter) pass(v *Value) bool {
	if f.ints != nil {
		return slices.Contains(f.ints, v.Int)
	}
	for _, s := range f.strs {
		if string(v.Bytes) == s {
			return true
		}
	}
	return false
}

// Rows returns aggregate a's deltas sorted by primary key. The Accs alias the table.
func (t *Tables) Rows(a int) []Row {
	tb := &t.aggs[a]
	rows := make([]Row, 0, len(tb.index))
	n := 0
	for k, off := range tb.index {
		if n == 0 {
			n = len(tb.accs) / len(tb.index)
		}
		rows = append(rows, Row{Key: k, Accs: tb.accs[off : off+n : off+n]})
	}
	slices.SortFunc(rows, func(x, y Row) int { return strings.Compare(x.Key, y.Key) })
	return rows
}

// Drain is Rows that also empties aggregate a's table, so its map can be freed while the rows are
// written (at a flush of a million keys, map and rows would otherwise be live together). The rows
// keep the accumulators; the table starts again from nothing.
func (t *Tables) Drain(a int) []Row {
	rows := t.Rows(a)
	t.aggs[a] = table{index: map[string]int{}}
	return rows
}
