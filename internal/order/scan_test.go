// Tests of the Scanner below the Decoder. Invariant checked: what it accepts is exactly what
// json.Valid accepts, at every nesting depth up to encoding/json's limit, and a field's key matches
// exactly as plain string equality would, whatever the key's length, escapes or spare capacity.

package order

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestDecodeAgreesWithValid cross-checks the not_json verdicts of the table
// above, and a few more, against encoding/json.
func TestDecodeAgreesWithValid(t *testing.T) {
	d := NewDecoder(DefaultFields(), DefaultLimits())
	for _, in := range []string{
		"", "{}", " {} ", "{", "}", `{"a":1}`, `{"a":[1,{"b":[]}]}`, `{"a":[1,{"b":[}]}`, `{"a":"\u0000"}`,
		"{\"a\":\"\x7f\"}", `{"a":1e+5}`, `{"a":-0.0e-0}`, `{"a":1E5}`, `{"a":00}`, `{"a":"\/"}`, `{"a":"\'"}`,
		`{"":""}`, `{"a":[[[[[]]]]]}`, `{"a":{"b":{"c":{}}}}`, `{"a" : [ 1 , 2 ] }`, `{"a":[1 2]}`, `{"a":{"b":1,}}`,
	} {
		var o Order
		r := d.Decode([]byte(in), &o)
		if (r != ReasonNotJSON) != json.Valid([]byte(in)) {
			t.Errorf("Decode(%q) = %v but json.Valid = %v", in, r, json.Valid([]byte(in)))
		}
	}
}

func TestDepthLimit(t *testing.T) {
	d := NewDecoder(DefaultFields(), DefaultLimits())
	// The top-level object is depth 1, as in encoding/json.
	for _, n := range []int{maxDepth - 2, maxDepth - 1, maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"k":`} {
			closeBy := map[string]string{"[": "]", `{"k":`: "}"}[open]
			in := `{"x":` + strings.Repeat(open, n) + "1" + strings.Repeat(closeBy, n) + "}"
			var o Order
			r := d.Decode([]byte(in), &o)
			if want := json.Valid([]byte(in)); (r != ReasonNotJSON) != want {
				t.Errorf("depth %d of %q: Decode = %v, json.Valid = %v", n+1, open, r, want)
			}
			// The same nesting at the top level, where the answer is not_object.
			top := strings.Repeat(open, n+1)
			top = top[len(open):]
			in = "[" + top + "1" + strings.Repeat(closeBy, n) + "]"
			r = d.Decode([]byte(in), &o)
			if want := json.Valid([]byte(in)); (r == ReasonNotObject) != want {
				t.Errorf("top-level depth %d of %q: Decode = %v, json.Valid = %v", n+1, open, r, want)
			}
		}
	}
}

// TestKeyMatch holds the scanner's key matching (a word compare of the first eight bytes, the rest
// only for longer names, the search starting after the last match) to plain string equality: names
// that share their first eight bytes, that differ only in length, nested under a key, keys in any
// order, escaped, in a payload whose capacity ends right after it (a short last key is then read
// byte by byte) and in one followed by other bytes within its capacity (which must not count).
func TestKeyMatch(t *testing.T) {
	paths := [][]string{{"ab"}, {"abcdefgh"}, {"abcdefghij"}, {"abcdefghik"}, {"x", "abcdefghij"}, {"abcdefgh", "y"}, {"a"}}
	s := NewScanner(paths)
	for _, c := range []struct {
		in   string
		want []string // per field, "" when it has no string value
	}{
		{`{"ab":"1","abcdefgh":"2","abcdefghij":"3","abcdefghik":"4","x":{"abcdefghij":"5"}}`, []string{"1", "2", "3", "4", "5", "", ""}},
		{`{"x":{"abcdefghij":"5"},"abcdefghik":"4","abcdefghij":"3","abcdefgh":"2","ab":"1"}`, []string{"1", "2", "3", "4", "5", "", ""}},
		{`{"abcdefghik":"4","ab":"1","abcdefghi":"no","abcdefghijk":"no","abc":"no","b":"no"}`, []string{"1", "", "", "4", "", "", ""}},
		{`{"abcdefgh":{"y":"6"},"x":{"ab":"no","abcdefghik":"no"}}`, []string{"", "", "", "", "", "6", ""}},
		{`{"\u0061b":"1","abcdefgh\u0069j":"3","ab\u0000":"no","a\u0000":"no"}`, []string{"1", "", "3", "", "", "", ""}},
		{`{"ab":"1"}`, []string{"1", "", "", "", "", "", ""}},
		{`{"a":"7"}`, []string{"", "", "", "", "", "", "7"}},
		{`{"b":"no","ab":"1","a":"7"}`, []string{"1", "", "", "", "", "", "7"}},
	} {
		exact := []byte(c.in)
		spare := append(bytes.Repeat([]byte{'a'}, len(c.in)+64)[:0], c.in...)
		for _, p := range [][]byte{exact[:len(exact):len(exact)], spare} {
			if r := s.Scan(p); r != OK {
				t.Fatalf("%s: %v", c.in, r)
			}
			for f, w := range c.want {
				got, r := s.String(p, f)
				if w == "" && r == OK || w != "" && (r != OK || string(got) != w) {
					t.Errorf("%s (capacity %d): field %v = %q, %v; want %q", c.in, cap(p), paths[f], got, r, w)
				}
			}
		}
	}
}
