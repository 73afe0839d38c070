// Expected totals from test/oracle. Invariant: what a crash test requires of MySQL's aggregate
// tables and dead-letter table is computed from the records Kafka committed (loadgen's
// Totals.Committed) by the oracle, which shares no code with relay's decoder and fold, and MySQL is
// read back as text by plain SQL, not by relay's spec: so a relay that mis-decodes or mis-folds a
// record cannot agree with itself and pass.

package crash

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/test/oracle"
)

// oracleSpec is the oracle's reading of a relay configuration file's pipeline block.
func oracleSpec(configYAML string) (*oracle.Spec, error) {
	var cfg struct {
		Pipeline yaml.Node `yaml:"pipeline"`
	}
	if err := yaml.Unmarshal([]byte(configYAML), &cfg); err != nil {
		return nil, err
	}
	b, err := yaml.Marshal(&cfg.Pipeline)
	if err != nil {
		return nil, err
	}
	return oracle.Parse(b)
}

// expectation is what relay must have written for the committed records.
type expectation struct {
	spec    *oracle.Spec
	result  *oracle.Result
	bad     []loadgen.Bad // the bad records, with the reason the oracle gives them
	records int
}

// expected folds what Kafka committed with the oracle, by the env's spec (the default spec
// unless the test set e.oracle).
func (e *env) expected(totals *loadgen.Totals) expectation {
	e.t.Helper()
	payloads, err := totals.Committed()
	if err != nil {
		e.t.Fatal(err)
	}
	return e.expectedOf(payloads)
}

// expectedOf folds payloads, the records Kafka committed, with the oracle: as JSON, or through
// the env's registry in its format.
func (e *env) expectedOf(payloads [][]byte) expectation {
	e.t.Helper()
	s := e.oracle
	if s == nil {
		s = oracle.Default()
	}
	x := expectation{spec: s, records: len(payloads)}
	var err error
	switch e.format {
	case "":
		x.result = s.Fold(payloads)
	case "avro":
		x.result, err = s.FoldAvro(oracle.NewAvroReader(e.registry), payloads)
	case "protobuf":
		x.result, err = s.FoldProtobuf(oracle.NewProtobufReader(e.registry), payloads)
	case "json_schema":
		x.result, err = s.FoldJSONSchema(oracle.NewJSONSchemaReader(e.registry), payloads)
	default:
		err = fmt.Errorf("the oracle reads no %s", e.format)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	for _, b := range x.result.Bad {
		if e.skipBad {
			break
		}
		x.bad = append(x.bad, loadgen.Bad{Reason: b.Reason, Payload: string(payloads[b.Index])})
	}
	return x
}

// diffOracle describes how MySQL's aggregate tables differ from the oracle's ("" when equal).
func (e *env) diffOracle(x expectation) string {
	var lines []string
	for i, want := range x.result.Tables {
		keyCols := 1 + len(x.spec.Tables[i].Dimensions)
		got, err := e.readText(want.Table, want.Columns, keyCols)
		if err != nil {
			e.t.Fatal(err)
		}
		key := func(r []string) string { return strings.Join(r[:keyCols], "\x00") }
		w, g := map[string][]string{}, map[string][]string{}
		for _, r := range want.Rows {
			w[key(r)] = r
		}
		for _, r := range got {
			g[key(r)] = r
		}
		for k, wr := range w {
			switch gr, ok := g[k]; {
			case !ok:
				lines = append(lines, fmt.Sprintf("%s %q: missing, want %q", want.Table, wr[:keyCols], wr[keyCols:]))
			case !slices.Equal(wr, gr):
				lines = append(lines, fmt.Sprintf("%s %q: want %q, got %q", want.Table, wr[:keyCols], wr[keyCols:], gr[keyCols:]))
			}
		}
		for k, gr := range g {
			if _, ok := w[k]; !ok {
				lines = append(lines, fmt.Sprintf("%s %q: unexpected row %q", want.Table, gr[:keyCols], gr[keyCols:]))
			}
		}
	}
	slices.Sort(lines)
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("... and %d more", len(lines)-10))
	}
	return strings.Join(lines, "\n")
}

// readText reads a table's columns as MySQL prints them, in primary-key order; a table relay has
// not created yet reads as empty.
func (e *env) readText(table string, cols []string, keyCols int) ([][]string, error) {
	casts := make([]string, len(cols))
	for i, c := range cols {
		casts[i] = "CAST(`" + c + "` AS CHAR)"
	}
	order := "`" + strings.Join(cols[:keyCols], "`, `") + "`"
	rows, err := e.db.QueryContext(context.Background(),
		"SELECT "+strings.Join(casts, ", ")+" FROM `"+table+"` ORDER BY "+order)
	if fault.IsMySQL(err, 1146) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", table, err)
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vals := make([]string, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}
