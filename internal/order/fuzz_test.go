// FuzzDecode holds Decode to a reference built on encoding/json: same Reason
// for every input, same values for every valid record.
//
// Deliberate differences from encoding/json, encoded in the reference:
//   - json.Valid accepts invalid UTF-8 inside strings (and Unmarshal replaces
//     it with U+FFFD); Decode rejects it as not_json, because RFC 8259
//     requires UTF-8 and the bytes would otherwise reach MySQL mangled or be
//     refused there. So "valid" below means json.Valid && utf8.Valid.
//   - encoding/json turns a lone surrogate escape (\ud800) into U+FFFD;
//     Decode refuses it in order_id and sku (bad_order_id, bad_sku), since
//     two different ids would otherwise collapse into one.
//   - encoding/json matches struct keys case-insensitively; Decode matches
//     exactly, so the reference decodes into a map, which is exact and keeps
//     the last duplicate as Decode does.

package order

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/relay-sh/relay/internal/money"
)

type refResult struct {
	r           Reason
	id, sku     string
	amount, ts  int64
	jsonIsValid bool
}

var refIntString = regexp.MustCompile(`^-?[0-9]+$`)

func refDecode(t *testing.T, p []byte, f Fields, l Limits) refResult {
	if len(p) > l.MaxPayloadBytes {
		return refResult{r: ReasonTooLarge}
	}
	if !json.Valid(p) || !utf8.Valid(p) {
		return refResult{r: ReasonNotJSON}
	}
	res := refResult{jsonIsValid: true}
	if strings.TrimLeft(string(p), " \t\r\n")[0] != '{' {
		res.r = ReasonNotObject
		return res
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil {
		t.Fatalf("encoding/json cannot unmarshal what json.Valid accepted: %v", err)
	}
	str := func(name string, bad, tooLong Reason, max int) (string, Reason) {
		raw, ok := m[name]
		if !ok || string(raw) == "null" {
			return "", ReasonMissingField
		}
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return "", ReasonWrongType
		}
		switch {
		case s == "":
			return "", ReasonEmptyField
		case refLoneSurrogate(string(raw)):
			return "", bad
		case len(s) > max:
			return "", tooLong
		}
		return s, OK
	}
	if res.id, res.r = str(f.OrderID, ReasonBadOrderID, ReasonOrderIDTooLong, l.MaxOrderIDBytes); res.r != OK {
		return res
	}
	if res.sku, res.r = str(f.SKU, ReasonBadSKU, ReasonSKUTooLong, l.MaxSKUBytes); res.r != OK {
		return res
	}

	// scalar reads a field that is a string or a number: its text (a string's unescaped) and
	// whether it was quoted, or why it is neither.
	scalar := func(name string) (lit string, quoted bool, r Reason) {
		raw, ok := m[name]
		switch {
		case !ok || string(raw) == "null":
			return "", false, ReasonMissingField
		case raw[0] == '"':
			if err := json.Unmarshal(raw, &lit); err != nil {
				t.Fatal(err)
			}
			return lit, true, OK
		case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
			return string(raw), false, OK
		}
		return "", false, ReasonWrongType
	}

	lit, _, r := scalar(f.Amount)
	if r != OK {
		res.r = r
		return res
	}
	u, err := money.Parse([]byte(lit))
	switch {
	case err == money.ErrSyntax:
		res.r = ReasonBadAmount
	case err == money.ErrPrecision:
		res.r = ReasonAmountPrecision
	case err == money.ErrRange || u > l.MaxAmountUnits || u < -l.MaxAmountUnits || l.MaxAmountUnits < 0:
		res.r = ReasonAmountRange
	case err != nil:
		t.Fatalf("unexpected money error %v", err)
	}
	if res.r != OK {
		return res
	}
	res.amount = u

	var quoted bool
	lit, quoted, r = scalar(f.TS)
	switch {
	case r != OK:
		res.r = r
		return res
	case quoted && !refIntString.MatchString(lit):
		res.r = ReasonBadTS
		return res
	case !quoted && strings.ContainsAny(lit, ".eE"):
		res.r = ReasonWrongType
		return res
	}
	ts, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		res.r = ReasonBadTS
		return res
	}
	if ts < l.MinTS || ts >= l.MaxTS {
		res.r = ReasonTSRange
		return res
	}
	res.ts = ts
	return res
}

// refLoneSurrogate reports whether a JSON string literal (quotes included,
// already valid) spells a UTF-16 sequence with an unpaired surrogate. It
// rebuilds the UTF-16 code units and checks that decoding and re-encoding
// them is the identity, which fails exactly for unpaired surrogates.
func refLoneSurrogate(lit string) bool {
	var units []uint16
	s := lit[1 : len(lit)-1]
	for i := 0; i < len(s); {
		if s[i] == '\\' {
			if s[i+1] == 'u' {
				v, err := strconv.ParseUint(s[i+2:i+6], 16, 16)
				if err != nil {
					panic(lit)
				}
				units = append(units, uint16(v))
				i += 6
			} else {
				units = append(units, 'x')
				i += 2
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		units = utf16.AppendRune(units, r)
		i += size
	}
	return !slices.Equal(utf16.Encode(utf16.Decode(units)), units)
}

// fuzzLimits are tight so the fuzzer reaches every limit with short inputs.
var fuzzLimits = Limits{MaxPayloadBytes: 120, MaxSKUBytes: 5, MaxOrderIDBytes: 6, MinTS: -50, MaxTS: 1000, MaxAmountUnits: 1000000}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(typical))
	f.Add([]byte(`{"order_id":"a","sku":"\ud83d\ude00","amount":-0.5e1,"ts":"999"}`))
	f.Add([]byte(`{"id":"x","s":"y","a":"1","t":0}`))
	def := NewDecoder(DefaultFields(), DefaultLimits())
	short := NewDecoder(Fields{OrderID: "id", SKU: "s", Amount: "a", TS: "t"}, fuzzLimits)
	f.Fuzz(func(t *testing.T, p []byte) {
		for _, c := range []struct {
			d *Decoder
			f Fields
			l Limits
		}{
			{def, DefaultFields(), DefaultLimits()},
			{short, Fields{OrderID: "id", SKU: "s", Amount: "a", TS: "t"}, fuzzLimits},
			{def, DefaultFields(), DefaultLimits()}, // again: scratch reuse must not change anything
		} {
			var o Order
			got := c.d.Decode(p, &o)
			want := refDecode(t, p, c.f, c.l)
			if got != want.r {
				t.Fatalf("fields %v: Decode(%q) = %v, reference says %v", c.f, p, got, want.r)
			}
			if len(p) <= c.l.MaxPayloadBytes && (got != ReasonNotJSON) != want.jsonIsValid {
				t.Fatalf("Decode(%q) = %v disagrees with json.Valid&&utf8.Valid = %v", p, got, want.jsonIsValid)
			}
			if got != OK {
				continue
			}
			if string(o.OrderID) != want.id || string(o.SKU) != want.sku || o.Amount != want.amount || o.TS != want.ts {
				t.Fatalf("Decode(%q) = {%q %q %d %d}, reference {%q %q %d %d}", p,
					o.OrderID, o.SKU, o.Amount, o.TS, want.id, want.sku, want.amount, want.ts)
			}
			if !utf8.Valid(o.OrderID) || !utf8.Valid(o.SKU) {
				t.Fatalf("Decode(%q) produced invalid UTF-8", p)
			}
		}
	})
}
