// Typed reads of the values a Scanner recorded. Invariant: each read either
// returns the exact value or exactly one Reason; no value is clamped, rounded
// or repaired, and a read never allocates once the scratch buffers have grown.

package order

import "github.com/relay-sh/relay/internal/money"

// Text returns string field f, unescaped, if it is non-empty, valid UTF-8 and
// at most max bytes; bad and tooLong are the reasons for the last two. A string
// with nothing to unescape aliases the payload; an escaped one is appended to
// *arena and aliases that. The caller owns the arena, so the bytes outlive the
// next Scan: a batch of decoded records, each with its own arena, keeps every
// record's strings (the Scanner's own scratch would hold only the last one's).
func (s *Scanner) Text(p []byte, f, max int, bad, tooLong Reason, arena *[]byte) ([]byte, Reason) {
	var str []byte
	ok := true
	switch v := &s.vals[f]; v.kind {
	case kindNone, kindNull:
		return nil, ReasonMissingField
	case kindString:
		str = p[v.start:v.end]
		if v.escaped {
			from := len(*arena)
			*arena, ok = unescape(*arena, str)
			// Capped, so that nothing appended to this field's bytes can reach the next one's.
			str = (*arena)[from:len(*arena):len(*arena)]
		}
	default:
		return nil, ReasonWrongType
	}
	switch {
	case len(str) == 0:
		return nil, ReasonEmptyField
	case !ok:
		return nil, bad
	case len(str) > max:
		return nil, tooLong
	}
	return str, OK
}

// String returns string field f unescaped, a lone surrogate escape written as
// U+FFFD (Text refuses those). Absent or null is ReasonMissingField, any
// other kind ReasonWrongType. The bytes alias the payload or the Scanner's
// scratch memory until the next Scan: for values parsed at once, never kept.
func (s *Scanner) String(p []byte, f int) ([]byte, Reason) {
	switch s.vals[f].kind {
	case kindNone, kindNull:
		return nil, ReasonMissingField
	case kindString:
		str, _ := s.str(p, f)
		return str, OK
	}
	return nil, ReasonWrongType
}

// str returns the unescaped content of string field f, aliasing the payload
// when there is nothing to unescape. ok is false if the string holds a lone
// UTF-16 surrogate escape, which has no UTF-8 encoding.
func (s *Scanner) str(p []byte, f int) ([]byte, bool) {
	v := &s.vals[f]
	raw := p[v.start:v.end]
	if !v.escaped {
		return raw, true
	}
	var ok bool
	s.scratch[f], ok = unescape(s.scratch[f][:0], raw)
	return s.scratch[f], ok
}

// Decimal returns field f, a decimal number or a string holding one, in
// money units, if |units| <= maxUnits (ReasonAmountRange otherwise).
func (s *Scanner) Decimal(p []byte, f int, maxUnits int64) (int64, Reason) {
	lit, r := s.literal(p, f, false)
	if r != OK {
		return 0, r
	}
	u, err := money.Parse(lit)
	switch err {
	case nil:
	case money.ErrPrecision:
		return 0, ReasonAmountPrecision
	case money.ErrRange:
		return 0, ReasonAmountRange
	default:
		return 0, ReasonBadAmount
	}
	// Compare magnitudes as uint64: |MinInt64| has no int64 form.
	mag := uint64(u)
	if u < 0 {
		mag = -mag
	}
	if maxUnits < 0 || mag > uint64(maxUnits) {
		return 0, ReasonAmountRange
	}
	return u, OK
}

// Int returns field f, an integer number or a string of digits, as an int64;
// bad is the reason for a string that is not one or a value past int64.
func (s *Scanner) Int(p []byte, f int, bad Reason) (int64, Reason) {
	lit, r := s.literal(p, f, true)
	if r != OK {
		return 0, r
	}
	n, ok := parseInt(lit)
	if !ok {
		return 0, bad
	}
	return n, OK
}

// literal returns the text of number field f, or the unescaped content of
// string field f, for a number parser. With integer, a number with a fraction
// or exponent is ReasonWrongType: 1.5 or 1e12 is a float on the wire even when
// its value is whole, and encoding/json would refuse it for an int64 too.
func (s *Scanner) literal(p []byte, f int, integer bool) ([]byte, Reason) {
	v := &s.vals[f]
	switch v.kind {
	case kindNone, kindNull:
		return nil, ReasonMissingField
	case kindNumber:
		if integer && !v.integer {
			return nil, ReasonWrongType
		}
		return p[v.start:v.end], OK
	case kindString:
		// A lone surrogate becomes U+FFFD, which no number parser accepts.
		lit, _ := s.str(p, f)
		return lit, OK
	}
	return nil, ReasonWrongType
}

// parseInt reads -?[0-9]+ into an int64. Leading zeros are accepted (inside
// a string they are harmless); '+', spaces and anything else are not.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c-'0' > 9 || n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}
