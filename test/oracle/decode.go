// Decoding one record with encoding/json. Invariant: a record is valid, with a value for every
// field, or bad with exactly the reason and field relay's docs give for the first field that fails
// (size, JSON, object, then the fields in declaration order, the event time last).

package oracle

import (
	"bytes"
	"encoding/json"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// value is a decoded field: text for a string field, num for the others.
type value struct {
	text string
	num  *big.Rat
}

// members reads one JSON object (already known valid) into its members, keyed by the unescaped
// key; a repeated key replaces the earlier value, as encoding/json does. A key holding a lone
// surrogate escape is dropped: it is not a Unicode string, so it cannot be any field's key
// (encoding/json would read it as U+FFFD; relay, stricter, matches it with nothing).
func members(raw []byte) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // {
		panic(err)
	}
	for dec.More() {
		from := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			panic(err)
		}
		keyRaw := bytes.TrimLeft(raw[from:dec.InputOffset()], " \t\r\n,")
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		if loneSurrogate(keyRaw) {
			continue
		}
		out[tok.(string)] = v
	}
	return out
}

// loneSurrogate reports whether a JSON string token (quotes included) has a \u escape of a UTF-16
// surrogate that is not half of a high-low pair.
func loneSurrogate(tok []byte) bool {
	var pending rune = -1 // a high surrogate waiting for its low half
	for i := 0; i < len(tok); i++ {
		if tok[i] != '\\' {
			if pending >= 0 {
				return true
			}
			continue
		}
		if tok[i+1] != 'u' {
			if pending >= 0 {
				return true
			}
			i++
			continue
		}
		u, _ := strconv.ParseUint(string(tok[i+2:i+6]), 16, 16)
		r := rune(u)
		i += 5
		switch {
		case pending >= 0:
			if utf16.DecodeRune(pending, r) == utf8.RuneError {
				return true
			}
			pending = -1
		case r >= 0xD800 && r < 0xDC00:
			pending = r
		case utf16.IsSurrogate(r):
			return true
		}
	}
	return pending >= 0
}

// lookup walks path through the record. A key absent or null is missing_field; a key on the way
// holding anything but an object is wrong_type.
func lookup(top map[string]json.RawMessage, path []string) (json.RawMessage, string) {
	m := top
	for i, k := range path {
		raw, ok := m[k]
		if !ok || string(raw) == "null" {
			return nil, "missing_field"
		}
		if i == len(path)-1 {
			return raw, ""
		}
		if raw[0] != '{' {
			return nil, "wrong_type"
		}
		m = members(raw)
	}
	return nil, "missing_field"
}

// unquote is encoding/json's reading of a string token.
func unquote(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		panic(err)
	}
	return s
}

var (
	intRE     = regexp.MustCompile(`^-?[0-9]+$`)
	decimalRE = regexp.MustCompile(`^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$`)
	// RFC 3339 as relay takes it: upper-case T and Z, offsets within ±23:59 (time.Parse would
	// take +24:00), any number of fraction digits.
	rfc3339RE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$`)
)

// numeric is the text a number field is read from: a JSON number as written, or the content of a
// string; ok is false for any other JSON type.
func numeric(raw json.RawMessage) (lit string, quoted, ok bool) {
	switch {
	case raw[0] == '"':
		return unquote(raw), true, true
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		return string(raw), false, true
	}
	return "", false, false
}

// integer reads an int or epoch_ms field: a JSON integer (no fraction, no exponent: 1.0 and 1e3
// are floats, wrong_type), or a string of optionally signed-by-minus digits within int64 (bad
// otherwise, as is an integer number past int64).
func integer(raw json.RawMessage, bad string) (*big.Rat, string) {
	lit, quoted, ok := numeric(raw)
	if !ok || !quoted && strings.ContainsAny(lit, ".eE") {
		return nil, "wrong_type"
	}
	n, ok := new(big.Int).SetString(lit, 10)
	if !intRE.MatchString(lit) || !ok || !n.IsInt64() {
		return nil, bad
	}
	return new(big.Rat).SetInt(n), ""
}

var ten = big.NewInt(10)

// decimal reads a decimal(scale) field: a JSON number, or a string holding one (the JSON number
// grammar, leading zeros allowed, no '+'), exactly. A digit below 10^-4 is amount_precision even
// when the value is also too large; then |value| past max is amount_range; then a digit below
// 10^-scale is amount_precision.
func decimal(raw json.RawMessage, scale int, max *big.Rat) (*big.Rat, string) {
	lit, _, ok := numeric(raw)
	if !ok {
		return nil, "wrong_type"
	}
	m := decimalRE.FindStringSubmatch(lit)
	if m == nil {
		return nil, "bad_amount"
	}
	digits := strings.TrimLeft(m[2]+m[3], "0")
	exp := int64(-len(m[3]))
	if m[4] != "" {
		e, err := strconv.ParseInt(m[4], 10, 64)
		if err != nil {
			e = 1 << 40 // only its sign matters below
			if m[4][0] == '-' {
				e = -e
			}
		}
		exp += e
	}
	if digits == "" {
		return new(big.Rat), ""
	}
	// Far enough from the digits, an exponent decides alone: no need to build 10^(10^9).
	switch {
	case exp < -int64(len(digits))-8:
		return nil, "amount_precision"
	case exp > 64:
		return nil, "amount_range"
	}
	d, _ := new(big.Int).SetString(digits, 10)
	v := new(big.Rat).SetInt(d)
	p := new(big.Rat).SetInt(new(big.Int).Exp(ten, big.NewInt(abs(exp)), nil))
	if exp < 0 {
		v.Quo(v, p)
	} else {
		v.Mul(v, p)
	}
	if m[1] == "-" {
		v.Neg(v)
	}
	if !scaledWhole(v, 4) {
		return nil, "amount_precision"
	}
	if new(big.Rat).Abs(v).Cmp(max) > 0 {
		return nil, "amount_range"
	}
	if !scaledWhole(v, scale) {
		return nil, "amount_precision"
	}
	return v, ""
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// scaledWhole says whether v has no digit below 10^-scale.
func scaledWhole(v *big.Rat, scale int) bool {
	s := new(big.Rat).Mul(v, new(big.Rat).SetInt(new(big.Int).Exp(ten, big.NewInt(int64(scale)), nil)))
	return s.IsInt()
}

// eventTime reads the event time as a time.Time: epoch milliseconds (an integer or a string of
// digits, bad_ts otherwise) or an RFC 3339 string, floored to the millisecond.
func eventTime(raw json.RawMessage, format string) (time.Time, string) {
	if format == "epoch_ms" {
		n, r := integer(raw, "bad_ts")
		if r != "" {
			return time.Time{}, r
		}
		return time.UnixMilli(n.Num().Int64()).UTC(), ""
	}
	if raw[0] != '"' {
		return time.Time{}, "wrong_type"
	}
	lit := unquote(raw)
	t, err := time.Parse(time.RFC3339Nano, lit)
	if err != nil || !rfc3339RE.MatchString(lit) {
		return time.Time{}, "bad_ts"
	}
	return t.UTC().Truncate(time.Millisecond), ""
}

// decode returns the record's values by field name and its event time, or why it is bad and the
// field ("" for the record as a whole).
func (s *Spec) decode(p []byte) (vals map[string]value, ts time.Time, reason, field string) {
	if len(p) > s.Limits.MaxPayloadBytes {
		return nil, ts, "too_large", ""
	}
	return s.decodeObject(p)
}

// decodeObject is decode after the size check (an Avro record's JSON twin had its own, avro.go).
func (s *Spec) decodeObject(p []byte) (vals map[string]value, ts time.Time, reason, field string) {
	// encoding/json would replace invalid UTF-8 with U+FFFD; relay refuses the record.
	if !utf8.Valid(p) || !json.Valid(p) {
		return nil, ts, "not_json", ""
	}
	if bytes.TrimLeft(p, " \t\r\n")[0] != '{' {
		return nil, ts, "not_object", ""
	}
	top := members(bytes.TrimSpace(p))
	vals = map[string]value{}
	for _, f := range s.Fields {
		raw, r := lookup(top, f.Path)
		var v value
		if r == "" {
			switch f.Type {
			case "string":
				v.text, r = text(raw, f)
			case "int":
				v.num, r = integer(raw, "bad_int")
			default:
				v.num, r = decimal(raw, f.Scale, s.Limits.MaxAmount)
			}
		}
		if r != "" {
			return nil, ts, r, f.Name
		}
		vals[f.Name] = v
	}
	raw, r := lookup(top, s.EventTime.Path)
	if r == "" {
		ts, r = eventTime(raw, s.EventTime.Type)
	}
	if r == "" && (ts.Before(s.Limits.MinEventTime) || !ts.Before(s.Limits.MaxEventTime)) {
		r = "ts_range"
	}
	if r != "" {
		return nil, ts, r, s.EventTime.Name
	}
	return vals, ts, "", ""
}

// text reads a string field: non-empty, no lone surrogate escape, at most Max bytes of UTF-8.
func text(raw json.RawMessage, f Field) (string, string) {
	if raw[0] != '"' {
		return "", "wrong_type"
	}
	str := unquote(raw)
	switch {
	case str == "":
		return "", "empty_field"
	case loneSurrogate(raw):
		return "", f.Bad
	case len(str) > f.Max:
		return "", f.TooLong
	}
	return str, ""
}
