// Typed values: how a decoder of a binary format (internal/format: Avro, and later Protobuf) fills a
// Record. Invariant: a value given here is held to exactly the rules the JSON decoder applies to the
// same field (a string non-empty, valid UTF-8, within string(N); a decimal exact at the field's
// scale and within the amount limit; the event time within the limits), with the same reasons, so
// what reaches Fold does not depend on the format the record came in.

package spec

import (
	"math/big"
	"unicode/utf8"
	"unsafe"

	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/order"
)

// unitsPerOne is 10^money.Scale: a decimal times this is its count of money units.
var unitsPerOne = new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(money.Scale), nil))

// Reset readies rec for the Set calls of one record: every declared field unset (zero), no strings.
func (p *Plan) Reset(rec *Record) {
	n := len(p.fields) - 1
	rec.Vals = append(rec.Vals[:0], make([]Value, n)...)
	rec.buf = rec.buf[:0]
}

// SetString sets string field i (InputFields' index) to s, as SetBytes does.
func (p *Plan) SetString(rec *Record, i int, s string) Reason {
	// A view of s's bytes, not a copy: SetBytes only reads them.
	return p.SetBytes(rec, i, unsafe.Slice(unsafe.StringData(s), len(s)))
}

// SetBytes sets string field i (InputFields' index) to the text b, copied into rec's own buffer,
// so it outlives the decoder's memory as the JSON path's strings do.
func (p *Plan) SetBytes(rec *Record, i int, b []byte) Reason {
	if len(b) > 0 && !utf8.Valid(b) {
		return p.fields[i].invalid
	}
	return p.SetUTF8(rec, i, b)
}

// SetUTF8 is SetBytes of b known to be UTF-8: a decoder whose format refuses anything else has
// checked it already (a proto3 string), and it is not checked twice.
func (p *Plan) SetUTF8(rec *Record, i int, b []byte) Reason {
	f := &p.fields[i]
	switch {
	case len(b) == 0:
		return Reason(order.ReasonEmptyField)
	case len(b) > f.max:
		return f.tooLong
	}
	from := len(rec.buf)
	rec.buf = append(rec.buf, b...)
	// Capped, so that nothing appended to this field's bytes can reach the next one's.
	rec.Vals[i].Bytes = rec.buf[from:len(rec.buf):len(rec.buf)]
	return OK
}

// SetInt sets int field i to n.
func (p *Plan) SetInt(rec *Record, i int, n int64) Reason {
	rec.Vals[i].Int = n
	return OK
}

// SetDecimal sets decimal field i to v, exactly, checking in the JSON decoder's order: a non-zero
// digit below money.Scale is amount_precision, then past the amount limit amount_range, then a
// non-zero digit below the field's scale amount_precision.
func (p *Plan) SetDecimal(rec *Record, i int, v *big.Rat) Reason {
	u := new(big.Rat).Mul(v, unitsPerOne)
	if !u.IsInt() {
		return Reason(order.ReasonAmountPrecision)
	}
	if n := u.Num(); n.IsInt64() {
		return p.SetUnits(rec, i, n.Int64())
	}
	return Reason(order.ReasonAmountRange)
}

// SetUnits sets decimal field i to units of 10^-money.Scale, a value already exact at that scale
// (a caller that had to drop a non-zero digit to get it has amount_precision instead): past the
// amount limit it is amount_range, then a non-zero digit below the field's scale amount_precision.
func (p *Plan) SetUnits(rec *Record, i int, units int64) Reason {
	f := &p.fields[i]
	// Compare magnitudes as uint64: |MinInt64| has no int64 form.
	mag := uint64(units)
	if units < 0 {
		mag = -mag
	}
	if p.limits.MaxUnits < 0 || mag > uint64(p.limits.MaxUnits) {
		return Reason(order.ReasonAmountRange)
	}
	if units%f.unit != 0 {
		return Reason(order.ReasonAmountPrecision)
	}
	rec.Vals[i].Int = units / f.unit
	return OK
}

// SetDecimalText sets decimal field i from its decimal text (a Protobuf string or
// google.type.Decimal), as the JSON decoder reads a decimal in a JSON string.
func (p *Plan) SetDecimalText(rec *Record, i int, b []byte) Reason {
	u, err := money.Parse(b)
	switch err {
	case nil:
		return p.SetUnits(rec, i, u)
	case money.ErrPrecision:
		return Reason(order.ReasonAmountPrecision)
	case money.ErrRange:
		return Reason(order.ReasonAmountRange)
	default:
		return Reason(order.ReasonBadAmount)
	}
}

// SetTime sets the event time to ms (epoch milliseconds), within the limits.
func (p *Plan) SetTime(rec *Record, ms int64) Reason {
	if ms < p.limits.MinTS || ms >= p.limits.MaxTS {
		return Reason(order.ReasonTSRange)
	}
	rec.TS = ms
	return OK
}

// SetTimeText sets the event time from its RFC 3339 text (an rfc3339 event time), as the JSON
// decoder reads it.
func (p *Plan) SetTimeText(rec *Record, b []byte) Reason {
	ms, ok := parseRFC3339(b)
	if !ok {
		return Reason(order.ReasonBadTS)
	}
	return p.SetTime(rec, ms)
}

// TooLarge says whether payload is past the record size limit (too_large, in every format).
func (p *Plan) TooLarge(payload []byte) bool { return len(payload) > p.limits.MaxPayloadBytes }
