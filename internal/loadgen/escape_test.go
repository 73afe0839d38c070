package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/relay-sh/relay/internal/spec"
)

// lookup walks path through encoding/json's view of a record.
func lookup(v any, path []string) (any, bool) {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// jsonMeaning is what encoding/json (and time, math/big) read from one field's JSON value, in the
// form Generator.raw gives it: a string's text, a number's exact value, a time's epoch milliseconds.
func jsonMeaning(f spec.InputField, v any) (string, error) {
	text := func() (string, error) {
		switch x := v.(type) {
		case string:
			return x, nil
		case json.Number:
			return x.String(), nil
		}
		return "", fmt.Errorf("%T is neither a string nor a number", v)
	}
	switch f.Kind {
	case spec.KindString:
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%T is not a string", v)
		}
		return s, nil
	case spec.KindDecimal:
		s, err := text()
		r, ok := new(big.Rat).SetString(s)
		if err != nil || !ok {
			return "", fmt.Errorf("decimal %v: %v", v, err)
		}
		return r.RatString(), nil
	case spec.KindInt, spec.KindEpochMS:
		s, err := text()
		if err != nil {
			return "", err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return strconv.FormatInt(n, 10), err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%T is not a time string", v)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return strconv.FormatInt(t.UnixMilli(), 10), err
}

// rawMeaning is the generator's drawn value in jsonMeaning's form.
func rawMeaning(f spec.InputField, raw string) string {
	if f.Kind == spec.KindDecimal {
		r, _ := new(big.Rat).SetString(raw)
		return r.RatString()
	}
	return raw
}

// relayMeaning is what relay's decoder read from field i, in jsonMeaning's form.
func relayMeaning(f spec.InputField, rec *spec.Record, i, last int) string {
	switch {
	case i == last:
		return strconv.FormatInt(rec.TS, 10)
	case f.Kind == spec.KindString:
		return string(rec.Vals[i].Bytes)
	case f.Kind == spec.KindDecimal:
		return new(big.Rat).SetFrac(big.NewInt(rec.Vals[i].Int), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(f.Scale)), nil)).RatString()
	}
	return strconv.FormatInt(rec.Vals[i].Int, 10)
}

// The escaped records mean exactly the values the generator drew, to encoding/json and to relay's
// decoder alike, for the default spec and for specs with nested fields, ints, decimals of every
// scale and both time formats; the same seed gives the same bytes; and the stream holds every
// spelling Options.Escape promises.
func TestEscapedRecordsMeanWhatWasDrawn(t *testing.T) {
	plans := map[string]*spec.Plan{"default": DefaultPlan()}
	for seed := range 4 {
		p, scale, format := randomSpec(t, seed)
		plans[fmt.Sprintf("decimal(%d)/%s", scale, format)] = p
	}
	for name, plan := range plans {
		t.Run(name, func(t *testing.T) {
			o := Options{Plan: plan, Seed: 11, SKUs: 20, Windows: 30, Escape: true}
			g, again := NewGenerator(o), NewGenerator(o)
			fields := plan.InputFields()
			last := len(fields) - 1
			dec := plan.NewDecoder()
			var rec spec.Record
			var all bytes.Buffer
			for n := range 4000 {
				b, _ := g.Next()
				if b2, _ := again.Next(); !bytes.Equal(b, b2) {
					t.Fatalf("record %d differs between two generators of one seed:\n%s\n%s", n, b, b2)
				}
				all.Write(b)
				all.WriteByte(0)
				if !utf8.Valid(b) || !json.Valid(b) {
					t.Fatalf("record %d is not valid UTF-8 JSON: %q", n, b)
				}
				if r, f := dec.Decode(b, &rec); r != spec.OK {
					t.Fatalf("relay's decoder refuses record %d (%s, field %s): %s", n, r, f, b)
				}
				d := json.NewDecoder(bytes.NewReader(b))
				d.UseNumber()
				var v any
				if err := d.Decode(&v); err != nil {
					t.Fatal(err)
				}
				for i, f := range fields {
					jv, ok := lookup(v, f.Path)
					if !ok {
						t.Fatalf("record %d has no %s: %s", n, f.Name, b)
					}
					got, err := jsonMeaning(f, jv)
					want := rawMeaning(f, g.vals[i])
					if err != nil || got != want {
						t.Fatalf("record %d: encoding/json reads %s as %q (%v), the generator drew %q: %s", n, f.Name, got, err, want, b)
					}
					if got := relayMeaning(f, &rec, i, last); got != want {
						t.Fatalf("record %d: relay reads %s as %q, the generator drew %q: %s", n, f.Name, got, want, b)
					}
				}
			}
			// Every spelling appears (a regexp over the stream; records are separated by NUL).
			spellings := map[string]string{
				"a \\u escape of a non-ASCII BMP rune": `\\u00[c-fC-F][0-9a-fA-F]`,
				"a surrogate pair":                     `\\u[dD]83[dD]\\u[dD][c-fC-F][0-9a-fA-F]{2}`,
				"an escaped slash":                     `\\/`,
				"an escaped ASCII letter":              `\\u00[4-7][0-9a-fA-F]`,
				"an escaped member name":               `"[^"\x00]*\\u[0-9a-fA-F]{4}[^"\x00]*"\s*:`,
				"raw non-ASCII":                        `[\x{80}-\x{10FFFF}]`,
				"an escaped <, > or &":                 `\\u00(26|3[cCeE])`,
				"a line break between tokens":          `\n`,
				"a space after a colon":                `": `,
				"a number with an exponent":            `:\s*-?[0-9.]+[eE][+-]?[0-9]+\s*[,}]`,
				"a decimal string with an exponent":    `"-?[0-9.]+[eE][+-]?[0-9]+"`,
				"a string with leading zeros":          `"-?00[0-9]`,
			}
			if plan == DefaultPlan() {
				spellings["a decomposed é (NFD)"] = "e\u0301|e\\\\u0301"
				spellings["a bare decimal number"] = `"amount"\s*:\s*-?[0-9]`
				spellings["ts as a string"] = `"ts"\s*:\s*"`
				spellings["another member first"] = `(^|\x00)\s*\{\s*"(sku|amount|ts)"`
			} else if fields[last].Kind == spec.KindRFC3339 {
				spellings["an RFC 3339 offset"] = `T[0-9:.]+[+-][0-9]{2}:[0-9]{2}"`
				spellings["an RFC 3339 fraction past the millisecond"] = `T[0-9:]+\.[0-9]{4,9}`
			}
			for what, re := range spellings {
				if !regexp.MustCompile(re).Match(all.Bytes()) {
					t.Errorf("no record has %s (/%s/)", what, re)
				}
			}
		})
	}
}

// The escaped vocabulary keeps the key counts of Options and its strings within the field's
// bytes; the NFC and the NFD spelling of one visible text are two keys of the totals.
func TestEscapedVocabulary(t *testing.T) {
	f := spec.InputField{Name: "sku", Path: []string{"sku"}, Kind: spec.KindString, Max: 64, Grouped: true}
	vs := choices(f, Options{SKUs: 100, Escape: true})
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v] || len(v) > 64 || !utf8.ValidString(v) {
			t.Fatalf("vocabulary value %q: repeated, over 64 bytes or not UTF-8", v)
		}
		seen[v] = true
	}
	if len(vs) != 100 || !seen["SKU-0"] || !seen["SKU-café-1"] || !seen["SKU-cafe\u0301-1"] || !seen["SKU-😀-5"] {
		t.Fatalf("vocabulary %q", vs[:8])
	}
	for _, max := range []int{1, 3, 4, 6} {
		g := spec.InputField{Name: "r", Path: []string{"r"}, Kind: spec.KindString, Max: max, Grouped: true}
		for _, v := range choices(g, Options{SKUs: 40, Escape: true}) {
			if v == "" || len(v) > max || !utf8.ValidString(v) {
				t.Fatalf("string(%d) value %q", max, v)
			}
		}
	}
	tot := NewTotals()
	if err := tot.use(DefaultPlan()); err != nil {
		t.Fatal(err)
	}
	g := NewGenerator(Options{Seed: 2, SKUs: 3, Windows: 1, Escape: true})
	var recs []pendingRec
	for range 200 {
		_, r := g.Next()
		recs = append(recs, r)
	}
	if err := tot.record(recs, true); err != nil {
		t.Fatal(err)
	}
	x, _, _ := tot.Snapshot()
	var skus []string
	for _, r := range x.Rows[0] {
		cols, err := x.Plan.Format(0, r)
		if err != nil {
			t.Fatal(err)
		}
		skus = append(skus, cols[1])
	}
	if strings.Join(skus, "|") != "SKU-0|SKU-cafe\u0301-1|SKU-café-1" {
		t.Fatalf("keys of 3 skus in one window: %q", skus)
	}
}
