// Each Reason is pinned by realistic bad records, and each valid record by the
// exact values it must decode to.

package order

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

const typical = `{"order_id":"o-123456","sku":"SKU-42","amount":"12.34","ts":1764000000000}`

// rec builds a record from the four raw JSON values, in field order; an
// empty raw value leaves the field out.
func rec(id, sku, amount, ts string, extra ...string) string {
	var parts []string
	for i, v := range []string{id, sku, amount, ts} {
		if v != "" {
			parts = append(parts, strconv.Quote([]string{"order_id", "sku", "amount", "ts"}[i])+":"+v)
		}
	}
	parts = append(parts, extra...)
	return "{" + strings.Join(parts, ",") + "}"
}

type want struct {
	r      Reason
	id     string
	sku    string
	amount int64
	ts     int64
}

func ok(id, sku string, amount, ts int64) want { return want{OK, id, sku, amount, ts} }

func check(t *testing.T, d *Decoder, name, in string, w want) {
	t.Helper()
	var o Order
	r := d.Decode([]byte(in), &o)
	if r != w.r {
		t.Errorf("%s: Decode(%.200q) = %v, want %v", name, in, r, w.r)
		return
	}
	if r != OK {
		if o.OrderID != nil || o.SKU != nil || o.Amount != 0 || o.TS != 0 {
			t.Errorf("%s: failed Decode left %+v in the Order", name, o)
		}
		return
	}
	if string(o.OrderID) != w.id || string(o.SKU) != w.sku || o.Amount != w.amount || o.TS != w.ts {
		t.Errorf("%s: Decode(%.200q) = {%q %q %d %d}, want {%q %q %d %d}", name, in,
			o.OrderID, o.SKU, o.Amount, o.TS, w.id, w.sku, w.amount, w.ts)
	}
}

const ts0 = 1764000000000

func TestDecode(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name string
		in   string
		want want
	}{
		// Valid records.
		{"typical", typical, ok("o-123456", "SKU-42", 123400, ts0)},
		{"amount number", rec(`"a"`, `"b"`, `12.34`, `1764000000000`), ok("a", "b", 123400, ts0)},
		{"amount integer number", rec(`"a"`, `"b"`, `7`, `1764000000000`), ok("a", "b", 70000, ts0)},
		{"amount exponent string", rec(`"a"`, `"b"`, `"1.5e2"`, `1764000000000`), ok("a", "b", 1500000, ts0)},
		{"amount exponent number", rec(`"a"`, `"b"`, `12345E-4`, `1764000000000`), ok("a", "b", 12345, ts0)},
		{"amount negative", rec(`"a"`, `"b"`, `"-0.0001"`, `1764000000000`), ok("a", "b", -1, ts0)},
		{"amount negative zero", rec(`"a"`, `"b"`, `-0`, `1764000000000`), ok("a", "b", 0, ts0)},
		{"amount escaped digits", rec(`"a"`, `"b"`, `"\u0031.5"`, `1764000000000`), ok("a", "b", 15000, ts0)},
		{"amount trailing zeros", rec(`"a"`, `"b"`, `"1.230000"`, `1764000000000`), ok("a", "b", 12300, ts0)},
		{"amount at max", rec(`"a"`, `"b"`, `"99999999999999.9999"`, `1764000000000`), ok("a", "b", 999999999999999999, ts0)},
		{"amount at -max", rec(`"a"`, `"b"`, `-99999999999999.9999`, `1764000000000`), ok("a", "b", -999999999999999999, ts0)},
		{"ts string", rec(`"a"`, `"b"`, `1`, `"1764000000000"`), ok("a", "b", 10000, ts0)},
		{"ts string leading zeros", rec(`"a"`, `"b"`, `1`, `"01764000000000"`), ok("a", "b", 10000, ts0)},
		{"ts escaped string", rec(`"a"`, `"b"`, `1`, `"\u0031764000000000"`), ok("a", "b", 10000, ts0)},
		{"ts at min", rec(`"a"`, `"b"`, `1`, `946684800000`), ok("a", "b", 10000, 946684800000)},
		{"ts just below max", rec(`"a"`, `"b"`, `1`, `4102444799999`), ok("a", "b", 10000, 4102444799999)},
		{"whitespace everywhere", " \t\r\n{ \"order_id\" :\n\"a\" ,\t\"sku\" : \"b\" , \"amount\" : 1 , \"ts\" : 1764000000000 } \n",
			ok("a", "b", 10000, ts0)},
		{"fields in another order", `{"ts":1764000000000,"amount":"2","sku":"b","order_id":"a"}`, ok("a", "b", 20000, ts0)},
		{"unknown fields skipped", rec(`"a"`, `"b"`, `1`, `1764000000000`,
			`"meta":{"x":[1,-2.5e-3,{"y":null,"z":[true,false,[]]}],"s":"\u00e9\ud83d\ude00\n","e":{}}`, `"n":-0.0E+0`, `"list":[ ]`),
			ok("a", "b", 10000, ts0)},
		{"unknown field with invalid-looking but valid escapes", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"x":"\ud800 lone surrogates are valid JSON"`),
			ok("a", "b", 10000, ts0)},
		{"duplicate key last wins", rec(`"a"`, `"first"`, `1`, `1764000000000`, `"sku":"second"`), ok("a", "second", 10000, ts0)},
		{"duplicate key overrides wrong type", rec(`"a"`, `5`, `1`, `1764000000000`, `"sku":"ok"`), ok("a", "ok", 10000, ts0)},
		{"duplicate key overrides null", rec(`"a"`, `null`, `1`, `1764000000000`, `"sku":"ok"`), ok("a", "ok", 10000, ts0)},
		{"escaped key matches", `{"order_id":"a","s\u006bu":"b","amount":1,"ts":1764000000000}`, ok("a", "b", 10000, ts0)},
		{"escapes in sku", rec(`"a"`, `"SKU\u002d1"`, `1`, `1764000000000`), ok("a", "SKU-1", 10000, ts0)},
		{"all simple escapes", rec(`"a"`, `"\"\\\/\b\f\n\r\t"`, `1`, `1764000000000`), ok("a", "\"\\/\b\f\n\r\t", 10000, ts0)},
		{"surrogate pair", rec(`"a"`, `"\ud83d\ude00"`, `1`, `1764000000000`), ok("a", "😀", 10000, ts0)},
		{"upper-case hex escape", rec(`"a"`, `"\u00C9"`, `1`, `1764000000000`), ok("a", "É", 10000, ts0)},
		{"raw utf-8", rec(`"ordre-é"`, `"Größe"`, `1`, `1764000000000`), ok("ordre-é", "Größe", 10000, ts0)},
		{"sku trailing space kept", rec(`"a"`, `"SKU-1 "`, `1`, `1764000000000`), ok("a", "SKU-1 ", 10000, ts0)},
		{"sku leading space kept", rec(`"a"`, `" SKU-1"`, `1`, `1764000000000`), ok("a", " SKU-1", 10000, ts0)},
		{"sku at 64 bytes", rec(`"a"`, `"`+long(64)+`"`, `1`, `1764000000000`), ok("a", long(64), 10000, ts0)},
		{"sku 32 two-byte runes", rec(`"a"`, `"`+strings.Repeat("é", 32)+`"`, `1`, `1764000000000`), ok("a", strings.Repeat("é", 32), 10000, ts0)},
		{"order_id at 128 bytes", rec(`"`+long(128)+`"`, `"b"`, `1`, `1764000000000`), ok(long(128), "b", 10000, ts0)},
		{"escaped NUL kept", rec(`"a"`, `"x\u0000y"`, `1`, `1764000000000`), ok("a", "x\x00y", 10000, ts0)},

		// too_large is decided before parsing.
		{"too large", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"pad":"`+long(65536)+`"`), want{r: ReasonTooLarge}},
		{"too large garbage", long(65537), want{r: ReasonTooLarge}},

		// not_json.
		{"empty", "", want{r: ReasonNotJSON}},
		{"only space", " \n\t", want{r: ReasonNotJSON}},
		{"truncated", typical[:len(typical)-1], want{r: ReasonNotJSON}},
		{"truncated in string", `{"order_id":"o-12`, want{r: ReasonNotJSON}},
		{"trailing garbage", typical + "x", want{r: ReasonNotJSON}},
		{"two objects", typical + typical, want{r: ReasonNotJSON}},
		{"trailing comma", `{"order_id":"a",}`, want{r: ReasonNotJSON}},
		{"leading comma", `{,"order_id":"a"}`, want{r: ReasonNotJSON}},
		{"missing colon", `{"order_id" "a"}`, want{r: ReasonNotJSON}},
		{"missing value", `{"order_id":}`, want{r: ReasonNotJSON}},
		{"missing comma", `{"order_id":"a" "sku":"b"}`, want{r: ReasonNotJSON}},
		{"unquoted key", `{order_id:"a"}`, want{r: ReasonNotJSON}},
		{"single quotes", `{'order_id':'a'}`, want{r: ReasonNotJSON}},
		{"invalid escape", rec(`"a"`, `"SKU\x41"`, `1`, `1764000000000`), want{r: ReasonNotJSON}},
		{"short unicode escape", rec(`"a"`, `"\u12"`, `1`, `1764000000000`), want{r: ReasonNotJSON}},
		{"bad hex escape", rec(`"a"`, `"\u12g4"`, `1`, `1764000000000`), want{r: ReasonNotJSON}},
		{"raw tab in string", rec(`"a"`, "\"a\tb\"", `1`, `1764000000000`), want{r: ReasonNotJSON}},
		{"raw newline in skipped string", rec(`"a"`, `"b"`, `1`, `1764000000000`, "\"x\":\"1\n2\""), want{r: ReasonNotJSON}},
		{"invalid utf-8 in sku", rec(`"a"`, "\"\xff\"", `1`, `1764000000000`), want{r: ReasonNotJSON}},
		{"invalid utf-8 in skipped value", rec(`"a"`, `"b"`, `1`, `1764000000000`, "\"x\":\"\xc3\x28\""), want{r: ReasonNotJSON}},
		{"invalid utf-8 in key", rec(`"a"`, `"b"`, `1`, `1764000000000`, "\"\xed\xa0\x80\":1"), want{r: ReasonNotJSON}},
		{"overlong utf-8", rec(`"a"`, "\"\xc0\xaf\"", `1`, `1764000000000`), want{r: ReasonNotJSON}},
		{"truncated utf-8", rec(`"a"`, "\"\xe2\x82\"", `1`, `1764000000000`), want{r: ReasonNotJSON}},
		{"byte order mark", "\xef\xbb\xbf" + typical, want{r: ReasonNotJSON}},
		{"NaN", rec(`"a"`, `"b"`, `NaN`, `1764000000000`), want{r: ReasonNotJSON}},
		{"Infinity", rec(`"a"`, `"b"`, `-Infinity`, `1764000000000`), want{r: ReasonNotJSON}},
		{"leading zero number", rec(`"a"`, `"b"`, `012`, `1764000000000`), want{r: ReasonNotJSON}},
		{"plus number", rec(`"a"`, `"b"`, `+1`, `1764000000000`), want{r: ReasonNotJSON}},
		{"number trailing dot", rec(`"a"`, `"b"`, `1.`, `1764000000000`), want{r: ReasonNotJSON}},
		{"number leading dot", rec(`"a"`, `"b"`, `.5`, `1764000000000`), want{r: ReasonNotJSON}},
		{"number bare exponent", rec(`"a"`, `"b"`, `1e`, `1764000000000`), want{r: ReasonNotJSON}},
		{"lone minus", rec(`"a"`, `"b"`, `-`, `1764000000000`), want{r: ReasonNotJSON}},
		{"hex number", rec(`"a"`, `"b"`, `0x10`, `1764000000000`), want{r: ReasonNotJSON}},
		{"misspelt true", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"x":tru`), want{r: ReasonNotJSON}},
		{"capital null", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"x":Null`), want{r: ReasonNotJSON}},
		{"unclosed nested array", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"x":[1,2`), want{r: ReasonNotJSON}},
		{"mismatched brackets", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"x":[1,2}`), want{r: ReasonNotJSON}},
		{"nested trailing comma", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"x":[1,]`), want{r: ReasonNotJSON}},
		{"nested key without value", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"x":{"y"}`), want{r: ReasonNotJSON}},
		{"comment", typical[:len(typical)-1] + `/* c */}`, want{r: ReasonNotJSON}},
		{"vertical tab whitespace", "\v" + typical, want{r: ReasonNotJSON}},
		{"non-breaking space", "\u00a0" + typical, want{r: ReasonNotJSON}},
		{"NUL after object", typical + "\x00", want{r: ReasonNotJSON}},
		{"malformed array is not_json not not_object", `[1,2`, want{r: ReasonNotJSON}},
		{"malformed scalar", `tru`, want{r: ReasonNotJSON}},
		{"too deep", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"x":`+strings.Repeat("[", maxDepth)+strings.Repeat("]", maxDepth)),
			want{r: ReasonNotJSON}},

		// not_object.
		{"array", `[` + typical + `]`, want{r: ReasonNotObject}},
		{"string", `"{\"order_id\":\"a\"}"`, want{r: ReasonNotObject}},
		{"number", ` 42 `, want{r: ReasonNotObject}},
		{"null", `null`, want{r: ReasonNotObject}},
		{"true", `true`, want{r: ReasonNotObject}},
		{"empty array", `[]`, want{r: ReasonNotObject}},

		// missing_field.
		{"empty object", `{}`, want{r: ReasonMissingField}},
		{"no order_id", rec(``, `"b"`, `1`, `1764000000000`), want{r: ReasonMissingField}},
		{"no sku", rec(`"a"`, ``, `1`, `1764000000000`), want{r: ReasonMissingField}},
		{"no amount", rec(`"a"`, `"b"`, ``, `1764000000000`), want{r: ReasonMissingField}},
		{"no ts", rec(`"a"`, `"b"`, `1`, ``), want{r: ReasonMissingField}},
		{"null order_id", rec(`null`, `"b"`, `1`, `1764000000000`), want{r: ReasonMissingField}},
		{"null amount", rec(`"a"`, `"b"`, `null`, `1764000000000`), want{r: ReasonMissingField}},
		{"null ts", rec(`"a"`, `"b"`, `1`, `null`), want{r: ReasonMissingField}},
		{"later null erases", rec(`"a"`, `"b"`, `1`, `1764000000000`, `"sku":null`), want{r: ReasonMissingField}},
		{"keys are case-sensitive", `{"Order_ID":"a","sku":"b","amount":1,"ts":1764000000000}`, want{r: ReasonMissingField}},
		{"upper-case sku key", rec(`"a"`, ``, `1`, `1764000000000`, `"SKU":"b"`), want{r: ReasonMissingField}},
		{"field only nested", rec(`"a"`, ``, `1`, `1764000000000`, `"x":{"sku":"b"}`), want{r: ReasonMissingField}},
		{"key with trailing space", rec(`"a"`, ``, `1`, `1764000000000`, `"sku ":"b"`), want{r: ReasonMissingField}},

		// wrong_type.
		{"order_id number", rec(`123456`, `"b"`, `1`, `1764000000000`), want{r: ReasonWrongType}},
		{"sku number", rec(`"a"`, `42`, `1`, `1764000000000`), want{r: ReasonWrongType}},
		{"sku object", rec(`"a"`, `{"id":"b"}`, `1`, `1764000000000`), want{r: ReasonWrongType}},
		{"sku array", rec(`"a"`, `["b"]`, `1`, `1764000000000`), want{r: ReasonWrongType}},
		{"sku bool", rec(`"a"`, `true`, `1`, `1764000000000`), want{r: ReasonWrongType}},
		{"amount bool", rec(`"a"`, `"b"`, `false`, `1764000000000`), want{r: ReasonWrongType}},
		{"amount object", rec(`"a"`, `"b"`, `{"value":"1.00","currency":"EUR"}`, `1764000000000`), want{r: ReasonWrongType}},
		{"amount array", rec(`"a"`, `"b"`, `[1]`, `1764000000000`), want{r: ReasonWrongType}},
		{"ts float", rec(`"a"`, `"b"`, `1`, `1.5`), want{r: ReasonWrongType}},
		{"ts whole float", rec(`"a"`, `"b"`, `1`, `1764000000000.0`), want{r: ReasonWrongType}},
		{"ts exponent", rec(`"a"`, `"b"`, `1`, `1.764e12`), want{r: ReasonWrongType}},
		{"ts bool", rec(`"a"`, `"b"`, `1`, `true`), want{r: ReasonWrongType}},
		{"ts object", rec(`"a"`, `"b"`, `1`, `{"ms":1764000000000}`), want{r: ReasonWrongType}},

		// empty_field.
		{"empty order_id", rec(`""`, `"b"`, `1`, `1764000000000`), want{r: ReasonEmptyField}},
		{"empty sku", rec(`"a"`, `""`, `1`, `1764000000000`), want{r: ReasonEmptyField}},

		// bad_amount.
		{"amount words", rec(`"a"`, `"b"`, `"twelve"`, `1764000000000`), want{r: ReasonBadAmount}},
		{"amount empty string", rec(`"a"`, `"b"`, `""`, `1764000000000`), want{r: ReasonBadAmount}},
		{"amount with currency", rec(`"a"`, `"b"`, `"12.34 EUR"`, `1764000000000`), want{r: ReasonBadAmount}},
		{"amount leading space", rec(`"a"`, `"b"`, `" 12.34"`, `1764000000000`), want{r: ReasonBadAmount}},
		{"amount comma decimal", rec(`"a"`, `"b"`, `"12,34"`, `1764000000000`), want{r: ReasonBadAmount}},
		{"amount plus", rec(`"a"`, `"b"`, `"+12.34"`, `1764000000000`), want{r: ReasonBadAmount}},
		{"amount trailing dot", rec(`"a"`, `"b"`, `"12."`, `1764000000000`), want{r: ReasonBadAmount}},
		{"amount NaN string", rec(`"a"`, `"b"`, `"NaN"`, `1764000000000`), want{r: ReasonBadAmount}},
		{"amount lone surrogate", rec(`"a"`, `"b"`, `"1\ud800"`, `1764000000000`), want{r: ReasonBadAmount}},

		// amount_precision.
		{"amount 5 decimals", rec(`"a"`, `"b"`, `"12.34567"`, `1764000000000`), want{r: ReasonAmountPrecision}},
		{"amount 5 decimals number", rec(`"a"`, `"b"`, `0.00001`, `1764000000000`), want{r: ReasonAmountPrecision}},
		{"amount negative exponent", rec(`"a"`, `"b"`, `"1e-5"`, `1764000000000`), want{r: ReasonAmountPrecision}},

		// amount_range.
		{"amount above max", rec(`"a"`, `"b"`, `"100000000000000"`, `1764000000000`), want{r: ReasonAmountRange}},
		{"amount below -max", rec(`"a"`, `"b"`, `-100000000000000`, `1764000000000`), want{r: ReasonAmountRange}},
		{"amount beyond int64", rec(`"a"`, `"b"`, `1e30`, `1764000000000`), want{r: ReasonAmountRange}},
		{"amount MinInt64 units", rec(`"a"`, `"b"`, `"-922337203685477.5808"`, `1764000000000`), want{r: ReasonAmountRange}},

		// bad_ts.
		{"ts words", rec(`"a"`, `"b"`, `1`, `"yesterday"`), want{r: ReasonBadTS}},
		{"ts ISO date", rec(`"a"`, `"b"`, `1`, `"2025-11-24T16:00:00Z"`), want{r: ReasonBadTS}},
		{"ts float string", rec(`"a"`, `"b"`, `1`, `"1.5"`), want{r: ReasonBadTS}},
		{"ts empty string", rec(`"a"`, `"b"`, `1`, `""`), want{r: ReasonBadTS}},
		{"ts plus string", rec(`"a"`, `"b"`, `1`, `"+1764000000000"`), want{r: ReasonBadTS}},
		{"ts spaced string", rec(`"a"`, `"b"`, `1`, `" 1764000000000"`), want{r: ReasonBadTS}},
		{"ts overflow number", rec(`"a"`, `"b"`, `1`, `9223372036854775808`), want{r: ReasonBadTS}},
		{"ts overflow string", rec(`"a"`, `"b"`, `1`, `"99999999999999999999"`), want{r: ReasonBadTS}},

		// ts_range.
		{"ts zero", rec(`"a"`, `"b"`, `1`, `0`), want{r: ReasonTSRange}},
		{"ts negative", rec(`"a"`, `"b"`, `1`, `-1`), want{r: ReasonTSRange}},
		{"ts seconds not ms", rec(`"a"`, `"b"`, `1`, `1764000000`), want{r: ReasonTSRange}},
		{"ts just below min", rec(`"a"`, `"b"`, `1`, `"946684799999"`), want{r: ReasonTSRange}},
		{"ts at max", rec(`"a"`, `"b"`, `1`, `4102444800000`), want{r: ReasonTSRange}},
		{"ts MaxInt64", rec(`"a"`, `"b"`, `1`, `9223372036854775807`), want{r: ReasonTSRange}},
		{"ts MinInt64", rec(`"a"`, `"b"`, `1`, `-9223372036854775808`), want{r: ReasonTSRange}},

		// sku_too_long: bytes, not runes, and after unescaping.
		{"sku 65 bytes", rec(`"a"`, `"`+long(65)+`"`, `1`, `1764000000000`), want{r: ReasonSKUTooLong}},
		{"sku 33 two-byte runes", rec(`"a"`, `"`+strings.Repeat("é", 33)+`"`, `1`, `1764000000000`), want{r: ReasonSKUTooLong}},
		{"sku escapes expand", rec(`"a"`, `"`+strings.Repeat(`\u00e9`, 33)+`"`, `1`, `1764000000000`), want{r: ReasonSKUTooLong}},

		// bad_sku: lone surrogates have no UTF-8 form.
		{"sku lone high surrogate", rec(`"a"`, `"\ud800"`, `1`, `1764000000000`), want{r: ReasonBadSKU}},
		{"sku lone low surrogate", rec(`"a"`, `"x\udc00y"`, `1`, `1764000000000`), want{r: ReasonBadSKU}},
		{"sku reversed pair", rec(`"a"`, `"\ude00\ud83d"`, `1`, `1764000000000`), want{r: ReasonBadSKU}},
		{"sku high then letter", rec(`"a"`, `"\ud83d\u0041"`, `1`, `1764000000000`), want{r: ReasonBadSKU}},

		// order_id_too_long and bad_order_id.
		{"order_id 129 bytes", rec(`"`+long(129)+`"`, `"b"`, `1`, `1764000000000`), want{r: ReasonOrderIDTooLong}},
		{"order_id lone surrogate", rec(`"o-\udfff"`, `"b"`, `1`, `1764000000000`), want{r: ReasonBadOrderID}},

		// Precedence: syntax before fields, then fields in order.
		{"not_json beats missing", `{"sku":1`, want{r: ReasonNotJSON}},
		{"not_json after bad fields", rec(`1`, `2`, `3`, `4`) + "]", want{r: ReasonNotJSON}},
		{"order_id checked before sku", rec(`""`, `5`, `1`, `1764000000000`), want{r: ReasonEmptyField}},
		{"sku checked before amount", rec(`"a"`, ``, `true`, `1764000000000`), want{r: ReasonMissingField}},
		{"amount checked before ts", rec(`"a"`, `"b"`, `"x"`, `true`), want{r: ReasonBadAmount}},
		{"bad sku before too long", rec(`"a"`, `"`+long(70)+`\ud800"`, `1`, `1764000000000`), want{r: ReasonBadSKU}},
	}
	d := NewDecoder(DefaultFields(), DefaultLimits())
	for _, tc := range tests {
		check(t, d, tc.name, tc.in, tc.want)
	}
	// Every reason must be exercised above, or a new one slipped in untested.
	seen := map[Reason]bool{}
	for _, tc := range tests {
		seen[tc.want.r] = true
	}
	for _, r := range append(AllReasons(), OK) {
		if !seen[r] {
			t.Errorf("no test case for %v", r)
		}
	}
}

func TestCustomFields(t *testing.T) {
	f := Fields{OrderID: "id", SKU: "product", Amount: "price", TS: "event_time"}
	d := NewDecoder(f, DefaultLimits())
	check(t, d, "custom names", `{"id":"o1","product":"p1","price":"3.5","event_time":1764000000000}`, ok("o1", "p1", 35000, ts0))
	check(t, d, "default names ignored", typical, want{r: ReasonMissingField})
	check(t, d, "default names beside custom", `{"id":"o1","product":"p1","price":"3.5","event_time":1764000000000,"sku":5,"amount":true}`,
		ok("o1", "p1", 35000, ts0))

	// Two fields may share a key; the one value then feeds both.
	shared := NewDecoder(Fields{OrderID: "k", SKU: "k", Amount: "amount", TS: "ts"}, DefaultLimits())
	check(t, shared, "shared key", `{"k":"same","amount":1,"ts":1764000000000}`, ok("same", "same", 10000, ts0))
	check(t, shared, "shared escaped key", `{"\u006b":"s\u0061me","amount":1,"ts":1764000000000}`, ok("same", "same", 10000, ts0))

	nonASCII := NewDecoder(Fields{OrderID: "commande", SKU: "référence", Amount: "montant", TS: "horodatage"}, DefaultLimits())
	check(t, nonASCII, "non-ASCII key escaped", `{"commande":"c","r\u00e9f\u00e9rence":"r","montant":1,"horodatage":1764000000000}`,
		ok("c", "r", 10000, ts0))
}

func TestCustomLimits(t *testing.T) {
	l := Limits{MaxPayloadBytes: 100, MaxSKUBytes: 3, MaxOrderIDBytes: 2, MinTS: -10, MaxTS: 10, MaxAmountUnits: 10000}
	d := NewDecoder(DefaultFields(), l)
	check(t, d, "inside all limits", rec(`"ab"`, `"abc"`, `"-1"`, `-10`), ok("ab", "abc", -10000, -10))
	check(t, d, "sku over", rec(`"ab"`, `"abcd"`, `1`, `0`), want{r: ReasonSKUTooLong})
	check(t, d, "order_id over", rec(`"abc"`, `"a"`, `1`, `0`), want{r: ReasonOrderIDTooLong})
	check(t, d, "amount over", rec(`"a"`, `"a"`, `1.0001`, `0`), want{r: ReasonAmountRange})
	check(t, d, "amount under", rec(`"a"`, `"a"`, `-1.0001`, `0`), want{r: ReasonAmountRange})
	check(t, d, "ts at max", rec(`"a"`, `"a"`, `1`, `10`), want{r: ReasonTSRange})
	check(t, d, "ts below min", rec(`"a"`, `"a"`, `1`, `"-11"`), want{r: ReasonTSRange})
	exact := rec(`"a"`, `"a"`, `1`, `0`)
	exact = exact[:len(exact)-1] + `,"p":"` + strings.Repeat("x", 100-len(exact)-7) + `"}`
	if len(exact) != 100 {
		t.Fatalf("test setup: len = %d", len(exact))
	}
	check(t, d, "payload at limit", exact, ok("a", "a", 10000, 0))
	check(t, d, "payload over limit", exact+" ", want{r: ReasonTooLarge})

	neg := NewDecoder(DefaultFields(), Limits{MaxPayloadBytes: 100, MaxSKUBytes: 3, MaxOrderIDBytes: 2, MinTS: -10, MaxTS: 10, MaxAmountUnits: -1})
	check(t, neg, "negative max amount admits nothing", rec(`"a"`, `"a"`, `0`, `0`), want{r: ReasonAmountRange})
}

// TestAliasing pins the memory contract: unescaped strings alias the
// payload, escaped ones the Decoder's buffer, which the next call reuses (a
// caller that keeps records decodes them with spec's Decoder, one Record each).
func TestAliasing(t *testing.T) {
	d := NewDecoder(DefaultFields(), DefaultLimits())
	p := []byte(typical)
	var o Order
	if r := d.Decode(p, &o); r != OK {
		t.Fatal(r)
	}
	if !within(o.SKU, p) || !within(o.OrderID, p) {
		t.Error("unescaped strings should alias the payload")
	}
	p2 := []byte(rec(`"\u006f-1"`, `"SKU\u002d1"`, `1`, `1764000000000`))
	if r := d.Decode(p2, &o); r != OK {
		t.Fatal(r)
	}
	if within(o.SKU, p2) || string(o.SKU) != "SKU-1" || string(o.OrderID) != "o-1" {
		t.Errorf("escaped sku: %q %q", o.OrderID, o.SKU)
	}
	first := o.SKU
	var o3 Order
	if r := d.Decode([]byte(rec(`"a"`, `"SKU\u002d2"`, `1`, `1764000000000`)), &o3); r != OK {
		t.Fatal(r)
	}
	if string(first) == "SKU-1" || string(o3.SKU) != "SKU-2" {
		t.Errorf("buffer not reused as documented: earlier %q, now %q", first, o3.SKU)
	}
}

func within(s, p []byte) bool {
	if len(s) == 0 {
		return false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	b := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	return a >= b && a+uintptr(len(s)) <= b+uintptr(len(p))
}

func TestDecodeZeroAllocs(t *testing.T) {
	d := NewDecoder(DefaultFields(), DefaultLimits())
	inputs := []string{
		typical,
		rec(`"`+strings.Repeat(`\u00e9`, 60)+`"`, `"SKU\u002d1\ud83d\ude00"`, `"\u0031.5"`, `"\u0031764000000000"`),
		rec(`"a"`, `"b"`, `1`, `1764000000000`, `"meta":{"x":[1,-2.5e-3,{"y":null,"z":[true,false,[]]}],"s\u00e9":"\u00e9"}`),
		rec(`"a"`, `"b"`, `"bad"`, `1764000000000`),
		`{"order_id":"a",`,
		`[1,2,3]`,
		strings.Repeat(`{"a":`, 500) + strings.Repeat("}", 500),
	}
	for _, in := range inputs {
		p := []byte(in)
		var o Order
		d.Decode(p, &o) // warm up the scratch buffers
		allocs := testing.AllocsPerRun(200, func() { d.Decode(p, &o) })
		if allocs != 0 {
			t.Errorf("Decode(%.60q) allocated %v times per call", in, allocs)
		}
	}
}

func TestReasons(t *testing.T) {
	all := AllReasons()
	if len(all) != int(numReasons)-1 {
		t.Fatalf("AllReasons has %d, want %d", len(all), numReasons-1)
	}
	names := map[string]bool{}
	for i, r := range all {
		if r == OK {
			t.Error("AllReasons includes OK")
		}
		if i > 0 && r <= all[i-1] {
			t.Error("AllReasons not in order")
		}
		n := r.String()
		if n == "" || names[n] || strings.ToLower(n) != n || strings.ContainsAny(n, " -") {
			t.Errorf("bad or duplicate label %q for %d", n, r)
		}
		names[n] = true
	}
	spot := map[Reason]string{OK: "ok", ReasonTooLarge: "too_large", ReasonNotJSON: "not_json", ReasonAmountPrecision: "amount_precision",
		ReasonOrderIDTooLong: "order_id_too_long", ReasonBadSKU: "bad_sku", ReasonBadOrderID: "bad_order_id"}
	for r, n := range spot {
		if r.String() != n {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), n)
		}
	}
	if got := Reason(200).String(); got != "reason(200)" {
		t.Errorf("unknown reason = %q", got)
	}
	all[0] = OK
	if AllReasons()[0] == OK {
		t.Error("AllReasons shares its slice with callers")
	}
}

// TestReuseAfterFailure guards against state leaking from one record into the
// next: a field seen in one record must not count as present in the next.
func TestReuseAfterFailure(t *testing.T) {
	d := NewDecoder(DefaultFields(), DefaultLimits())
	check(t, d, "first", typical, ok("o-123456", "SKU-42", 123400, ts0))
	check(t, d, "then missing ts", rec(`"a"`, `"b"`, `1`, ``), want{r: ReasonMissingField})
	check(t, d, "then not json", `{"ts":1764000000000`, want{r: ReasonNotJSON})
	check(t, d, "then missing sku", rec(`"a"`, ``, `1`, `1764000000000`), want{r: ReasonMissingField})
	check(t, d, "then fine", typical, ok("o-123456", "SKU-42", 123400, ts0))
}
