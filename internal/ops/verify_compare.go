// Verify's comparison. Invariant: every aggregate table of the spec is compared key for key with
// what was expected (a recount or a loadgen totals file), to the last fractional digit, and dead
// letters by source position (or by reason, against a totals file); a clean job shows no difference.

package ops

import (
	"cmp"
	"context"
	"fmt"

	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/spec"
)

// compareFile reads a loadgen totals file of the job's spec and the tables it is compared with;
// dead letters are compared by reason.
func (e *Env) compareFile(ctx context.Context, r *VerifyReport, plan *spec.Plan, path string) (want, got [][]spec.Row, err error) {
	f, err := loadgen.ReadFile(path, plan)
	if err != nil {
		return nil, nil, fmt.Errorf("--expected: %w", err)
	}
	if got, err = readTables(ctx, e.Sink, plan); err != nil {
		return nil, nil, err
	}
	rows, err := readDeadLetters(ctx, e.Sink, e.Config.MySQL.DLQTable, e.Config.Job.Name)
	if err != nil {
		return nil, nil, err
	}
	r.DeadLetter = DeadLetterDiff{Expected: f.BadRecords, Actual: byReason(rows), Missing: []BadRecord{}, Extra: []BadRecord{}}
	if r.DeadLetter.Expected == nil {
		r.DeadLetter.Expected = map[string]int{}
	}
	for _, n := range f.BadRecords {
		r.Bad += int64(n)
	}
	r.Good = f.GoodOrders
	if t := e.Config.MySQL.DetailTable; t != "" {
		r.Detail = &DetailDiff{Table: t, Expected: f.GoodOrders}
		var distinct int64
		if err := e.Sink.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT src_topic, src_partition, src_offset) FROM `"+t+"`").
			Scan(&r.Detail.Rows, &distinct); err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", t, err)
		}
		r.Detail.Duplicates = r.Detail.Rows - distinct
	}
	return f.Tables.Rows, got, nil
}

// compare lists, table by table, every key whose MySQL row (got) differs from the expected one.
func (r *VerifyReport) compare(plan *spec.Plan, want, got [][]spec.Row) error {
	var err error
	for a, table := range plan.Tables() {
		key, measures := plan.ColumnNames(a)
		t := TableReport{Table: table, KeyColumns: key, MeasureColumns: measures, KeysExpected: len(want[a]), KeysActual: len(got[a])}
		// values is a row's key and measures by column name.
		values := func(row *spec.Row) (k, m map[string]string) {
			cols, ferr := plan.Format(a, *row)
			if ferr != nil {
				err = cmp.Or(err, ferr)
				return nil, nil
			}
			k, m = map[string]string{}, map[string]string{}
			for i, c := range key {
				k[c] = cols[i]
			}
			for i, c := range measures {
				m[c] = cols[len(key)+i]
			}
			return k, m
		}
		spec.Compare(want[a], got[a], func(w, g *spec.Row) {
			d := KeyDiff{Table: table, Kind: DiffDiffers}
			if w != nil {
				d.Key, d.Expected = values(w)
			}
			if g != nil {
				d.Key, d.Actual = values(g)
			}
			switch {
			case g == nil:
				d.Kind = DiffMissing
			case w == nil:
				d.Kind = DiffExtra
			}
			r.Differences = append(r.Differences, d)
			t.DiffCount++
		})
		r.Tables = append(r.Tables, t)
		r.KeysExpected += t.KeysExpected
		r.KeysActual += t.KeysActual
		r.DiffCount += t.DiffCount
	}
	return err
}

// diffDeadLetters pairs bad records with dead-letter rows by source position and reason.
func diffDeadLetters(bad, rows []BadRecord) DeadLetterDiff {
	d := DeadLetterDiff{Expected: byReason(bad), Actual: byReason(rows), Missing: []BadRecord{}, Extra: []BadRecord{}}
	seen := map[BadRecord]int{}
	for _, b := range rows {
		seen[b]++
	}
	for _, b := range bad {
		if seen[b] == 0 {
			d.Missing = append(d.Missing, b)
			continue
		}
		seen[b]--
	}
	for _, b := range rows {
		if seen[b] > 0 {
			d.Extra = append(d.Extra, b)
			seen[b]--
		}
	}
	return d
}

func byReason(bs []BadRecord) map[string]int {
	m := map[string]int{}
	for _, b := range bs {
		m[b.Reason]++
	}
	return m
}

func equalCounts(a, b map[string]int) bool {
	for k, n := range a {
		if b[k] != n {
			return false
		}
	}
	for k, n := range b {
		if a[k] != n {
			return false
		}
	}
	return true
}
