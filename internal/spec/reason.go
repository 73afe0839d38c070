// Reasons of the spec decoder. Invariant: order's reasons keep their numbers and labels (the
// default spec reports exactly what order.Decoder reports); the spec's own start at 64, past any
// order reason, so one byte names either.

package spec

import (
	"strconv"

	"github.com/relay-sh/relay/internal/order"
)

// Reason says why a record is invalid: one of order's reasons, or one of the spec's own below.
type Reason uint8

// OK means the record is valid.
const OK = Reason(order.OK)

const (
	ReasonTooLong Reason = 64 + iota // "too_long": a string field past its string(N) bound
	ReasonBadText                    // "bad_text": a string field with a lone surrogate escape
	ReasonBadInt                     // "bad_int": an int field that is not -?[0-9]+ within int64
	// The reasons of records in a registry's wire format (internal/format).
	ReasonBadHeader     // "bad_header": not the magic byte 0 and a 4-byte schema id (or a bad Protobuf message index list)
	ReasonUnknownSchema // "unknown_schema": a schema id the registry does not know
	ReasonBadEncoding   // "bad_encoding": the payload does not decode under its writer schema, or bytes are left over
)

// Order's reasons that a decoder of another format returns by itself.
const (
	ReasonTooLarge     = Reason(order.ReasonTooLarge)
	ReasonMissingField = Reason(order.ReasonMissingField)
	ReasonWrongType    = Reason(order.ReasonWrongType)
	// A decimal with a non-zero digit below money.Scale.
	ReasonAmountPrecision = Reason(order.ReasonAmountPrecision)
	// A decimal past the amount limit.
	ReasonAmountRange = Reason(order.ReasonAmountRange)
	// An epoch_ms event time past int64 (a Protobuf uint64), as the JSON decoder says of one.
	ReasonBadTS = Reason(order.ReasonBadTS)
)

var ownNames = [...]string{"too_long", "bad_text", "bad_int", "bad_header", "unknown_schema", "bad_encoding"}

// AllReasons lists every reason a spec's decoder can return, order's and the spec's own, in
// numeric order: the values of relay_bad_records_total's reason label and of the dead-letter
// table's reason column (docs/METRICS.md lists them; a test checks).
func AllReasons() []Reason {
	var rs []Reason
	for _, r := range order.AllReasons() {
		rs = append(rs, Reason(r))
	}
	for i := range ownNames {
		rs = append(rs, ReasonTooLong+Reason(i))
	}
	return rs
}

// String returns the metric label of r.
func (r Reason) String() string {
	if r < ReasonTooLong {
		return order.Reason(r).String()
	}
	if i := int(r - ReasonTooLong); i < len(ownNames) {
		return ownNames[i]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}
