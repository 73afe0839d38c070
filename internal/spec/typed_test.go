package spec

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
)

// The typed Set methods give the JSON decoder's verdict and value for the same field value: a
// binary format's record folds exactly as the JSON record with the same values would.
func TestTypedValuesMatchJSON(t *testing.T) {
	p := threeFieldPlan(t)
	dec := p.NewDecoder()
	const good = `"s": "ab", "i": 7, "d": "1.5", "t": "2024-01-02T03:04:05.678Z"`
	// json decodes one record with the given member replaced; typed fills the same value.
	json := func(member string) (Reason, Record) {
		key := member[:strings.IndexByte(member, ':')]
		var parts []string
		for _, m := range strings.Split(good, ", ") {
			if !strings.HasPrefix(m, key+":") {
				parts = append(parts, m)
			}
		}
		var rec Record
		r, _ := dec.Decode([]byte("{"+strings.Join(append(parts, member), ", ")+"}"), &rec)
		return r, rec
	}
	check := func(what string, jr Reason, jrec Record, tr Reason, trec Record, field int) {
		t.Helper()
		if jr != tr {
			t.Errorf("%s: JSON says %s, the typed path %s", what, jr, tr)
			return
		}
		if jr != OK {
			return
		}
		if field < 0 {
			if jrec.TS != trec.TS {
				t.Errorf("%s: JSON reads %d, the typed path %d", what, jrec.TS, trec.TS)
			}
		} else if jv, tv := jrec.Vals[field], trec.Vals[field]; jv.Int != tv.Int || string(jv.Bytes) != string(tv.Bytes) {
			t.Errorf("%s: JSON reads %+v, the typed path %+v", what, jv, tv)
		}
	}
	for _, lit := range []string{"0", "1.5", "-1.5", "0.01", "0.001", "1.230", "1.2300000", "0.00001", "-0.00001",
		"99999999999999.99", "99999999999999.9999", "100000000000000", "-100000000000000", "1e3", "1e-2", "1e-3",
		"100000000000000.001", "123456789012345678901234567890", "0.000000000000000000001"} {
		jr, jrec := json(`"d": "` + lit + `"`)
		v, ok := new(big.Rat).SetString(lit)
		if !ok {
			t.Fatalf("big.Rat does not read %s", lit)
		}
		var rec Record
		p.Reset(&rec)
		check("decimal "+lit, jr, jrec, p.SetDecimal(&rec, 2, v), rec, 2)
	}
	for _, s := range []string{"", "a", "abcd", "abcde", "é", "éé", "ééé", "\u00e9\u00e9a"} {
		jr, jrec := json(fmt.Sprintf(`"s": %q`, s))
		var rec Record
		p.Reset(&rec)
		check(fmt.Sprintf("string %q", s), jr, jrec, p.SetString(&rec, 0, s), rec, 0)
	}
	for _, ts := range []string{"2024-01-02T03:04:05.678Z", "2024-01-02T03:04:05.6789+01:30", "1999-12-31T23:59:59.999Z",
		"2000-01-01T00:00:00Z", "2100-01-01T00:00:00Z", "2024-02-30T00:00:00Z", "not a time"} {
		jr, jrec := json(fmt.Sprintf(`"t": %q`, ts))
		var rec Record
		p.Reset(&rec)
		check("time "+ts, jr, jrec, p.SetTimeText(&rec, []byte(ts)), rec, -1)
	}
	// A string the JSON path could only see escaped: invalid UTF-8 is the field's bad_text.
	var rec Record
	p.Reset(&rec)
	if r := p.SetString(&rec, 0, "a\xffb"); r != ReasonBadText {
		t.Errorf("invalid UTF-8: %s, want bad_text", r)
	}
	// Each string is the record's own copy, not the caller's memory.
	p.Reset(&rec)
	buf := []byte("ab")
	p.SetString(&rec, 0, string(buf))
	buf[0] = 'x'
	if got := string(rec.Vals[0].Bytes); got != "ab" {
		t.Errorf("the string changed with the caller's memory: %q", got)
	}
}

// threeFieldPlan is a plan with one field of each kind a record's value can take (string, int,
// decimal) and an event time: enough for every reason a field can give.
func threeFieldPlan(t *testing.T) *Plan {
	t.Helper()
	p, err := Parse([]byte(`input:
  fields: {s: string(4), i: int, d: decimal(2)}
  event_time: {field: t, format: rfc3339}
aggregates:
  - {table: x, window: 1m, measures: [{column: n, kind: count}]}
`), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
