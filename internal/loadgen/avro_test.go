package loadgen

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/linkedin/goavro/v2"

	"github.com/relay-sh/relay/internal/format"
)

// Every Avro record loadgen writes carries exactly its JSON twin's values, as another library
// (goavro) reads them: the strings, the amount as a decimal at the field's scale, the event time
// in milliseconds; bad records are JSON (bad_header) or name an unknown id (unknown_schema), or
// too_large, and a good record's payload is never one of those.
func TestAvroRecordsCarryTheirTwins(t *testing.T) {
	p := DefaultPlan()
	text, err := AvroSchema(p)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := avro.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := goavro.NewCodec(text)
	if err != nil {
		t.Fatal(err)
	}
	w := &avroWriter{plan: p, fields: p.InputFields(), schema: schema, header: format.AppendHeader(nil, 42)}
	g := NewGenerator(Options{Seed: 36, BadRate: 0.05})
	verdicts := map[string]int{}
	for range 4000 {
		_, r := g.Next()
		out, err := w.write(r)
		if err != nil {
			t.Fatal(err)
		}
		if r.bad != nil {
			verdicts[out.verdict]++
			if out.verdict == "unknown_schema" && binary.BigEndian.Uint32(out.payload[1:5]) != UnknownSchemaID {
				t.Fatalf("an unknown_schema record names id %d", binary.BigEndian.Uint32(out.payload[1:5]))
			}
			continue
		}
		if out.payload[0] != 0 || binary.BigEndian.Uint32(out.payload[1:5]) != 42 || out.verdict != "" {
			t.Fatalf("a good record is framed % x (verdict %q)", out.payload[:5], out.verdict)
		}
		native, rest, err := codec.NativeFromBinary(out.payload[5:])
		if err != nil || len(rest) != 0 {
			t.Fatalf("goavro: %v, %d bytes left", err, len(rest))
		}
		got := native.(map[string]any)
		var twin map[string]any
		dec := json.NewDecoder(bytes.NewReader(out.twin))
		dec.UseNumber()
		if err := dec.Decode(&twin); err != nil {
			t.Fatal(err)
		}
		amount, _ := new(big.Rat).SetString(twin["amount"].(string))
		ts, _ := twin["ts"].(json.Number).Int64()
		if got["order_id"] != twin["order_id"] || got["sku"] != twin["sku"] || got["amount"].(*big.Rat).Cmp(amount) != 0 ||
			!got["ts"].(time.Time).Equal(time.UnixMilli(ts)) {
			t.Fatalf("Avro record %v, JSON twin %s", got, out.twin)
		}
	}
	if verdicts["bad_header"] == 0 || verdicts["unknown_schema"] == 0 || verdicts["too_large"] == 0 {
		t.Errorf("bad records by verdict %v: want bad_header, unknown_schema and too_large", verdicts)
	}
}
