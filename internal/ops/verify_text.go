// Verify's report for people. Invariant: it renders the VerifyReport only (the JSON is the operator
// interface); nothing here reads a database or decides a verdict.

package ops

import (
	"fmt"
	"io"
	"strings"

	"github.com/relay-sh/relay/internal/spec"
)

// WriteText renders the report for people.
func (r *VerifyReport) WriteText(w io.Writer) error {
	if r.Source == "recount" {
		fmt.Fprintf(w, "job %s: recounted %d records (%d good, %d bad) up to checkpoint %d\n", r.Job, r.Records, r.Good, r.Bad, *r.Checkpoint)
		var parts []string
		for _, rg := range r.Ranges {
			parts = append(parts, fmt.Sprintf("%s:%d [%d,%d)", rg.Topic, rg.Partition, rg.From, rg.To))
		}
		fmt.Fprintf(w, "  ranges: %s\n", strings.Join(parts, " "))
	} else {
		fmt.Fprintf(w, "job %s: compared with the expected totals file (%d bad records)\n", r.Job, r.Bad)
	}
	fmt.Fprintf(w, "  keys: %d expected, %d in MySQL; dead-letter rows: %d expected, %d found\n",
		r.KeysExpected, r.KeysActual, total(r.DeadLetter.Expected), total(r.DeadLetter.Actual))
	tables := map[string]TableReport{}
	for _, t := range r.Tables {
		tables[t.Table] = t
		fmt.Fprintf(w, "  table %s (%s): %d keys expected, %d in MySQL, %d differ\n",
			t.Table, strings.Join(t.KeyColumns, ", "), t.KeysExpected, t.KeysActual, t.DiffCount)
	}
	if d := r.Detail; d != nil {
		fmt.Fprintf(w, "  append sink %s: %d rows expected, %d found, %d duplicated\n", d.Table, d.Expected, d.Rows, d.Duplicates)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	for _, d := range r.Differences {
		t := tables[d.Table]
		// The key as window_start "dim" "dim", the measures as column value, in column order.
		key := d.Key[spec.WindowColumn]
		for _, c := range t.KeyColumns[1:] {
			key += fmt.Sprintf(" %q", d.Key[c])
		}
		measures := func(m map[string]string) string {
			var s []string
			for _, c := range t.MeasureColumns {
				s = append(s, c+" "+m[c])
			}
			return strings.Join(s, ", ")
		}
		switch d.Kind {
		case DiffMissing:
			fmt.Fprintf(w, "missing  %s %s: expected %s; MySQL has no row\n", d.Table, key, measures(d.Expected))
		case DiffExtra:
			fmt.Fprintf(w, "extra    %s %s: MySQL has %s; none expected\n", d.Table, key, measures(d.Actual))
		default:
			fmt.Fprintf(w, "differs  %s %s: expected %s; MySQL has %s\n", d.Table, key, measures(d.Expected), measures(d.Actual))
		}
	}
	if n := r.DiffCount - len(r.Differences); n > 0 {
		fmt.Fprintf(w, "... and %d more differing keys (--limit 0 lists all)\n", n)
	}
	if !equalCounts(r.DeadLetter.Expected, r.DeadLetter.Actual) {
		fmt.Fprintf(w, "dead-letter rows by reason differ: expected %v, found %v\n", r.DeadLetter.Expected, r.DeadLetter.Actual)
	}
	for _, b := range r.DeadLetter.Missing {
		fmt.Fprintf(w, "dead-letter missing  %s:%d@%d (%s)\n", b.Topic, b.Partition, b.Offset, b.Reason)
	}
	for _, b := range r.DeadLetter.Extra {
		fmt.Fprintf(w, "dead-letter extra    %s:%d@%d (%s)\n", b.Topic, b.Partition, b.Offset, b.Reason)
	}
	if n := r.DeadLetter.MissingCount + r.DeadLetter.ExtraCount - len(r.DeadLetter.Missing) - len(r.DeadLetter.Extra); n > 0 {
		fmt.Fprintf(w, "... and %d more dead-letter differences (--limit 0 lists all)\n", n)
	}
	if !r.Detail.clean() {
		fmt.Fprintf(w, "append sink %s differs: %d rows for %d good records, %d duplicated\n", r.Detail.Table, r.Detail.Rows, r.Detail.Expected, r.Detail.Duplicates)
	}
	if r.Clean {
		fmt.Fprintln(w, "no differences")
	}
	return nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
