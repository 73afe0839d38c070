// Reading an aggregate table back, for `relay verify`, loadgen's totals file and the tests.
// Invariant: ParseRow of what Select returns gives the Row that Fold would have made for the same
// totals (the same encoded key, the same accumulators), and Format is its inverse (the columns as
// MySQL prints them), so a table, a recount and a totals file are compared key for key, exactly.

package spec

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/money"
)

// Select is the query reading every row of aggregate a, one column per ParseRow column: the window
// start and the measures as text (exact, whatever the driver's time and decimal settings), string
// dimensions as their bytes.
func (p *Plan) Select(a int) string {
	ag := &p.aggs[a]
	var b strings.Builder
	b.WriteString("SELECT CAST(" + WindowColumn + " AS CHAR)")
	for _, d := range ag.dims {
		if p.fields[d.field].typ == typeInt {
			b.WriteString(", CAST(" + d.column + " AS CHAR)")
		} else {
			b.WriteString(", " + d.column)
		}
	}
	for _, m := range ag.measures {
		b.WriteString(", CAST(" + m.column + " AS CHAR)")
	}
	b.WriteString(" FROM `" + ag.table + "`")
	return b.String()
}

// Columns is the number of columns Select reads for aggregate a.
func (p *Plan) Columns(a int) int { return 1 + len(p.aggs[a].dims) + len(p.aggs[a].measures) }

// ColumnNames are aggregate a's columns in Select's order, split into the primary key (window_start,
// then the dimensions) and the measures.
func (p *Plan) ColumnNames(a int) (key, measures []string) {
	ag := &p.aggs[a]
	key = []string{WindowColumn}
	for _, d := range ag.dims {
		key = append(key, d.column)
	}
	for _, m := range ag.measures {
		measures = append(measures, m.column)
	}
	return key, measures
}

// Format renders a row of aggregate a as the columns Select reads, as MySQL prints them:
// ParseRow(a, Format(a, r)) is r. It fails on a key the codec did not make.
func (p *Plan) Format(a int, r Row) ([]string, error) {
	ag := &p.aggs[a]
	window, dims, err := ag.codec.Decode([]byte(r.Key), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ag.table, err)
	}
	out := make([]string, 0, p.Columns(a))
	out = append(out, time.UnixMilli(window).UTC().Format("2006-01-02 15:04:05"))
	for i, v := range dims {
		if ag.codec.ints[i] {
			out = append(out, strconv.FormatInt(v.Int, 10))
		} else {
			out = append(out, string(v.Bytes))
		}
	}
	for j, m := range ag.measures {
		out = append(out, string(p.appendMeasure(nil, m, r.Accs[j])))
	}
	return out, nil
}

// Querier runs a query: a *sql.DB, *sql.Conn or *sql.Tx (verify reads in its snapshot's connection).
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Read reads every row of aggregate a's table, sorted by key as Rows returns a fold's.
func (p *Plan) Read(ctx context.Context, q Querier, a int) ([]Row, error) {
	table := p.aggs[a].table
	rows, err := q.QueryContext(ctx, p.Select(a))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	cols := make([][]byte, p.Columns(a))
	ptrs := make([]any, len(cols))
	for i := range cols {
		ptrs[i] = &cols[i]
	}
	var out []Row
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		r, err := p.ParseRow(a, cols)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	slices.SortFunc(out, func(x, y Row) int { return strings.Compare(x.Key, y.Key) })
	return out, nil
}

// ParseRow turns one row of Select(a) into its Row.
func (p *Plan) ParseRow(a int, cols [][]byte) (Row, error) {
	ag := &p.aggs[a]
	if len(cols) != p.Columns(a) {
		return Row{}, fmt.Errorf("%s: %d columns, want %d", ag.table, len(cols), p.Columns(a))
	}
	w, err := time.ParseInLocation("2006-01-02 15:04:05", string(cols[0]), time.UTC)
	if err != nil {
		return Row{}, fmt.Errorf("%s: %s: %w", ag.table, WindowColumn, err)
	}
	vals := make([]Value, len(p.fields))
	for i, d := range ag.dims {
		c := cols[1+i]
		if p.fields[d.field].typ == typeInt {
			if vals[d.field].Int, err = strconv.ParseInt(string(c), 10, 64); err != nil {
				return Row{}, fmt.Errorf("%s: %s: %w", ag.table, d.column, err)
			}
		} else {
			vals[d.field].Bytes = c
		}
	}
	r := Row{Key: string(ag.codec.Append(nil, w.UnixMilli(), vals)), Accs: make([]Acc, len(ag.measures))}
	for j, m := range ag.measures {
		c := string(cols[1+len(ag.dims)+j])
		if m.kind == kindSum {
			r.Accs[j].Sum, err = parseScaled(c, m.scale)
		} else if m.kind == kindCount || p.fields[m.field].typ == typeInt {
			r.Accs[j].N, err = strconv.ParseInt(c, 10, 64)
		} else {
			var s money.Sum
			if s, err = parseScaled(c, m.scale); err == nil {
				r.Accs[j].N, err = sumInt64(s)
			}
		}
		if err != nil {
			return Row{}, fmt.Errorf("%s: %s %q: %w", ag.table, m.column, c, err)
		}
	}
	return r, nil
}

// parseScaled reads a DECIMAL(38, scale) as MySQL prints it into a count of 10^-scale units: its
// point moved money.Scale-scale digits left, it is what money.ParseSum reads as that count.
func parseScaled(s string, scale int) (money.Sum, error) {
	neg := strings.HasPrefix(s, "-")
	digits := strings.Replace(strings.TrimPrefix(s, "-"), ".", "", 1)
	if i := strings.IndexByte(s, '.'); (i < 0 && scale != 0) || (i >= 0 && len(s)-i-1 != scale) {
		return money.Sum{}, fmt.Errorf("want %d fractional digits", scale)
	}
	if pad := money.Scale + 1 - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	t := digits[:len(digits)-money.Scale] + "." + digits[len(digits)-money.Scale:]
	if neg {
		t = "-" + t
	}
	return money.ParseSum(t)
}

var errRange = errors.New("out of int64 range")

// sumInt64 is s as an int64 (a min or max, which is one input value).
func sumInt64(s money.Sum) (int64, error) {
	str := strings.Replace(s.String(), ".", "", 1)
	n, err := strconv.ParseInt(str, 10, 64)
	if err != nil {
		return 0, errRange
	}
	return n, nil
}

// Same says whether two rows have one key and the same totals.
func Same(x, y Row) bool {
	if x.Key != y.Key || len(x.Accs) != len(y.Accs) {
		return false
	}
	for j := range x.Accs {
		if x.Accs[j].N != y.Accs[j].N || x.Accs[j].Sum.Cmp(y.Accs[j].Sum) != 0 {
			return false
		}
	}
	return true
}

// Compare calls each, in key order, for every key of want or got whose rows are not Same; the side
// that lacks the key is nil. want and got must be sorted by key (as Rows and Read return them).
func Compare(want, got []Row, each func(want, got *Row)) {
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || i < len(want) && want[i].Key < got[j].Key:
			each(&want[i], nil)
			i++
		case i == len(want) || got[j].Key < want[i].Key:
			each(nil, &got[j])
			j++
		default:
			if !Same(want[i], got[j]) {
				each(&want[i], &got[j])
			}
			i++
			j++
		}
	}
}
