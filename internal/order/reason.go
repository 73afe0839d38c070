// Every Reason has exactly one stable metric label, and AllReasons lists every
// non-OK one, so metrics can be pre-registered and dashboards never see a
// label appear for the first time during an incident.

package order

import "strconv"

// Reason says why a record is invalid; OK means it is valid.
type Reason uint8

const (
	OK                    Reason = iota
	ReasonTooLarge               // "too_large"
	ReasonNotJSON                // "not_json": malformed JSON, or invalid UTF-8 anywhere in it
	ReasonNotObject              // "not_object": valid JSON whose top level is not an object
	ReasonMissingField           // "missing_field": a field absent or null
	ReasonWrongType              // "wrong_type": e.g. sku a number, amount a bool, ts a float
	ReasonEmptyField             // "empty_field": order_id or sku is ""
	ReasonBadAmount              // "bad_amount": amount is not a decimal
	ReasonAmountPrecision        // "amount_precision": more fractional digits than money.Scale
	ReasonAmountRange            // "amount_range": |amount| > Limits.MaxAmountUnits
	ReasonBadTS                  // "bad_ts": ts is not an integer or overflows int64
	ReasonTSRange                // "ts_range": ts outside [MinTS, MaxTS)
	ReasonSKUTooLong             // "sku_too_long"
	ReasonBadSKU                 // "bad_sku": sku is not valid UTF-8 once unescaped (a lone \uD800-style surrogate)
	ReasonOrderIDTooLong         // "order_id_too_long"
	ReasonBadOrderID             // "bad_order_id": order_id is not valid UTF-8 once unescaped (lone surrogate)

	numReasons
)

var reasonNames = [numReasons]string{
	OK:                    "ok",
	ReasonTooLarge:        "too_large",
	ReasonNotJSON:         "not_json",
	ReasonNotObject:       "not_object",
	ReasonMissingField:    "missing_field",
	ReasonWrongType:       "wrong_type",
	ReasonEmptyField:      "empty_field",
	ReasonBadAmount:       "bad_amount",
	ReasonAmountPrecision: "amount_precision",
	ReasonAmountRange:     "amount_range",
	ReasonBadTS:           "bad_ts",
	ReasonTSRange:         "ts_range",
	ReasonSKUTooLong:      "sku_too_long",
	ReasonBadSKU:          "bad_sku",
	ReasonOrderIDTooLong:  "order_id_too_long",
	ReasonBadOrderID:      "bad_order_id",
}

// String returns the metric label of r.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// AllReasons returns every non-OK reason in a fresh slice the caller may keep.
func AllReasons() []Reason {
	rs := make([]Reason, 0, numReasons-1)
	for r := OK + 1; r < numReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}
