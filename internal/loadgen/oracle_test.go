package loadgen

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/test/oracle"
)

// The totals of escaped streams with bad records and aborted transactions (relay's decoder and
// fold) equal the oracle's recount of the committed payloads (Totals.Committed): every table row
// by row, every bad record's reason in order. This is how a crash test can take its expected
// totals from the oracle.
func TestTotalsAgreeWithTheOracle(t *testing.T) {
	type specs struct {
		plan   *spec.Plan
		oracle *oracle.Spec
	}
	cases := map[string]specs{"default": {DefaultPlan(), oracle.Default()}}
	for seed := range 4 {
		y, scale, format := randomSpecYAML(seed)
		o, err := oracle.Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		cases[fmt.Sprintf("decimal(%d)/%s", scale, format)] = specs{plan: func() *spec.Plan { p, _, _ := randomSpec(t, seed); return p }(), oracle: o}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewGenerator(Options{Plan: c.plan, Seed: 23, SKUs: 30, Windows: 90, BadRate: 0.05, Escape: true})
			tot := NewTotals()
			if err := tot.use(g.plan); err != nil {
				t.Fatal(err)
			}
			for batch := range 100 {
				recs := make([]pendingRec, 50)
				for i := range recs {
					_, recs[i] = g.Next()
				}
				if err := tot.record(recs, batch%7 != 3); err != nil {
					t.Fatal(err)
				}
			}
			payloads, err := tot.Committed()
			if err != nil {
				t.Fatal(err)
			}
			res := c.oracle.Fold(payloads)
			x, bad, good := tot.Snapshot()
			if good+int64(len(bad)) != int64(len(payloads)) || len(bad) == 0 || tot.Aborted == 0 {
				t.Fatalf("%d good, %d bad, %d aborted, %d payloads kept", good, len(bad), tot.Aborted, len(payloads))
			}
			for a, table := range x.Plan.Tables() {
				want := res.Table(table)
				if want == nil {
					t.Fatalf("the oracle has no table %s", table)
				}
				var got [][]string
				for _, r := range x.Rows[a] {
					cols, err := x.Plan.Format(a, r)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, cols)
				}
				if len(got) == 0 || !slices.EqualFunc(got, want.Rows, slices.Equal[[]string]) {
					t.Fatalf("%s: loadgen's totals (%d rows) differ from the oracle's (%d rows); first rows:\n%q\n%q", table, len(got), len(want.Rows), got[:min(3, len(got))], want.Rows[:min(3, len(want.Rows))])
				}
			}
			var reasons, oracleReasons []string
			for _, b := range bad {
				reasons = append(reasons, b.Reason)
			}
			for _, b := range res.Bad {
				oracleReasons = append(oracleReasons, b.Reason)
			}
			if !slices.Equal(reasons, oracleReasons) {
				t.Fatalf("bad records: loadgen %s, the oracle %s", strings.Join(reasons, ","), strings.Join(oracleReasons, ","))
			}
		})
	}
}
