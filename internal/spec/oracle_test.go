// The differential test: relay's decoder and fold against test/oracle, an implementation that
// shares no code with them (encoding/json, math/big, time, a plain map), over SEQUENCES of
// records, because bugs of reused memory only show across records. Invariant checked: for every
// spec below and every sequence, each record is valid or bad alike (the same reason and field),
// and every table holds the same rows, column for column as MySQL prints them, in the same order.
//
// The pipeline's reader decodes a whole poll into separate Records before the loop folds them
// (internal/pipeline/loop.go), and reuses those Records for the next poll; relayFold does the same.

package spec

import (
	"bytes"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/test/oracle"
)

// diffSpec is one spec run by both sides.
type diffSpec struct {
	name   string
	plan   *Plan
	oracle *oracle.Spec
	limits Limits
	yaml   string
}

// diffYAML are the specs beside the default: several tables, nested paths sharing prefixes,
// filters on strings and ints, every measure kind on ints and decimals of several scales, int and
// string dimensions (a string that is not the last column, so the key codec escapes it), both
// event-time formats, windows from 1 s to a day, event times before 1970.
var diffYAML = []struct {
	name, yaml string
	limits     Limits
}{
	{"shops", `
input:
  fields:
    order_id: string(16)
    status: string(8)
    customer.region: string(4)
    customer.tier: int
    shop: string(6)
    qty: int
    price: decimal(2)
    fee: decimal(0)
  event_time: {field: meta.at, format: rfc3339}
aggregates:
  - table: region_hour
    window: 1h
    dimensions: [{column: region, field: customer.region}, {column: tier, field: customer.tier}]
    measures:
      - {column: orders, kind: count}
      - {column: revenue, kind: sum, field: price}
      - {column: cheapest, kind: min, field: price}
      - {column: dearest, kind: max, field: price}
      - {column: units, kind: sum, field: qty}
      - {column: least_qty, kind: min, field: qty}
      - {column: most_qty, kind: max, field: qty}
      - {column: fees, kind: sum, field: fee}
    filter: {field: status, in: [paid, "é", "e\u0301"]}
  - table: shop_minute
    window: 1m
    dimensions: [{column: shop, field: shop}, {column: region, field: customer.region}]
    measures:
      - {column: n, kind: count}
      - {column: top_fee, kind: max, field: fee}
      - {column: low_fee, kind: min, field: fee}
  - table: tier_day
    window: 24h
    measures: [{column: n, kind: count}, {column: qty, kind: sum, field: qty}]
    filter: {field: customer.tier, in: ["1", "007", "-9223372036854775808"]}
`, Limits{MaxPayloadBytes: 600, MinTS: -2208988800000, MaxTS: 4102444800000, MaxUnits: 999999999999999999}},
	{"nested", `
input:
  fields:
    a.b: string(5)
    a.c: int
    x.y.z: decimal(4)
    k: string(3)
    a.d.e: decimal(1)
  event_time: {field: t, format: epoch_ms}
aggregates:
  - table: t15
    window: 15m
    dimensions: [{column: c, field: a.c}, {column: b, field: a.b}, {column: k, field: k}]
    measures:
      - {column: n, kind: count}
      - {column: lo, kind: min, field: x.y.z}
      - {column: hi, kind: max, field: x.y.z}
      - {column: s, kind: sum, field: x.y.z}
      - {column: e, kind: sum, field: a.d.e}
  - table: t1s
    window: 1s
    dimensions: [{column: k, field: k}]
    measures: [{column: n, kind: count}, {column: s, kind: sum, field: a.c}, {column: m, kind: max, field: a.c}]
    filter: {field: k, in: ["é", "A", "\0"]}
`, Limits{MaxPayloadBytes: 400, MinTS: -86400000 * 3, MaxTS: 86400000 * 3, MaxUnits: 100000000}},
}

func diffSpecs(t testing.TB) []diffSpec {
	defLim := order.DefaultLimits()
	plan, err := Compile(Default(order.DefaultFields(), defLim, "order_stats_minute", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{MaxPayloadBytes: defLim.MaxPayloadBytes, MinTS: defLim.MinTS, MaxTS: defLim.MaxTS, MaxUnits: defLim.MaxAmountUnits}
	// The crash tests take the oracle's default limits as relay's: they must be the same.
	def := oracle.Default()
	if ol := def.Limits; ol.MaxPayloadBytes != lim.MaxPayloadBytes || ol.MinEventTime.UnixMilli() != lim.MinTS ||
		ol.MaxEventTime.UnixMilli() != lim.MaxTS || ol.MaxAmount.Cmp(new(big.Rat).SetFrac64(lim.MaxUnits, 10000)) != 0 {
		t.Fatalf("oracle.DefaultLimits %+v, relay's %+v", ol, lim)
	}
	out := []diffSpec{{name: "default", plan: plan, oracle: def, limits: lim}}
	for _, d := range diffYAML {
		out = append(out, compileDiff(t, d.name, d.yaml, d.limits))
	}
	return out
}

// compileDiff compiles a spec for both sides, with the same limits.
func compileDiff(t testing.TB, name, yaml string, l Limits) diffSpec {
	plan, err := Parse([]byte(yaml), l)
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, yaml)
	}
	o, err := oracle.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, yaml)
	}
	o.Limits = oracle.Limits{MaxPayloadBytes: l.MaxPayloadBytes,
		MinEventTime: time.UnixMilli(l.MinTS).UTC(), MaxEventTime: time.UnixMilli(l.MaxTS).UTC(),
		MaxAmount: new(big.Rat).SetFrac64(l.MaxUnits, 10000)}
	return diffSpec{name: name, plan: plan, oracle: o, limits: l, yaml: yaml}
}

// relayFold decodes every payload into recs (grown as needed, reused across calls as the reader
// reuses a poll's records), then folds the valid ones into subtasks tables, and returns each
// record's reason and field and each table's rows as Format renders them, in key order. Each row
// must read back (ParseRow, as relay verify reads a table) to itself, and live in one subtask.
func relayFold(t testing.TB, p *Plan, recs *[]Record, payloads [][]byte, subtasks int) (verdicts []string, tables [][][]string) {
	d := p.NewDecoder()
	if len(*recs) < len(payloads) {
		*recs = append(*recs, make([]Record, len(payloads)-len(*recs))...)
	}
	for i, pl := range payloads {
		r, f := d.Decode(pl, &(*recs)[i])
		verdicts = append(verdicts, verdict(r.String(), f))
	}
	st := make([]*Tables, subtasks)
	for i := range st {
		st[i] = p.NewTables()
	}
	for i := range payloads {
		if verdicts[i] == "ok" {
			p.Fold(&(*recs)[i], st)
		}
	}
	for a := range p.Tables() {
		var rows []Row
		for _, s := range st {
			rows = append(rows, s.Rows(a)...)
		}
		slices.SortFunc(rows, func(x, y Row) int { return strings.Compare(x.Key, y.Key) })
		var out [][]string
		for i, r := range rows {
			if i > 0 && rows[i-1].Key == r.Key {
				t.Fatalf("%s: key %q in two subtasks", p.Tables()[a], r.Key)
			}
			cols, err := p.Format(a, r)
			if err != nil {
				t.Fatal(err)
			}
			// What relay verify reads back from the table must be the row itself.
			raw := make([][]byte, len(cols))
			for i, c := range cols {
				raw[i] = []byte(c)
			}
			if back, err := p.ParseRow(a, raw); err != nil || !Same(back, r) {
				t.Fatalf("%s: ParseRow(Format(%q)) = %v, %v", p.Tables()[a], cols, back, err)
			}
			out = append(out, cols)
		}
		tables = append(tables, out)
	}
	return verdicts, tables
}

func verdict(reason, field string) string {
	if reason == "" || reason == "ok" {
		return "ok"
	}
	if field == "" {
		return reason
	}
	return reason + " " + field
}

// differ folds payloads on both sides and returns "" or a report of every difference: the
// sequence with both verdicts, and each table's rows that only one side has.
func differ(t testing.TB, s diffSpec, recs *[]Record, payloads [][]byte, subtasks int) string {
	verdicts, tables := relayFold(t, s.plan, recs, payloads, subtasks)
	want := s.oracle.Fold(payloads)
	oracleVerdicts := make([]string, len(payloads))
	for i := range oracleVerdicts {
		oracleVerdicts[i] = "ok"
	}
	for _, b := range want.Bad {
		oracleVerdicts[b.Index] = verdict(b.Reason, b.Field)
	}
	var b strings.Builder
	for a, name := range s.plan.Tables() {
		wt := want.Table(name)
		if wt == nil {
			t.Fatalf("%s: the oracle has no table %s", s.name, name)
		}
		if slices.EqualFunc(tables[a], wt.Rows, slices.Equal[[]string]) {
			continue
		}
		fmt.Fprintf(&b, "table %s %q:\n", name, wt.Columns)
		has := func(rows [][]string, r []string) bool {
			return slices.ContainsFunc(rows, func(x []string) bool { return slices.Equal(x, r) })
		}
		for _, r := range tables[a] {
			if !has(wt.Rows, r) {
				fmt.Fprintf(&b, "  relay only:  %q\n", r)
			}
		}
		for _, r := range wt.Rows {
			if !has(tables[a], r) {
				fmt.Fprintf(&b, "  oracle only: %q\n", r)
			}
		}
		if !strings.Contains(b.String(), " only: ") {
			for i := range tables[a] {
				if !slices.Equal(tables[a][i], wt.Rows[i]) {
					fmt.Fprintf(&b, "  same rows, other order; first at row %d:\n    relay  %q\n    oracle %q\n", i, tables[a][i], wt.Rows[i])
					break
				}
			}
		}
	}
	if b.Len() == 0 && slices.Equal(verdicts, oracleVerdicts) {
		return ""
	}
	var seq strings.Builder
	fmt.Fprintf(&seq, "spec %s, %d subtasks, %d records (relay | oracle | payload):\n", s.name, subtasks, len(payloads))
	if s.name == "random" {
		fmt.Fprintf(&seq, "%s(limits %+v)\n", s.yaml, s.limits)
	}
	for i, p := range payloads {
		mark := " "
		if verdicts[i] != oracleVerdicts[i] {
			mark = "≠"
		}
		fmt.Fprintf(&seq, "%s %2d %s | %s | %s\n", mark, i, verdicts[i], oracleVerdicts[i], strconv.Quote(string(p)))
	}
	return seq.String() + b.String()
}

// TestDifferentialSequences runs random sequences for RELAY_TEST_DIFF_SECONDS (default 20; 0 runs one)
// from RELAY_TEST_DIFF_SEED (random if unset). Sequence i uses seed+i, so a failure names the seed that
// replays it first.
func TestDifferentialSequences(t *testing.T) {
	seed := testenv.Seed(t, "RELAY_TEST_DIFF_SEED", 0)
	budget := 20 * time.Second
	if v := os.Getenv("RELAY_TEST_DIFF_SECONDS"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("RELAY_TEST_DIFF_SECONDS: %v", err)
		}
		budget = time.Duration(n * float64(time.Second))
	}
	t.Logf("budget %s", budget)
	specs := diffSpecs(t)
	pools := make([][]Record, len(specs)+1)
	start := time.Now()
	n, records := 0, 0
	for ; n == 0 || time.Since(start) < budget; n++ {
		s := seed + uint64(n)
		spec, i, payloads, subtasks := sequence(t, specs, s, nil)
		records += len(payloads)
		if report := differ(t, spec, &pools[i], payloads, subtasks); report != "" {
			t.Fatalf("relay and the oracle differ on sequence %d (seed %d); replay it with\n"+
				"  RELAY_TEST_DIFF_SEED=%d RELAY_TEST_DIFF_SECONDS=0 go test -count=1 -run 'TestDifferentialSequences$' ./internal/spec/\n%s",
				n, s, s, report)
		}
	}
	t.Logf("%d sequences, %d records, no difference", n, records)
}

// FuzzSequences is the differential test under the fuzzer: seed picks the spec and drives the
// generator; lines, one record per line, come first in the sequence (the corpus holds known
// troublemakers there, such as issue 23's records). `go test` runs the committed corpus
// (testdata/fuzz/FuzzSequences); `make fuzz` explores.
func FuzzSequences(f *testing.F) {
	specs := diffSpecs(f)
	pools := make([][]Record, len(specs)+1)
	f.Fuzz(func(t *testing.T, seed uint64, lines []byte) {
		var raw [][]byte
		if len(lines) > 0 {
			raw = bytes.Split(lines, []byte("\n"))
		}
		spec, i, payloads, subtasks := sequence(t, specs, seed, raw)
		if report := differ(t, spec, &pools[i], payloads, subtasks); report != "" {
			t.Fatalf("relay and the oracle differ (seed %d):\n%s", seed, report)
		}
	})
}

// sequence derives from seed a spec (one of specs, or with seed%(len(specs)+1) == len(specs) a
// random one), 1 to 3 subtasks and the records: first, then up to 40 generated ones. i is the
// spec's index, len(specs) for a random one.
func sequence(t testing.TB, specs []diffSpec, seed uint64, first [][]byte) (s diffSpec, i int, payloads [][]byte, subtasks int) {
	i = int(seed % uint64(len(specs)+1))
	if i < len(specs) {
		s = specs[i]
	} else {
		s = randomSpec(t, seed)
	}
	g := newGen(s, seed)
	payloads = first
	for range g.rng.IntN(41) {
		payloads = append(payloads, g.record())
	}
	return s, i, payloads, 1 + g.rng.IntN(3)
}

// randomPaths share prefixes on purpose: "a" can be both a field and the parent of "a.b".
// Long names share their first eight bytes, which relay's key match compares as one word.
var randomPaths = []string{"a", "b", "a.b", "a.c", "c.d.e", "k", "c.x", "long_name_field", "long_name_fielD", "order_id", "order_idx"}

// randomSpec derives a spec from seed: 1 to 5 fields of random types and short bounds, either
// event-time format, 1 or 2 aggregates with random windows, dimensions, measures and filters, and
// tight limits, so that bounds are hit often.
func randomSpec(t testing.TB, seed uint64) diffSpec {
	rng := rand.New(rand.NewPCG(seed, 5))
	var y strings.Builder
	y.WriteString("input:\n  fields:\n")
	type fld struct{ path, typ string }
	var fields []fld
	for _, i := range rng.Perm(len(randomPaths))[:1+rng.IntN(5)] {
		typ := []string{"int", fmt.Sprintf("string(%d)", 1+rng.IntN(6)), fmt.Sprintf("decimal(%d)", rng.IntN(5))}[rng.IntN(3)]
		fields = append(fields, fld{randomPaths[i], typ})
		fmt.Fprintf(&y, "    %s: %s\n", randomPaths[i], typ)
	}
	format := []string{"epoch_ms", "rfc3339"}[rng.IntN(2)]
	fmt.Fprintf(&y, "  event_time: {field: %s, format: %s}\naggregates:\n", []string{"t", "m.t"}[rng.IntN(2)], format)
	for a := range 1 + rng.IntN(2) {
		fmt.Fprintf(&y, "  - table: r%d\n    window: %s\n    dimensions: [", a, []string{"1s", "1m", "90s", "15m", "1h", "24h"}[rng.IntN(6)])
		var keyable, numeric []fld
		for _, f := range fields {
			if strings.HasPrefix(f.typ, "decimal") {
				numeric = append(numeric, f)
			} else {
				keyable = append(keyable, f)
				if f.typ == "int" {
					numeric = append(numeric, f)
				}
			}
		}
		rng.Shuffle(len(keyable), func(i, j int) { keyable[i], keyable[j] = keyable[j], keyable[i] })
		for d, f := range keyable[:rng.IntN(len(keyable)+1)] {
			if d > 0 {
				y.WriteString(", ")
			}
			fmt.Fprintf(&y, "{column: d%d, field: %s}", d, f.path)
		}
		y.WriteString("]\n    measures:\n      - {column: n, kind: count}\n")
		for m, f := range numeric {
			fmt.Fprintf(&y, "      - {column: m%d, kind: %s, field: %s}\n", m, []string{"sum", "min", "max"}[rng.IntN(3)], f.path)
		}
		if len(keyable) > 0 && rng.IntN(3) == 0 {
			f := keyable[rng.IntN(len(keyable))]
			in := `["A", "é", "a/b", "\0", "1"]`
			if f.typ == "int" {
				in = `[0, "1", "-1", "007"]`
			}
			fmt.Fprintf(&y, "    filter: {field: %s, in: %s}\n", f.path, in)
		}
	}
	l := Limits{MaxPayloadBytes: 150 + rng.IntN(200), MinTS: -86400000 - rng.Int64N(86400000), MaxTS: 86400000 + rng.Int64N(86400000),
		MaxUnits: []int64{1000000, 999999999999999999, 0}[rng.IntN(3)]}
	if format == "rfc3339" {
		// 1900..2100, or all DATETIME holds (input.min_event_time's bound .. max_event_time's).
		l.MinTS, l.MaxTS = -2208988800000, 4102444800000
		if rng.IntN(2) == 0 {
			l.MinTS, l.MaxTS = -30610224000000, 253402214400000
		}
	}
	return compileDiff(t, "random", y.String(), l)
}
