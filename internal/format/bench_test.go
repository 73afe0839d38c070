package format

import (
	"context"
	"fmt"
	"math/big"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/avrov2"
	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/relay-sh/relay/internal/spec"
)

// The decode cost per record of one order, in each format, with the writer schema at hand (it is
// fetched once per id, so the registry is off the hot path):
// relay's JSON scanner, relay's Avro, Protobuf and JSON Schema paths, and confluent-kafka-go's own
// avrov2 Deserializer into a generic map (what relay would call if it used the serde as it is),
// for docs/FORMATS.md.
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
	b.Run("protobuf", func(b *testing.B) {
		// The first writer of pbSchemas holds orderSpec's fields (a confluent.type.Decimal amount,
		// a Timestamp); its compiled file is put where the first record would have put it.
		md := pbMessageOf(b, pbSchemas[0])
		d := NewProtobuf(p, nil, 0)
		d.schemas.put(1, &pbSchema{file: md.ParentFile()})
		pbs := make([][]byte, len(payloads))
		for i := range pbs {
			m := dynamicpb.NewMessage(md)
			f := md.Fields()
			m.Set(f.ByName("order_id"), protoreflect.ValueOfString(fmt.Sprintf("o-%d", i)))
			m.Set(f.ByName("sku"), protoreflect.ValueOfString(fmt.Sprintf("sku-%d", i%32)))
			am := dynamicpb.NewMessage(f.ByName("amount").Message())
			am.Set(am.Descriptor().Fields().ByNumber(1), protoreflect.ValueOfBytes(twosComplement(big.NewInt(int64(100000+i*101)))))
			am.Set(am.Descriptor().Fields().ByNumber(3), protoreflect.ValueOfInt32(2))
			m.Set(f.ByName("amount"), protoreflect.ValueOfMessage(am))
			tm := dynamicpb.NewMessage(f.ByName("ts").Message())
			tm.Set(tm.Descriptor().Fields().ByNumber(1), protoreflect.ValueOfInt64(1764000000+int64(i)))
			m.Set(f.ByName("ts"), protoreflect.ValueOfMessage(tm))
			cm := dynamicpb.NewMessage(f.ByName("customer").Message())
			cm.Set(cm.Descriptor().Fields().ByName("region"), protoreflect.ValueOfString("eu"))
			m.Set(f.ByName("customer"), protoreflect.ValueOfMessage(cm))
			body, err := proto.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			pbs[i] = append(append(AppendHeader(nil, 1), 0), body...)
		}
		run(b, pbs, d)
	})
	b.Run("json_schema", func(b *testing.B) {
		j := NewJSONSchema(p, nil, 0)
		j.ids.put(1, spec.OK)
		framed := make([][]byte, len(jsons))
		for i := range jsons {
			framed[i] = append(AppendHeader(nil, 1), jsons[i]...)
		}
		run(b, framed, j)
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
