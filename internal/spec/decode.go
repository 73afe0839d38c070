// The spec decoder runs order's Scanner with the plan's field paths. Invariant: a record is either
// fully valid (every declared field and the event time, within limits) or gets exactly one Reason
// and the name of the field it is about; after warm-up it allocates nothing.

package spec

import (
	"github.com/relay-sh/relay/internal/order"
)

// Value is one decoded field: Bytes for a string field, Int for the others (decimals in units of
// 10^-scale, so a decimal(2) of 1.5 is 150).
type Value struct {
	Bytes []byte
	Int   int64
}

// Record is one decoded record, reused across Decode calls. Bytes alias the payload or the
// record's own buffer until the next Decode into this record: never memory another record's Decode
// writes, so a batch of records decoded one after another keeps each one's strings.
type Record struct {
	Vals []Value // by input field, in declaration order
	TS   int64   // event time, epoch milliseconds
	buf  []byte  // the unescaped strings of Vals
	key  []byte  // scratch for Fold
}

// Decoder decodes records of one plan. Not safe for concurrent use; use one per goroutine.
type Decoder struct {
	p  *Plan
	sc *order.Scanner
}

// NewDecoder returns a decoder for p.
func (p *Plan) NewDecoder() *Decoder {
	paths := make([][]string, len(p.fields))
	for i, f := range p.fields {
		paths[i] = f.path
	}
	return &Decoder{p: p, sc: order.NewScanner(paths)}
}

// Decode parses payload into rec. It returns OK, or the first reason the record is invalid and the
// field it is about ("" for the record as a whole), checking size, JSON syntax (all of it), the
// top-level type, then each field in declaration order and the event time last. On anything but
// OK, rec's values are unspecified.
func (d *Decoder) Decode(payload []byte, rec *Record) (Reason, string) {
	if len(payload) > d.p.limits.MaxPayloadBytes {
		return Reason(order.ReasonTooLarge), ""
	}
	if r := d.sc.Scan(payload); r != order.OK {
		return Reason(r), ""
	}
	n := len(d.p.fields) - 1
	rec.Vals, rec.buf = rec.Vals[:0], rec.buf[:0]
	for i := range n {
		f := &d.p.fields[i]
		var v Value
		var r order.Reason
		switch f.typ {
		case typeString:
			// The spec's own reasons pass through Text unchanged, like order's.
			v.Bytes, r = d.sc.Text(payload, i, f.max, order.Reason(f.invalid), order.Reason(f.tooLong), &rec.buf)
		case typeInt:
			v.Int, r = d.sc.Int(payload, i, order.Reason(ReasonBadInt))
		default:
			v.Int, r = d.sc.Decimal(payload, i, d.p.limits.MaxUnits)
			if r == order.OK && v.Int%f.unit != 0 {
				r = order.ReasonAmountPrecision
			}
			v.Int /= f.unit
		}
		if r != order.OK {
			return Reason(r), f.name
		}
		rec.Vals = append(rec.Vals, v)
	}
	tf := &d.p.fields[n]
	var ts int64
	r := order.ReasonBadTS
	if tf.typ == typeEpochMS {
		ts, r = d.sc.Int(payload, n, order.ReasonBadTS)
	} else if lit, sr := d.sc.String(payload, n); sr != order.OK {
		r = sr
	} else if t, ok := parseRFC3339(lit); ok {
		ts, r = t, order.OK
	}
	if r == order.OK && (ts < d.p.limits.MinTS || ts >= d.p.limits.MaxTS) {
		r = order.ReasonTSRange
	}
	if r != order.OK {
		return Reason(r), tf.name
	}
	rec.TS = ts
	return OK, ""
}

// parseRFC3339 reads YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM), the form time.RFC3339Nano parses,
// into epoch milliseconds, flooring digits past the millisecond (a window start only ever floors).
// Out-of-range parts (month 13, February 30, hour 24, second 60) are refused, and so are offsets
// RFC 3339 does not allow (±24:00, minute 60), which time.Parse accepts.
func parseRFC3339(b []byte) (int64, bool) {
	if len(b) < len("2006-01-02T15:04:05Z") || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	num := func(i, n int) (int64, bool) {
		var v int64
		for _, c := range b[i : i+n] {
			if c-'0' > 9 {
				return 0, false
			}
			v = v*10 + int64(c-'0')
		}
		return v, true
	}
	y, ok1 := num(0, 4)
	mo, ok2 := num(5, 2)
	d, ok3 := num(8, 2)
	h, ok4 := num(11, 2)
	mi, ok5 := num(14, 2)
	s, ok6 := num(17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || mo < 1 || mo > 12 || d < 1 || d > daysIn(y, mo) || h > 23 || mi > 59 || s > 59 {
		return 0, false
	}
	i := 19
	var ms int64
	if b[i] == '.' {
		j := i + 1
		for j < len(b) && b[j]-'0' <= 9 {
			if j-i <= 3 {
				ms = ms*10 + int64(b[j]-'0')
			}
			j++
		}
		if j == i+1 {
			return 0, false
		}
		for k := j - i - 1; k < 3; k++ {
			ms *= 10
		}
		i = j
	}
	var off int64
	switch {
	case i == len(b)-1 && b[i] == 'Z':
	case i == len(b)-6 && (b[i] == '+' || b[i] == '-') && b[i+3] == ':':
		oh, ok1 := num(i+1, 2)
		om, ok2 := num(i+4, 2)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return 0, false
		}
		off = oh*60 + om
		if b[i] == '-' {
			off = -off
		}
	default:
		return 0, false
	}
	secs := daysFromCivil(y, mo, d)*86400 + h*3600 + mi*60 + s - off*60
	return secs*1000 + ms, true
}

func daysIn(y, m int64) int64 {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}
