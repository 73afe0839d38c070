package aggregate

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
)

// benchKeys is a realistic key mix: skus SKU-0..SKU-(skus-1) spread over windows one-minute windows,
// drawn uniformly (as relay loadgen does), with amounts in money units.
type benchRec struct {
	ts     int64
	sku    []byte
	amount int64
}

func benchRecs(n, skus, windows int) []benchRec {
	rng := rand.New(rand.NewPCG(1, 2))
	const start = 1764000000000 - 1764000000000%60000
	out := make([]benchRec, n)
	for i := range out {
		out[i] = benchRec{
			ts:     start + rng.Int64N(int64(windows)*60000),
			sku:    []byte("SKU-" + strconv.Itoa(rng.IntN(skus))),
			amount: rng.Int64N(1_000_000_0000),
		}
	}
	return out
}

// BenchmarkTableAdd folds one order into a table. "hot" is the steady state inside an epoch (every
// key already present: no allocation expected); "epoch" starts a new table every epochRecs records,
// as relay does at each checkpoint, so the per-key allocations are amortised over an epoch.
func BenchmarkTableAdd(b *testing.B) {
	const windowMS = 60000
	for _, c := range []struct {
		name          string
		skus, windows int
		epochRecs     int // 0: never reset
	}{
		{"hot/keys=1k", 100, 10, 0},
		{"hot/keys=10k", 1000, 10, 0},
		{"hot/space=1M", 100000, 10, 0},
		{"epoch/keys=10k/recs=300k", 1000, 10, 300000},
		{"epoch/keys=10k/recs=60k", 1000, 10, 60000},
	} {
		b.Run(c.name, func(b *testing.B) {
			recs := benchRecs(1<<20, c.skus, c.windows)
			t := NewTable()
			for _, r := range recs { // warm: every key present
				t.Add(Window(r.ts, windowMS), r.sku, r.amount)
			}
			if c.epochRecs > 0 {
				t = NewTable()
			}
			b.ReportAllocs()
			i, inEpoch := 0, 0
			for b.Loop() {
				r := &recs[i]
				t.Add(Window(r.ts, windowMS), r.sku, r.amount)
				i = (i + 1) & (len(recs) - 1)
				if c.epochRecs > 0 {
					if inEpoch++; inEpoch == c.epochRecs {
						t, inEpoch = NewTable(), 0
					}
				}
			}
			b.ReportMetric(float64(t.Len()), "keys")
		})
	}
}

// BenchmarkRoute is the per-record subtask routing (FNV-1a of the primary key).
func BenchmarkRoute(b *testing.B) {
	recs := benchRecs(1<<16, 1000, 10)
	b.ReportAllocs()
	i, sum := 0, 0
	for b.Loop() {
		r := &recs[i]
		sum += Route(Window(r.ts, 60000), r.sku, 4)
		i = (i + 1) & (len(recs) - 1)
	}
	_ = sum
}

// BenchmarkRows is the per-checkpoint sort of one subtask's table.
func BenchmarkRows(b *testing.B) {
	for _, keys := range []int{10000, 100000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			t := NewTable()
			for _, r := range benchRecs(keys*4, keys/10, 10) {
				t.Add(Window(r.ts, 60000), r.sku, r.amount)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = t.Rows()
			}
			b.ReportMetric(float64(t.Len()), "keys")
		})
	}
}

// BenchmarkTableMemory reports the live heap one epoch's tables hold per distinct key (after a GC),
// at about a million keys: the in-memory cost behind relay's peak RSS with a large epoch.
func BenchmarkTableMemory(b *testing.B) {
	recs := benchRecs(3<<20, 100000, 10)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		t := NewTable()
		for i := range recs {
			r := &recs[i]
			t.Add(Window(r.ts, 60000), r.sku, r.amount)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(t.Len()), "heapB/key")
		b.ReportMetric(float64(t.Len()), "keys")
		rows := t.Rows()
		runtime.GC()
		var withRows runtime.MemStats
		runtime.ReadMemStats(&withRows)
		b.ReportMetric(float64(withRows.HeapAlloc-after.HeapAlloc)/float64(len(rows)), "rowsB/key")
		runtime.KeepAlive(t)
		runtime.KeepAlive(rows)
	}
}

// internedTable is a candidate layout for Table, here only to be measured against it: skus are
// interned to dense ids, the map key is a pointer-free struct and the deltas live in one slice, so
// an Add touches no string data but the (small, hot) sku map's and allocates nothing per new key
// once the slice has grown.
type internedTable struct {
	skus map[string]uint32
	idx  map[internedKey]uint32
	accs []Acc
}

type internedKey struct {
	window int64
	sku    uint32
}

func newInternedTable() *internedTable {
	return &internedTable{skus: map[string]uint32{}, idx: map[internedKey]uint32{}}
}

func (t *internedTable) Add(windowMS int64, sku []byte, amount int64) {
	id, ok := t.skus[string(sku)]
	if !ok {
		id = uint32(len(t.skus))
		t.skus[string(sku)] = id
	}
	k := internedKey{windowMS, id}
	i, ok := t.idx[k]
	if !ok {
		i = uint32(len(t.accs))
		t.accs = append(t.accs, Acc{})
		t.idx[k] = i
	}
	a := &t.accs[i]
	a.Count++
	a.Sum.Add(amount)
}

var churnSink []byte

// BenchmarkTableAddChurn is TableAdd (10k keys, warm) with the memory traffic relay's consume loop
// has around each Add: confluent-kafka-go allocates about 360 B in 6 objects per message (see the
// allocation profile in docs/BENCHMARKS.md), which evicts the table from cache between Adds. It
// compares the current Table with internedTable.
func BenchmarkTableAddChurn(b *testing.B) {
	recs := benchRecs(1<<16, 1000, 10)
	type adder interface{ Add(int64, []byte, int64) }
	for _, c := range []struct {
		name  string
		table adder
	}{{"Table", NewTable()}, {"interned", newInternedTable()}} {
		for _, churn := range []bool{false, true} {
			name := c.name + "/quiet"
			if churn {
				name = c.name + "/churn=360B"
			}
			b.Run(name, func(b *testing.B) {
				t := c.table
				for _, r := range recs {
					t.Add(Window(r.ts, 60000), r.sku, r.amount)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if churn {
						for k := 0; k < 6; k++ {
							churnSink = make([]byte, 60)
							churnSink[0] = byte(i)
						}
					}
					r := &recs[i&(len(recs)-1)]
					t.Add(Window(r.ts, 60000), r.sku, r.amount)
					i++
				}
			})
		}
	}
}
