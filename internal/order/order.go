// Package order turns one Kafka record into a validated Order without
// allocating. Invariant: a record is either fully valid under Limits or gets
// exactly one Reason; nothing is clamped, rounded or repaired on the way.
package order

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
)

// Decoder holds scratch memory reused across records. It is not safe for
// concurrent use; use one per goroutine.
type Decoder struct {
	sc  *Scanner
	lim Limits
	buf []byte // the unescaped order_id and sku of the last record
}

// NewDecoder returns a Decoder for the given field names and limits. A name
// is one top-level key, taken literally (a dot in it is part of the key).
func NewDecoder(f Fields, l Limits) *Decoder {
	return &Decoder{sc: NewScanner([][]string{{f.OrderID}, {f.SKU}, {f.Amount}, {f.TS}}), lim: l}
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
	if r := d.sc.Scan(payload); r != OK {
		return r
	}
	return d.extract(payload, o)
}

// extract checks the values recorded by Scan against types and limits.
func (d *Decoder) extract(p []byte, o *Order) Reason {
	d.buf = d.buf[:0]
	id, r := d.sc.Text(p, fOrderID, d.lim.MaxOrderIDBytes, ReasonBadOrderID, ReasonOrderIDTooLong, &d.buf)
	if r != OK {
		return r
	}
	sku, r := d.sc.Text(p, fSKU, d.lim.MaxSKUBytes, ReasonBadSKU, ReasonSKUTooLong, &d.buf)
	if r != OK {
		return r
	}
	amount, r := d.sc.Decimal(p, fAmount, d.lim.MaxAmountUnits)
	if r != OK {
		return r
	}
	ts, r := d.sc.Int(p, fTS, ReasonBadTS)
	if r != OK {
		return r
	}
	if ts < d.lim.MinTS || ts >= d.lim.MaxTS {
		return ReasonTSRange
	}
	*o = Order{OrderID: id, SKU: sku, Amount: amount, TS: ts}
	return OK
}
