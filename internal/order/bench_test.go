// Micro-benchmarks of the decoder (make bench's micro step runs BenchmarkDecode): a typical, an
// escaped and a wide record, and encoding/json as the baseline the hand-written scanner replaces.
// They measure and check nothing else: TestDecodeZeroAllocs is what holds Decode to no allocation.

package order

import (
	"encoding/json"
	"testing"
)

var sinkOrder Order

func BenchmarkDecode(b *testing.B) {
	cases := []struct{ name, in string }{
		{"typical", typical},
		{"escaped", rec(`"o-123456"`, `"SKU\u002d42"`, `"12.34"`, `1764000000000`)},
		{"extra_fields", rec(`"o-123456"`, `"SKU-42"`, `12.34`, `1764000000000`,
			`"customer":{"id":991,"tags":["vip","eu"],"address":{"city":"Lyon","zip":"69001"}}`, `"source":"web"`)},
	}
	for _, c := range cases {
		p := []byte(c.in)
		b.Run(c.name, func(b *testing.B) {
			d := NewDecoder(DefaultFields(), DefaultLimits())
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if r := d.Decode(p, &sinkOrder); r != OK {
					b.Fatal(r)
				}
			}
		})
	}
}

// BenchmarkEncodingJSON is the baseline the hand-written scanner replaces.
func BenchmarkEncodingJSON(b *testing.B) {
	p := []byte(typical)
	b.ReportAllocs()
	for b.Loop() {
		var v struct {
			OrderID string      `json:"order_id"`
			SKU     string      `json:"sku"`
			Amount  json.Number `json:"amount"`
			TS      int64       `json:"ts"`
		}
		if err := json.Unmarshal(p, &v); err != nil {
			b.Fatal(err)
		}
	}
}
