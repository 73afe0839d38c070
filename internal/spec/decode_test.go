package spec

import (
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/order"
)

const good = `{"order_id":"o-1","status":"paid","customer":{"id":7,"region":"eu"},"qty":"3","price":"12.5","meta":{"at":"2025-11-24T16:30:00.123456Z"}}`

func TestDecodeSpec(t *testing.T) {
	p := mustParse(t, multi)
	d := p.NewDecoder()
	var r Record
	if reason, field := d.Decode([]byte(good), &r); reason != OK {
		t.Fatalf("%v %s", reason, field)
	}
	at := time.Date(2025, 11, 24, 16, 30, 0, 123000000, time.UTC).UnixMilli()
	if string(r.Vals[0].Bytes) != "o-1" || string(r.Vals[2].Bytes) != "eu" || r.Vals[3].Int != 3 || r.Vals[4].Int != 1250 || r.TS != at {
		t.Fatalf("decoded %+v ts %d", r.Vals, r.TS)
	}
	for _, c := range []struct {
		in     string
		reason Reason
		field  string
	}{
		{`{"customer":{"region":"eu"}`, Reason(order.ReasonNotJSON), ""},
		{`[1]`, Reason(order.ReasonNotObject), ""},
		{`{"order_id":"o","status":"paid","qty":1,"price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonMissingField), "customer.region"},
		{`{"order_id":"o","status":"paid","customer":null,"qty":1,"price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonMissingField), "customer.region"},
		{`{"order_id":"o","status":"paid","customer":"eu","qty":1,"price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonWrongType), "customer.region"},
		// A repeated key replaces the whole object, as encoding/json does.
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"customer":{"id":1},"qty":1,"price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonMissingField), "customer.region"},
		{`{"order_id":"o","status":"paid","customer":{"region":"europe-west"},"qty":1,"price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, ReasonTooLong, "customer.region"},
		{`{"order_id":"o","status":"p\ud800","customer":{"region":"eu"},"qty":1,"price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, ReasonBadText, "status"},
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"qty":"3x","price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, ReasonBadInt, "qty"},
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"qty":1.5,"price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonWrongType), "qty"},
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"qty":1,"price":"1.005","meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonAmountPrecision), "price"},
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"qty":1,"price":"1.00001","meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonAmountPrecision), "price"},
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"qty":1,"price":"1e20","meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonAmountRange), "price"},
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"qty":1,"price":1,"meta":{"at":"2025-11-24 16:30:00Z"}}`, Reason(order.ReasonBadTS), "meta.at"},
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"qty":1,"price":1,"meta":{"at":1764000000000}}`, Reason(order.ReasonWrongType), "meta.at"},
		{`{"order_id":"o","status":"paid","customer":{"region":"eu"},"qty":1,"price":1,"meta":{"at":"1999-12-31T23:59:59Z"}}`, Reason(order.ReasonTSRange), "meta.at"},
		{`{"order_id":"","status":"paid","customer":{"region":"eu"},"qty":1,"price":1,"meta":{"at":"2025-11-24T16:30:00Z"}}`, Reason(order.ReasonEmptyField), "order_id"},
	} {
		reason, field := d.Decode([]byte(c.in), &r)
		if reason != c.reason || field != c.field {
			t.Errorf("Decode(%s) = %v %q, want %v %q", c.in, reason, field, c.reason, c.field)
		}
	}
}

// parseRFC3339 agrees with time.Parse on what it accepts and on the instant, to the millisecond.
func TestParseRFC3339(t *testing.T) {
	for _, s := range []string{
		"2025-11-24T16:30:00Z", "2025-11-24T16:30:00.1Z", "2025-11-24T16:30:00.123456789Z", "2025-11-24T16:30:00.999+01:00",
		"2025-11-24T16:30:00-23:59", "2024-02-29T00:00:00Z", "2000-01-01T00:00:00+00:00", "1969-12-31T23:59:59.999Z",
		"0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "1900-03-01T00:00:00Z",
		// refused by both
		"2023-02-29T00:00:00Z", "2025-13-01T00:00:00Z", "2025-04-31T00:00:00Z", "2025-11-24T24:00:00Z", "2025-11-24T16:60:00Z",
		"2025-11-24T16:30:60Z", "2025-11-24t16:30:00Z", "2025-11-24T16:30:00.1234567890123Z",
		"2025-11-24T16:30:00z", "2025-11-24T16:30:00", "2025-11-24T16:30:00.Z",
		"2025-11-24T16:30:00+0100", "25-11-24T16:30:00Z", "2025-11-24T16:30:00ZZ", "2025-1x-24T16:30:00Z", "",
	} {
		want, err := time.Parse(time.RFC3339Nano, s)
		got, ok := parseRFC3339([]byte(s))
		if ok != (err == nil) || ok && got != want.UnixMilli() {
			t.Errorf("parseRFC3339(%q) = %d %v, time.Parse %d %v", s, got, ok, want.UnixMilli(), err)
		}
	}
	// Deliberately stricter than time.Parse: offsets outside RFC 3339's time-numoffset.
	for _, s := range []string{"2025-11-24T16:30:00+24:00", "2025-11-24T16:30:00+01:60"} {
		if _, ok := parseRFC3339([]byte(s)); ok {
			t.Errorf("parseRFC3339(%q) accepted an offset RFC 3339 does not allow", s)
		}
	}
}

// Decode and Fold allocate nothing per record once the tables hold the record's keys.
func TestDecodeFoldZeroAllocs(t *testing.T) {
	for name, c := range map[string]struct {
		p       *Plan
		payload string
	}{
		"default": {defaultPlan(t, "t"), `{"order_id":"o-1","sku":"SKU\u002d1","amount":"12.34","ts":1764000000000}`},
		"multi":   {mustParse(t, multi), good},
	} {
		d, tabs := c.p.NewDecoder(), []*Tables{c.p.NewTables(), c.p.NewTables()}
		var r Record
		payload := []byte(c.payload)
		allocs := testing.AllocsPerRun(100, func() {
			if reason, field := d.Decode(payload, &r); reason != OK {
				t.Fatal(reason, field)
			}
			c.p.Fold(&r, tabs)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per record", name, allocs)
		}
	}
}
