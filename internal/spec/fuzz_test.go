// FuzzSpecDecode holds the spec decoder to a reference built on encoding/json, for random specs
// (field paths with shared prefixes, every type, both event-time formats, tight limits) and random
// records; and the default spec to order.Decoder, reason for reason and value for value.
//
// Deliberate differences from encoding/json, encoded in the reference (as in order's FuzzDecode):
// invalid UTF-8 anywhere is not_json; a lone surrogate escape in a string field is refused; keys
// match exactly, so the reference walks maps; RFC 3339 offsets must be within ±23:59.

package spec

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/order"
)

// fuzzPaths share prefixes on purpose: "a" is both a field and the parent of "a.b".
var fuzzPaths = []string{"a", "b", "a.b", "a.c", "c.d.e", "k"}

// fuzzSpec derives a spec from seed: 1 to 4 fields, an event time, one aggregate.
func fuzzSpec(seed uint64) (Spec, string) {
	rng := rand.New(rand.NewPCG(seed, 0))
	var s Spec
	for _, i := range rng.Perm(len(fuzzPaths))[:1+rng.IntN(4)] {
		typ := []string{"int", fmt.Sprintf("string(%d)", 1+rng.IntN(6)), fmt.Sprintf("decimal(%d)", rng.IntN(5))}[rng.IntN(3)]
		s.Input.Fields = append(s.Input.Fields, Field{Name: fuzzPaths[i], Path: strings.Split(fuzzPaths[i], "."), Type: typ})
	}
	et := []string{"t", "m.t"}[rng.IntN(2)]
	s.Input.EventTime = EventTime{Field: et, Path: strings.Split(et, "."), Format: []string{"epoch_ms", "rfc3339"}[rng.IntN(2)]}
	s.Input.Limits = Limits{MaxPayloadBytes: 200, MinTS: -50, MaxTS: 1000, MaxUnits: 1000000}
	if s.Input.EventTime.Format == "rfc3339" {
		s.Input.Limits.MinTS, s.Input.Limits.MaxTS = 946684800000, 4102444800000
	}
	s.Aggregates = []Aggregate{{Table: "t", Window: time.Minute, Measures: []Measure{{Column: "n", Kind: "count"}}}}
	return s, fmt.Sprint(s.Input.Fields, s.Input.EventTime)
}

type refOut struct {
	r     Reason
	field string
	vals  []Value
	ts    int64
}

var (
	refDigits  = regexp.MustCompile(`^-?[0-9]+$`)
	refRFC3339 = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)
	refToken   = regexp.MustCompile(`\\u[0-9a-fA-F]{4}|\\.|(?s:.)`)
)

// refLone reports whether a JSON string literal (quotes excluded) has an unpaired surrogate
// escape: a high one not followed by a low one, or a low one not preceded by a high one.
func refLone(lit string) bool {
	toks := refToken.FindAllString(lit, -1)
	unit := func(i int) uint64 {
		if i < 0 || i >= len(toks) || len(toks[i]) != 6 || toks[i][1] != 'u' {
			return 0
		}
		u, _ := strconv.ParseUint(toks[i][2:], 16, 16)
		return u
	}
	high := func(u uint64) bool { return u >= 0xD800 && u < 0xDC00 }
	low := func(u uint64) bool { return u >= 0xDC00 && u < 0xE000 }
	for i := 0; i < len(toks); i++ {
		switch u := unit(i); {
		case high(u) && low(unit(i+1)):
			i++
		case high(u) || low(u):
			return true
		}
	}
	return false
}

func refSpecDecode(t *testing.T, p []byte, s Spec) refOut {
	lim := s.Input.Limits
	if len(p) > lim.MaxPayloadBytes {
		return refOut{r: Reason(order.ReasonTooLarge)}
	}
	if !json.Valid(p) || !utf8.Valid(p) {
		return refOut{r: Reason(order.ReasonNotJSON)}
	}
	if strings.TrimLeft(string(p), " \t\r\n")[0] != '{' {
		return refOut{r: Reason(order.ReasonNotObject)}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(p, &top); err != nil {
		t.Fatal(err)
	}
	lookup := func(path []string) (json.RawMessage, Reason) {
		m := top
		for i, k := range path {
			raw, ok := m[k]
			if !ok || string(raw) == "null" {
				return nil, Reason(order.ReasonMissingField)
			}
			if i == len(path)-1 {
				return raw, OK
			}
			if raw[0] != '{' {
				return nil, Reason(order.ReasonWrongType)
			}
			m = nil
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
		}
		panic("empty path")
	}
	unquote := func(raw json.RawMessage) string {
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			t.Fatal(err)
		}
		return str
	}
	var out refOut
	for _, f := range s.Input.Fields {
		raw, r := lookup(f.Path)
		var v Value
		var n int
		switch {
		case r != OK:
		case strings.HasPrefix(f.Type, "string"):
			fmt.Sscanf(f.Type, "string(%d)", &n)
			invalid, tooLong := f.invalid, f.tooLong
			if invalid == 0 {
				invalid, tooLong = ReasonBadText, ReasonTooLong
			}
			if raw[0] != '"' {
				r = Reason(order.ReasonWrongType)
				break
			}
			str := unquote(raw)
			switch {
			case str == "":
				r = Reason(order.ReasonEmptyField)
			case refLone(string(raw[1 : len(raw)-1])):
				r = invalid
			case len(str) > n:
				r = tooLong
			}
			v.Bytes = []byte(str)
		case f.Type == "int":
			v.Int, r = refInt(raw, unquote, ReasonBadInt)
		default:
			fmt.Sscanf(f.Type, "decimal(%d)", &n)
			lit := string(raw)
			switch {
			case raw[0] == '"':
				lit = unquote(raw)
			case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
				r = Reason(order.ReasonWrongType)
			}
			if r != OK {
				break
			}
			u, err := money.Parse([]byte(lit))
			unit := int64(1)
			for k := n; k < money.Scale; k++ {
				unit *= 10
			}
			switch {
			case err == money.ErrSyntax:
				r = Reason(order.ReasonBadAmount)
			case err == money.ErrPrecision:
				r = Reason(order.ReasonAmountPrecision)
			case err == money.ErrRange || u > lim.MaxUnits || u < -lim.MaxUnits:
				r = Reason(order.ReasonAmountRange)
			case u%unit != 0:
				r = Reason(order.ReasonAmountPrecision)
			}
			v.Int = u / unit
		}
		if r != OK {
			return refOut{r: r, field: f.Name}
		}
		out.vals = append(out.vals, v)
	}
	et := s.Input.EventTime
	raw, r := lookup(et.Path)
	var ts int64
	switch {
	case r != OK:
	case et.Format == "epoch_ms":
		ts, r = refInt(raw, unquote, Reason(order.ReasonBadTS))
	case raw[0] != '"':
		r = Reason(order.ReasonWrongType)
	default:
		lit := unquote(raw)
		tm, err := time.Parse(time.RFC3339Nano, lit)
		if err != nil || !refRFC3339.MatchString(lit) {
			r = Reason(order.ReasonBadTS)
		}
		ts = tm.UnixMilli()
	}
	if r == OK && (ts < lim.MinTS || ts >= lim.MaxTS) {
		r = Reason(order.ReasonTSRange)
	}
	if r != OK {
		return refOut{r: r, field: et.Field}
	}
	out.ts = ts
	return out
}

// refInt reads an integer number or a string of digits, as int and epoch_ms fields take them.
func refInt(raw json.RawMessage, unquote func(json.RawMessage) string, bad Reason) (int64, Reason) {
	lit := string(raw)
	switch {
	case raw[0] == '"':
		lit = unquote(raw)
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') || strings.ContainsAny(lit, ".eE"):
		return 0, Reason(order.ReasonWrongType)
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil || !refDigits.MatchString(lit) {
		return 0, bad
	}
	return n, OK
}

var fuzzOrderLimits = order.Limits{MaxPayloadBytes: 200, MaxSKUBytes: 5, MaxOrderIDBytes: 6, MinTS: -50, MaxTS: 1000, MaxAmountUnits: 1000000}

func FuzzSpecDecode(f *testing.F) {
	for i, p := range []string{
		`{"a":{"b":"xy","c":12},"b":"-3","c":{"d":{"e":"1.25"}},"k":7,"t":5,"m":{"t":"2025-11-24T16:30:00.5+01:00"}}`,
		`{"a":"s","a":{"b":1,"c":"\u0041"},"b":1e3,"k":"\ud800x","t":"999","m":{"t":"2025-02-29T00:00:00Z"}}`,
		`{"a":null,"b":"","c":{"d":5},"k":-9223372036854775808,"t":-50,"m":null}`,
		`{"a":{"b":"\ud83d\ude00","c":-0.0001},"b":12.5,"c":{"d":{"e":999999}},"k":"0009","t":1000,"m":{"t":"1999-12-31T23:59:59Z"}}`,
		`{"id":"x","sku":"y\u0000","amount":"1","ts":0,"a":{"b":{"c":[1,{"d":2}]}}}`,
		`{"order_id":"o-1","sku":"SKU-1","amount":"0.0001","ts":999}`,
	} {
		f.Add(uint64(i), []byte(p))
	}
	def := Default(order.Fields{OrderID: "id", SKU: "sku", Amount: "amount", TS: "ts"}, fuzzOrderLimits, "t", time.Minute)
	defPlan, err := Compile(def)
	if err != nil {
		f.Fatal(err)
	}
	defDec, od := defPlan.NewDecoder(), order.NewDecoder(order.Fields{OrderID: "id", SKU: "sku", Amount: "amount", TS: "ts"}, fuzzOrderLimits)
	f.Fuzz(func(t *testing.T, seed uint64, p []byte) {
		s, desc := fuzzSpec(seed)
		plan, err := Compile(s)
		if err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		d := plan.NewDecoder()
		var rec Record
		for round := 0; round < 2; round++ { // again: scratch reuse must not change anything
			r, field := d.Decode(p, &rec)
			want := refSpecDecode(t, p, s)
			if r != want.r || field != want.field {
				t.Fatalf("%s: Decode(%q) = %v %q, reference %v %q", desc, p, r, field, want.r, want.field)
			}
			if r != OK {
				continue
			}
			if rec.TS != want.ts || len(rec.Vals) != len(want.vals) {
				t.Fatalf("%s: Decode(%q) = %+v ts %d, reference %+v ts %d", desc, p, rec.Vals, rec.TS, want.vals, want.ts)
			}
			for i, v := range want.vals {
				if string(rec.Vals[i].Bytes) != string(v.Bytes) || rec.Vals[i].Int != v.Int {
					t.Fatalf("%s: Decode(%q) field %d = %+v, reference %+v", desc, p, i, rec.Vals[i], v)
				}
			}
		}
		// The default spec is order.Decoder, reason for reason and value for value.
		var o order.Order
		r, _ := defDec.Decode(p, &rec)
		if or := od.Decode(p, &o); Reason(or) != r {
			t.Fatalf("default spec: Decode(%q) = %v, order.Decoder %v", p, r, or)
		}
		if r == OK && (string(rec.Vals[0].Bytes) != string(o.OrderID) || string(rec.Vals[1].Bytes) != string(o.SKU) ||
			rec.Vals[2].Int != o.Amount || rec.TS != o.TS) {
			t.Fatalf("default spec: Decode(%q) = %+v %d, order.Decoder %+v", p, rec.Vals, rec.TS, o)
		}
	})
}
