package format

import (
	"context"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/relay-sh/relay/internal/spec"
)

// Whatever bytes follow a known schema id, Decode returns a verdict (never an error: the schema is
// at hand) and does not panic; a record it calls OK holds values within the spec's bounds.
func FuzzAvroDecode(f *testing.F) {
	p, err := spec.Parse([]byte(sequenceSpec), testLimits)
	if err != nil {
		f.Fatal(err)
	}
	a := NewAvro(p, nil, 0)
	// Each writer version under its own id, resolved where the first record would have put it.
	for id, text := range sequenceSchemas {
		schema, err := avro.Parse(text)
		if err != nil {
			f.Fatal(err)
		}
		s, err := a.resolve(schema)
		if err != nil {
			f.Fatal(err)
		}
		a.schemas.put(id, s)
	}
	for id, text := range sequenceSchemas {
		schema := avro.MustParse(text)
		native := map[string]any{"order_id": "o", "sku": "s", "amount": []byte{0x30, 0x0c}, "ts": time.UnixMilli(1764000000000),
			"qty": 7, "note": "n", "customer": map[string]any{"shop.Customer": map[string]any{"region": "eu"}}}
		body, err := avro.Marshal(schema, native)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{0, 0, 0, 0, byte(id)}, body...))
	}
	f.Add([]byte{0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	var rec spec.Record
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) >= headerLen && payload[0] == 0 {
			// Only the ids resolved above: any other would ask the (absent) registry.
			payload[1], payload[2], payload[3], payload[4] = 0, 0, 0, payload[4]%byte(len(sequenceSchemas))
		}
		r, field, err := a.Decode(context.Background(), payload, &rec)
		if err != nil {
			t.Fatalf("an error with every schema at hand: %v", err)
		}
		if r != spec.OK {
			if r != spec.ReasonBadHeader && r != spec.ReasonBadEncoding && r != spec.ReasonTooLarge && field == "" {
				t.Fatalf("%s with no field", r)
			}
			return
		}
		for i, max := range []int{128, 64, -1, 8} {
			if n := len(rec.Vals[i].Bytes); max > 0 && (n == 0 || n > max) {
				t.Fatalf("field %d holds %d bytes", i, n)
			}
		}
		if rec.TS < testLimits.MinTS || rec.TS >= testLimits.MaxTS {
			t.Fatalf("event time %d outside the limits", rec.TS)
		}
	})
}
