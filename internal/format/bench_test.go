package format

import (
	"context"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/avrov2"
	"github.com/hamba/avro/v2"

	"github.com/relay-sh/relay/internal/spec"
)

// The decode cost per record of one order, in each format, with the writer schema at hand (it is
// fetched once per id, so the registry is off the hot path):
// relay's JSON scanner, relay's Avro path, and confluent-kafka-go's own avrov2 Deserializer into a
// generic map (what relay would call if it used the serde as it is), for docs/FORMATS.md.
func BenchmarkDecode(b *testing.B) {
	p, err := spec.Parse([]byte(orderSpec), testLimits)
	if err != nil {
		b.Fatal(err)
	}
	// confluent-kafka-go's in-memory registry, which NewRegistry refuses to be: the records are
	// serialized, and the serde deserializes them, against it.
	client, err := schemaregistry.NewClient(schemaregistry.NewConfig("mock://bench"))
	if err != nil {
		b.Fatal(err)
	}
	v1 := register(b, client, "orders-value", orderV1)
	payloads := make([][]byte, 256)
	jsons := make([][]byte, len(payloads))
	for i := range payloads {
		amount := fmt.Sprintf("%d.%02d", 1000+i, i%100)
		payloads[i] = v1.serialize(b, "orders", orderRec(fmt.Sprintf("o-%d", i), fmt.Sprintf("sku-%d", i%32), amount, 1764000000000+int64(i), "eu"))
		jsons[i] = fmt.Appendf(nil, `{"order_id":"o-%d","sku":"sku-%d","amount":"%s","ts":%d,"customer":{"region":"eu"}}`, i, i%32, amount, 1764000000000+int64(i))
	}
	ctx := context.Background()
	var rec spec.Record
	run := func(b *testing.B, in [][]byte, d Decoder) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if r, f, err := d.Decode(ctx, in[i%len(in)], &rec); r != spec.OK || err != nil {
				b.Fatal(r, f, err)
			}
		}
	}
	b.Run("json", func(b *testing.B) { run(b, jsons, NewJSON(p)) })
	b.Run("avro", func(b *testing.B) {
		// No registry: the resolved schema is put where the first record would have put it.
		a := NewAvro(p, nil, 0)
		parsed, err := avro.Parse(orderV1)
		if err != nil {
			b.Fatal(err)
		}
		s, err := a.resolve(parsed)
		if err != nil {
			b.Fatal(err)
		}
		a.schemas.put(v1.id, s)
		run(b, payloads, a)
	})
	b.Run("avrov2-serde", func(b *testing.B) {
		de, err := avrov2.NewDeserializer(client, serde.ValueSerde, avrov2.NewDeserializerConfig())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			var m map[string]any
			if err := de.DeserializeInto("orders", payloads[i%len(payloads)], &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
