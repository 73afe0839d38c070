package format

import (
	"context"
	"fmt"
	"testing"

	"github.com/relay-sh/relay/internal/spec"
)

// Whatever bytes follow a known schema id, Decode returns a verdict (never an error: the ids are at
// hand) and does not panic; under a JSON Schema's id its verdict, field and values are the JSON
// path's for the bytes after the header, and under another type's id the record is bad_encoding.
func FuzzJSONSchemaDecode(f *testing.F) {
	p, err := spec.Parse([]byte(sequenceSpec), testLimits)
	if err != nil {
		f.Fatal(err)
	}
	j := NewJSONSchema(p, nil, 0)
	j.ids.put(0, spec.OK)                // a JSON Schema's id
	j.ids.put(1, spec.ReasonBadEncoding) // an Avro schema's
	plain := NewJSON(p)
	for _, text := range []string{
		`{"order_id":"o","sku":"s","amount":"12.34","ts":1764000000000,"qty":7,"customer":{"region":"eu"}}`,
		`{"order_id":"\u00e9\ud83d\ude00","sku":"s\/\"","amount":-1e-4,"ts":"1764000000000","qty":"-9223372036854775808","customer":{"region":"eu"}}`,
		`{"order_id":"o","sku":"s","amount":1,"ts":1764000000000,"qty":1,"customer":null}`,
		`[1]`, `{"order_id":`,
	} {
		f.Add(append(AppendHeader(nil, 0), text...))
	}
	f.Add(append(AppendHeader(nil, 1), `{"order_id":"o"}`...))
	f.Add([]byte(`{"order_id":"o"}`))
	var rec, want spec.Record
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) >= headerLen && payload[0] == 0 {
			// Only the ids at hand: any other would ask the (absent) registry.
			payload[1], payload[2], payload[3], payload[4] = 0, 0, 0, payload[4]%2
		}
		r, field, err := j.Decode(context.Background(), payload, &rec)
		if err != nil {
			t.Fatalf("an error with every id at hand: %v", err)
		}
		switch {
		case p.TooLarge(payload):
			if r != spec.ReasonTooLarge {
				t.Fatalf("%d bytes: %s, want too_large", len(payload), r)
			}
			return
		case len(payload) < headerLen || payload[0] != 0:
			if r != spec.ReasonBadHeader {
				t.Fatalf("no header: %s", r)
			}
			return
		case payload[4] == 1:
			if r != spec.ReasonBadEncoding {
				t.Fatalf("an Avro schema's id: %s", r)
			}
			return
		}
		wr, wf, _ := plain.Decode(context.Background(), payload[headerLen:], &want)
		if r != wr || field != wf {
			t.Fatalf("%s %q, the JSON path says %s %q", r, field, wr, wf)
		}
		if r == spec.OK && fmt.Sprint(rec.Vals, rec.TS) != fmt.Sprint(want.Vals, want.TS) {
			t.Fatalf("values %v %d, the JSON path's %v %d", rec.Vals, rec.TS, want.Vals, want.TS)
		}
	})
}
