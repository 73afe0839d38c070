package spec

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// threeByThree has 3 dimensions (one nested) and 3 measures.
const threeByThree = `
input:
  fields:
    order_id: string(128)
    customer.region: string(16)
    channel: string(16)
    sku: string(64)
    qty: int
    amount: decimal(4)
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - table: sales
    window: 1m
    dimensions:
      - {column: region, field: customer.region}
      - {column: channel, field: channel}
      - {column: sku, field: sku}
    measures:
      - {column: orders, kind: count}
      - {column: amount_sum, kind: sum, field: amount}
      - {column: qty_max, kind: max, field: qty}
`

// defaultRecords are records of the default spec with the key space of the end-to-end benchmark
// (1000 skus over 10 one-minute windows), shaped as relay loadgen writes them (loadgen, which
// generates from a Plan, cannot be imported here).
func defaultRecords(n int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 9))
	const start = 1764000000000
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"order_id":"o-7-%d","sku":"SKU-%d","amount":"%d.%02d","ts":%d}`,
			i, rng.IntN(1000), rng.IntN(300), rng.IntN(100), start+rng.Int64N(10*60000))
	}
	return out
}

func threeByThreeRecords(n int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 8))
	regions, channels := []string{"eu", "us", "apac", "latam"}, []string{"web", "app", "store"}
	const start = 1764000000000
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"order_id":"o-%d","customer":{"id":%d,"region":%q},"channel":%q,"sku":"SKU-%d","qty":%d,"amount":"%d.%02d","ts":%d}`,
			i, rng.IntN(100000), regions[rng.IntN(len(regions))], channels[rng.IntN(len(channels))], rng.IntN(100),
			1+rng.IntN(9), rng.IntN(1000), rng.IntN(100), start+rng.Int64N(10*60000))
	}
	return out
}

// BenchmarkDecodeFold is the per-record CPU work the pipeline will do with a spec: decode and
// validate, then fold into one of 2 subtasks' tables (window, key, route, accumulate). Tables are
// warm: every key is present, the steady state inside an epoch.
func BenchmarkDecodeFold(b *testing.B) {
	def := defaultRecords(1 << 16)
	for _, c := range []struct {
		name string
		p    *Plan
		recs [][]byte
	}{
		{"default/keys=10k", defaultPlan(b, "order_stats_minute"), def},
		{"3dims3measures/keys=12k", mustParse(b, threeByThree), threeByThreeRecords(1 << 16)},
	} {
		b.Run(c.name, func(b *testing.B) {
			d, tabs := c.p.NewDecoder(), []*Tables{c.p.NewTables(), c.p.NewTables()}
			var r Record
			fold := func(p []byte) {
				if reason, field := d.Decode(p, &r); reason != OK {
					b.Fatal(reason, field)
				}
				c.p.Fold(&r, tabs)
			}
			for _, p := range c.recs {
				fold(p)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				fold(c.recs[i])
				i = (i + 1) & (len(c.recs) - 1)
			}
			b.ReportMetric(float64(tabs[0].Len(0)+tabs[1].Len(0)), "keys")
		})
	}
}

// BenchmarkFold is the fold alone (window, key, route, accumulate) of records decoded beforehand,
// into one of 2 subtasks' tables, which start again empty every epoch records, as at a checkpoint
// (so inserting each key once per epoch is counted at the end-to-end benchmark's rate).
func BenchmarkFold(b *testing.B) {
	for _, c := range []struct {
		name  string
		p     *Plan
		recs  [][]byte
		epoch int
	}{
		{"default/keys=10k/epoch=300k", defaultPlan(b, "order_stats_minute"), defaultRecords(1 << 16), 300000},
		{"3dims3measures/keys=12k/epoch=300k", mustParse(b, threeByThree), threeByThreeRecords(1 << 16), 300000},
	} {
		b.Run(c.name, func(b *testing.B) {
			d := c.p.NewDecoder()
			recs := make([]Record, len(c.recs))
			for i, p := range c.recs {
				if reason, field := d.Decode(p, &recs[i]); reason != OK {
					b.Fatal(reason, field)
				}
			}
			tabs := []*Tables{c.p.NewTables(), c.p.NewTables()}
			b.ReportAllocs()
			i, n := 0, 0
			for b.Loop() {
				c.p.Fold(&recs[i], tabs)
				i = (i + 1) & (len(recs) - 1)
				if n++; n == c.epoch {
					tabs, n = []*Tables{c.p.NewTables(), c.p.NewTables()}, 0
				}
			}
		})
	}
}
