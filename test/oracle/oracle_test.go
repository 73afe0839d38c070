package oracle

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The oracle gives exactly the rows and bad records docs/PIPELINES.md's worked examples show: it
// is held to the document, not to relay.
func TestExamples(t *testing.T) {
	examples, err := ReadExamples("../../docs/PIPELINES.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples {
		s, err := Parse([]byte(ex.Spec))
		if err != nil {
			t.Fatalf("%s: %v", ex.Title, err)
		}
		var payloads [][]byte
		for _, r := range ex.Records {
			payloads = append(payloads, []byte(r))
		}
		res := s.Fold(payloads)
		for _, want := range ex.Tables {
			var got [][]string
			if want.Name == "relay_dlq" {
				for _, b := range res.Bad {
					got = append(got, []string{strconv.Itoa(b.Index + 1), b.Reason, b.Field})
				}
			} else {
				rows := res.Table(want.Name)
				if rows == nil {
					t.Fatalf("%s: no table %s", ex.Title, want.Name)
				}
				if !slices.Equal(rows.Columns, want.Cols) {
					t.Errorf("%s: %s columns %q, the document %q", ex.Title, want.Name, rows.Columns, want.Cols)
				}
				got = rows.Rows
			}
			if !slices.EqualFunc(got, want.Rows, slices.Equal[[]string]) {
				t.Errorf("%s: %s\n got %q\nwant %q", ex.Title, want.Name, got, want.Rows)
			}
		}
	}
}

// Issue 23's five records, with the rows the issue says are right (relay at b71fdfd counted the
// café order under sku-A).
func TestIssue23(t *testing.T) {
	in := []string{
		`{"order_id":"o-1","sku":"caf\u00e9","amount":"1.00","ts":1764000000000}`,
		`{"order_id":"o-2","sku":"sku-A","amount":"2.00","ts":1764000001000}`,
		`{"order_id":"o-3","sku":"sku-B","amount":"4.00","ts":1764000002000}`,
		`{"order_id":"o-4","sku":"sku-C","amount":"3.00","ts":1764000003000}`,
		`{"order_id":"o-5","sku":"\u0073ku-A","amount":"6.00","ts":1764000004000}`,
	}
	var payloads [][]byte
	for _, r := range in {
		payloads = append(payloads, []byte(r))
	}
	res := Default().Fold(payloads)
	var got []string
	for _, r := range res.Table("order_stats_minute").Rows {
		got = append(got, strings.Join(r, " "))
	}
	want := []string{"2025-11-24 16:00:00 café 1 1.0000", "2025-11-24 16:00:00 sku-A 2 8.0000",
		"2025-11-24 16:00:00 sku-B 1 4.0000", "2025-11-24 16:00:00 sku-C 1 3.0000"}
	if !slices.Equal(got, want) || len(res.Bad) != 0 {
		t.Fatalf("got %q, bad %v\nwant %q", got, res.Bad, want)
	}
}

// Verdicts the document states in words (docs/PIPELINES.md, input.fields and input.event_time).
func TestVerdicts(t *testing.T) {
	s, err := Parse([]byte(`
input:
  fields:
    s: string(4)
    n: int
    d: decimal(2)
  event_time: {field: at, format: rfc3339}
aggregates:
  - table: t
    window: 1m
    measures: [{column: c, kind: count}]
`))
	if err != nil {
		t.Fatal(err)
	}
	ok := `"s":"abcd","n":1,"d":"1.5","at":"2025-11-24T16:30:00.123Z"`
	for _, c := range []struct{ rec, want string }{
		{`{` + ok + `}`, ""},
		{`{` + ok + `,"s":"\u00e9\u00e9"}`, ""},
		{`{` + ok + `,"s":"\u00e9\u00e9a"}`, "too_long s"},
		{`{` + ok + `,"s":"\ud83d\ude00"}`, ""},
		{`{` + ok + `,"s":"\ud83d"}`, "bad_text s"},
		{`{` + ok + `,"s":"a\udc00"}`, "bad_text s"},
		{`{` + ok + `,"s":""}`, "empty_field s"},
		{`{` + ok + `,"s":null}`, "missing_field s"},
		{`{` + ok + `,"s":1}`, "wrong_type s"},
		{`{` + ok + `,"n":1.5}`, "wrong_type n"},
		{`{` + ok + `,"n":1e3}`, "wrong_type n"},
		{`{` + ok + `,"n":true}`, "wrong_type n"},
		{`{` + ok + `,"n":"12a"}`, "bad_int n"},
		{`{` + ok + `,"n":"+1"}`, "bad_int n"},
		{`{` + ok + `,"n":9223372036854775808}`, "bad_int n"},
		{`{` + ok + `,"n":"-9223372036854775808"}`, ""},
		{`{` + ok + `,"d":"1.234"}`, "amount_precision d"},
		{`{` + ok + `,"d":1.23e1}`, ""},
		{`{` + ok + `,"d":"123456789012345678901.00001"}`, "amount_precision d"},
		{`{` + ok + `,"d":"1.23456e99"}`, "amount_range d"},
		{`{` + ok + `,"d":"1e99"}`, "amount_range d"},
		{`{` + ok + `,"d":"abc"}`, "bad_amount d"},
		{`{` + ok + `,"at":"2025-11-24T16:30:00+24:00"}`, "bad_ts at"},
		{`{` + ok + `,"at":"1999-12-31T23:59:59.999Z"}`, "ts_range at"},
		{`{` + ok + `,"at":1764000000000}`, "wrong_type at"},
		{`{"s":"abcd","n":1,"d":"1.5","at":"2025-11-24T16:30:00Z","s":{"x":1}}`, "wrong_type s"},
		{`{"\u0073":"abcd","n":1,"d":"1.5","at":"2025-11-24T16:30:00Z"}`, ""},
		{"{\"s\":\"a\xff\"}", "not_json"},
		{`[1]`, "not_object"},
	} {
		r, f := s.Check([]byte(c.rec))
		if got := strings.TrimSpace(r + " " + f); got != c.want {
			t.Errorf("%s: %q, want %q", c.rec, got, c.want)
		}
	}
}
