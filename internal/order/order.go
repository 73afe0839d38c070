// Package order turns one Kafka record into a validated Order without
// allocating. Invariant: a record is either fully valid under Limits or gets
// exactly one Reason; nothing is clamped, rounded or repaired on the way.
package order

import "github.com/relay-sh/relay/internal/money"

// Fields names the JSON keys of the four input fields. Keys match exactly
// (case-sensitive, after unescaping), unlike encoding/json's folding.
type Fields struct {
	OrderID, SKU, Amount, TS string
}

// DefaultFields returns order_id, sku, amount and ts.
func DefaultFields() Fields {
	return Fields{OrderID: "order_id", SKU: "sku", Amount: "amount", TS: "ts"}
}

// Limits are the validity bounds; a record outside them is invalid input,
// never clamped. NewDecoder uses them exactly as given, so start from
// DefaultLimits rather than a zero Limits.
type Limits struct {
	MaxPayloadBytes int   // larger records are rejected before parsing (ReasonTooLarge)
	MaxSKUBytes     int   // bytes of the unescaped UTF-8 sku (the VARCHAR(64) column)
	MaxOrderIDBytes int   // bytes of the unescaped UTF-8 order_id
	MinTS, MaxTS    int64 // inclusive min, exclusive max, epoch milliseconds
	MaxAmountUnits  int64 // |amount| in money units must be <= this
}

// DefaultLimits returns the production bounds.
func DefaultLimits() Limits {
	return Limits{
		MaxPayloadBytes: 65536,
		MaxSKUBytes:     64,
		MaxOrderIDBytes: 128,
		MinTS:           946684800000,  // 2000-01-01T00:00:00Z
		MaxTS:           4102444800000, // 2100-01-01T00:00:00Z
		MaxAmountUnits:  999999999999999999,
	}
}

// Order is one decoded record. OrderID and SKU alias the payload or the
// Decoder's scratch memory: they are valid only until the next Decode call
// and until the payload is reused. Amount is in money units (10^-money.Scale).
type Order struct {
	OrderID, SKU []byte
	Amount       int64
	TS           int64 // epoch milliseconds
}

// field indexes the four fields in check order.
const (
	fOrderID = iota
	fSKU
	fAmount
	fTS
	numFields
)

// Decoder holds scratch memory reused across records. It is not safe for
// concurrent use; use one per goroutine.
type Decoder struct {
	names [numFields]string
	lim   Limits
	vals  [numFields]value
	// Unescaped strings live here; kept apart so order_id and sku can both
	// alias scratch memory at once.
	scratch [numFields][]byte
	keyBuf  []byte
	// stack has one bit per open container (1 = object) for skipping nested
	// values without recursion; its size is the depth json.Valid allows.
	stack [maxDepth/64 + 1]uint64
}

// NewDecoder returns a Decoder for the given field names and limits.
func NewDecoder(f Fields, l Limits) *Decoder {
	d := &Decoder{names: [numFields]string{f.OrderID, f.SKU, f.Amount, f.TS}, lim: l}
	for i := range d.scratch {
		d.scratch[i] = make([]byte, 0, 64)
	}
	d.keyBuf = make([]byte, 0, 32)
	return d
}

// Decode parses payload into o. It returns OK, or the first reason the record
// is invalid, checking in this order: size, JSON syntax (the whole payload is
// validated before any field is looked at), top-level type, then order_id,
// sku, amount and ts, each fully, in that order. On anything but OK, o is the
// zero Order. It never panics and, once its scratch buffers have grown to the
// largest escaped field seen, never allocates.
func (d *Decoder) Decode(payload []byte, o *Order) Reason {
	*o = Order{}
	if len(payload) > d.lim.MaxPayloadBytes {
		return ReasonTooLarge
	}
	if r := d.scan(payload); r != OK {
		return r
	}
	return d.extract(payload, o)
}

// extract checks the values recorded by scan against types and limits.
func (d *Decoder) extract(p []byte, o *Order) Reason {
	id, r := d.text(p, fOrderID, ReasonBadOrderID, d.lim.MaxOrderIDBytes, ReasonOrderIDTooLong)
	if r != OK {
		return r
	}
	sku, r := d.text(p, fSKU, ReasonBadSKU, d.lim.MaxSKUBytes, ReasonSKUTooLong)
	if r != OK {
		return r
	}
	amount, r := d.amount(p)
	if r != OK {
		return r
	}
	ts, r := d.ts(p)
	if r != OK {
		return r
	}
	*o = Order{OrderID: id, SKU: sku, Amount: amount, TS: ts}
	return OK
}

// text extracts a non-empty string field of at most max bytes.
func (d *Decoder) text(p []byte, f int, bad Reason, max int, tooLong Reason) ([]byte, Reason) {
	v := &d.vals[f]
	switch v.kind {
	case kindNone, kindNull:
		return nil, ReasonMissingField
	case kindString:
	default:
		return nil, ReasonWrongType
	}
	s, ok := d.str(p, f)
	switch {
	case len(s) == 0:
		return nil, ReasonEmptyField
	case !ok:
		return nil, bad
	case len(s) > max:
		return nil, tooLong
	}
	return s, OK
}

// str returns the unescaped content of string field f, aliasing the payload
// when there is nothing to unescape. ok is false if the string holds a lone
// UTF-16 surrogate escape, which has no UTF-8 encoding.
func (d *Decoder) str(p []byte, f int) ([]byte, bool) {
	v := &d.vals[f]
	raw := p[v.start:v.end]
	if !v.escaped {
		return raw, true
	}
	var ok bool
	d.scratch[f], ok = unescape(d.scratch[f][:0], raw)
	return d.scratch[f], ok
}

func (d *Decoder) amount(p []byte) (int64, Reason) {
	v := &d.vals[fAmount]
	var lit []byte
	switch v.kind {
	case kindNone, kindNull:
		return 0, ReasonMissingField
	case kindNumber:
		lit = p[v.start:v.end]
	case kindString:
		// A lone surrogate becomes U+FFFD, which Parse rejects as syntax.
		lit, _ = d.str(p, fAmount)
	default:
		return 0, ReasonWrongType
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
	if d.lim.MaxAmountUnits < 0 || mag > uint64(d.lim.MaxAmountUnits) {
		return 0, ReasonAmountRange
	}
	return u, OK
}

func (d *Decoder) ts(p []byte) (int64, Reason) {
	v := &d.vals[fTS]
	var lit []byte
	switch v.kind {
	case kindNone, kindNull:
		return 0, ReasonMissingField
	case kindNumber:
		// 1.5 or 1e12 is a float on the wire even when its value is whole;
		// encoding/json would refuse it for an int64 too.
		if !v.integer {
			return 0, ReasonWrongType
		}
		lit = p[v.start:v.end]
	case kindString:
		lit, _ = d.str(p, fTS)
	default:
		return 0, ReasonWrongType
	}
	ts, ok := parseInt(lit)
	if !ok {
		return 0, ReasonBadTS
	}
	if ts < d.lim.MinTS || ts >= d.lim.MaxTS {
		return 0, ReasonTSRange
	}
	return ts, OK
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
