package spec

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/money"
)

// record renders one record of the multi spec.
func record(status, region string, qty int, price string, at time.Time) []byte {
	return fmt.Appendf(nil, `{"order_id":"o","status":%q,"customer":{"region":%q},"qty":%d,"price":%q,"meta":{"at":%q}}`,
		status, region, qty, price, at.Format(time.RFC3339Nano))
}

func foldAll(t testing.TB, p *Plan, subtasks []*Tables, recs ...[]byte) {
	t.Helper()
	d := p.NewDecoder()
	var r Record
	for _, b := range recs {
		if reason, field := d.Decode(b, &r); reason != OK {
			t.Fatalf("%s: %v %s", b, reason, field)
		}
		p.Fold(&r, subtasks)
	}
}

// Fold applies the filter and each aggregate's window; min and max start from the first value,
// counts and sums add; a key lands in one subtask only, and the subtasks together hold what one
// table would.
func TestFold(t *testing.T) {
	p := mustParse(t, multi)
	h := time.Date(2025, 11, 24, 16, 0, 0, 0, time.UTC)
	recs := [][]byte{
		record("paid", "eu", 2, "10.50", h.Add(time.Minute)),
		record("shipped", "eu", 2, "-3", h.Add(59*time.Minute)),
		record("paid", "eu", 2, "7.25", h.Add(61*time.Minute)), // next hour
		record("cancelled", "eu", 2, "1", h),                   // filtered out of the hourly table only
		record("paid", "us", 5, "0.01", h),
		record("paid", "eu", 9, "4", h),
	}
	one := []*Tables{p.NewTables()}
	foldAll(t, p, one, recs...)
	three := []*Tables{p.NewTables(), p.NewTables(), p.NewTables()}
	foldAll(t, p, three, recs...)

	type acc struct {
		n   int64
		sum string
	}
	got := map[string][]acc{}
	for _, r := range one[0].Rows(0) {
		w, dims, err := p.aggs[0].codec.Decode([]byte(r.Key), nil)
		if err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s/%s/%d", time.UnixMilli(w).UTC().Format("15:04"), dims[0].Bytes, dims[1].Int)
		for _, a := range r.Accs {
			got[k] = append(got[k], acc{a.N, a.Sum.String()})
		}
	}
	// Accs per measure: orders (count), revenue (sum, cents), cheapest (min, cents), most_qty (max),
	// units (sum); Sum.String shows units of 10^-4, so 750 cents print as 0.0750.
	want := map[string][]acc{
		"16:00/eu/2": {{2, "0.0000"}, {0, "0.0750"}, {-300, "0.0000"}, {2, "0.0000"}, {0, "0.0004"}},
		"17:00/eu/2": {{1, "0.0000"}, {0, "0.0725"}, {725, "0.0000"}, {2, "0.0000"}, {0, "0.0002"}},
		"16:00/us/5": {{1, "0.0000"}, {0, "0.0001"}, {1, "0.0000"}, {5, "0.0000"}, {0, "0.0005"}},
		"16:00/eu/9": {{1, "0.0000"}, {0, "0.0400"}, {400, "0.0000"}, {9, "0.0000"}, {0, "0.0009"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hourly rows\n%v\nwant\n%v", got, want)
	}
	day := one[0].Rows(1)
	if len(day) != 1 || day[0].Accs[0].N != 6 || day[0].Accs[1].N != 1050 {
		t.Fatalf("daily rows %+v", day)
	}
	for a := range p.aggs {
		total, seen := 0, map[string]bool{}
		for _, st := range three {
			for _, r := range st.Rows(a) {
				if seen[r.Key] {
					t.Fatalf("aggregate %d: key %q in two subtasks", a, r.Key)
				}
				seen[r.Key] = true
				total++
			}
		}
		if total != one[0].Len(a) {
			t.Fatalf("aggregate %d: %d keys over subtasks, %d in one table", a, total, one[0].Len(a))
		}
	}
	if one[0].Len(0) != 4 || routeSpread(three, 0) < 2 {
		t.Fatalf("%d hourly keys, spread over %d subtasks", one[0].Len(0), routeSpread(three, 0))
	}
}

func routeSpread(subtasks []*Tables, a int) int {
	n := 0
	for _, st := range subtasks {
		if st.Len(a) > 0 {
			n++
		}
	}
	return n
}

func TestAppendScaled(t *testing.T) {
	for _, c := range []struct {
		units int64
		scale int
		want  string
	}{{0, 0, "0"}, {5, 0, "5"}, {-5, 0, "-5"}, {0, 2, "0.00"}, {-1, 2, "-0.01"}, {123456, 2, "1234.56"},
		{15000, 4, "1.5000"}, {-1, 4, "-0.0001"}, {1 << 62, 0, "4611686018427387904"}} {
		if got := string(appendScaled(nil, money.SumOf(c.units), c.scale)); got != c.want {
			t.Errorf("appendScaled(%d, %d) = %s, want %s", c.units, c.scale, got, c.want)
		}
	}
}

// Windows floor, also before 1970 (DATETIME goes back to year 1000): -1 ms is in the window that
// starts at -60000, not in the one at 0.
func TestFoldWindowsFloor(t *testing.T) {
	p := mustParse(t, `
input:
  fields: {k: int}
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - {table: t, window: 1m, dimensions: [{column: k, field: k}], measures: [{column: n, kind: count}]}
`)
	p.limits.MinTS = -1 << 50
	st := []*Tables{p.NewTables()}
	foldAll(t, p, st, []byte(`{"k":1,"ts":-1}`), []byte(`{"k":1,"ts":-60000}`), []byte(`{"k":1,"ts":0}`), []byte(`{"k":1,"ts":59999}`))
	var got []string
	for _, r := range st[0].Rows(0) {
		w, _, err := p.aggs[0].codec.Decode([]byte(r.Key), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%d", w, r.Accs[0].N))
	}
	if want := "[-60000:2 0:2]"; fmt.Sprint(got) != want {
		t.Fatalf("windows %v, want %s", got, want)
	}
}

// Keys counts every aggregate's keys; Drain returns an aggregate's rows and leaves its table empty
// (the others untouched), and the table folds again from nothing.
func TestDrain(t *testing.T) {
	p := mustParse(t, multi)
	h := time.Date(2025, 11, 24, 16, 0, 0, 0, time.UTC)
	st := []*Tables{p.NewTables()}
	foldAll(t, p, st, record("paid", "eu", 1, "1", h), record("paid", "us", 1, "2", h), record("cancelled", "eu", 1, "3", h))
	if n := st[0].Keys(); n != 3 { // 2 hourly keys (cancelled is filtered out), 1 daily
		t.Fatalf("%d keys, want 3", n)
	}
	rows := st[0].Drain(0)
	if len(rows) != 2 || st[0].Len(0) != 0 || st[0].Len(1) != 1 || st[0].Keys() != 1 {
		t.Fatalf("drained %d rows; left %d and %d keys", len(rows), st[0].Len(0), st[0].Len(1))
	}
	if rows[0].Accs[0].N != 1 || rows[1].Accs[0].N != 1 {
		t.Fatalf("drained rows %+v", rows)
	}
	foldAll(t, p, st, record("paid", "eu", 1, "1", h))
	if r := st[0].Rows(0); len(r) != 1 || r[0].Accs[0].N != 1 || rows[0].Accs[0].N != 1 {
		t.Fatalf("after drain: %+v, drained %+v", r, rows)
	}
}

// Windows are UTC (README, docs/PIPELINES.md): a 24h window is a UTC day, and an event time with an
// offset lands in the UTC day it falls in, whatever the local zone of the process.
func TestWindowsAreUTC(t *testing.T) {
	p := mustParse(t, `
input:
  fields: {k: int}
  event_time: {field: at, format: rfc3339}
aggregates:
  - {table: t, window: 24h, dimensions: [{column: k, field: k}], measures: [{column: n, kind: count}]}
`)
	saved := time.Local
	time.Local = time.FixedZone("UTC-5", -5*3600)
	defer func() { time.Local = saved }()
	st := []*Tables{p.NewTables()}
	// 23:30 at UTC-5 is 04:30 the next day in UTC; 00:30 at UTC+2 is 22:30 the day before.
	foldAll(t, p, st, []byte(`{"k":1,"at":"2025-11-24T23:30:00-05:00"}`), []byte(`{"k":2,"at":"2025-11-25T00:30:00+02:00"}`))
	var got []string
	for _, r := range st[0].Rows(0) {
		cols, err := p.Format(0, r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, cols[0]+" k="+cols[1])
	}
	slices.Sort(got)
	if want := []string{"2025-11-24 00:00:00 k=2", "2025-11-25 00:00:00 k=1"}; !slices.Equal(got, want) {
		t.Fatalf("windows %v, want the UTC days %v", got, want)
	}
	// What MySQL is sent: the same UTC days.
	sql := string(p.AppendUpsert(nil, 0, st[0].Rows(0)))
	if !strings.Contains(sql, "('2025-11-24 00:00:00',2,") || !strings.Contains(sql, "('2025-11-25 00:00:00',1,") {
		t.Fatalf("upsert does not write the UTC days: %s", sql)
	}
}
