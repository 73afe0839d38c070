package loadgen

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"

	jsonschema "github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/relay-sh/relay/internal/spec"
)

// Every JSON Schema record loadgen writes is the header of the registered id and then exactly its
// JSON twin, which validates against the registered schema (santhosh-tekuri/jsonschema, the
// validator under confluent-kafka-go's serde: the schema says what the records hold), for the
// default spec and random specs (nested fields, ints, decimals of any scale, both event time
// formats); the bad records rotate through bad_header (unframed), unknown_schema and the
// generator's bad JSON framed under the real id, judged by the spec's decoder.
func TestJSONSchemaRecordsAreFramedTwins(t *testing.T) { forTwinPlans(t, checkFramedTwins) }

func checkFramedTwins(t *testing.T, p *spec.Plan) {
	text, err := JSONSchema(p)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := jsonschema.CompileString("mem://order.json", text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	w := &jsonSchemaWriter{plan: p, headers: [][]byte{{0, 0, 0, 0, 42}}}
	g := NewGenerator(Options{Seed: 36, BadRate: 0.05, Plan: p})
	dec := p.NewDecoder()
	var rec spec.Record
	kinds := map[string]int{}
	for range 3000 {
		_, r := g.Next()
		out, err := w.write(r)
		if err != nil {
			t.Fatal(err)
		}
		framedUnder := func(id uint32) bool {
			return len(out.payload) >= 5 && out.payload[0] == 0 && binary.BigEndian.Uint32(out.payload[1:5]) == id &&
				bytes.Equal(out.payload[5:], r.payload)
		}
		switch {
		case r.bad == nil:
			if !framedUnder(42) || !bytes.Equal(out.twin, r.payload) || out.verdict != "" || out.bad != nil {
				t.Fatalf("a good record is written as %q (twin %q, verdict %q)", out.payload, out.twin, out.verdict)
			}
			var v any
			d := json.NewDecoder(bytes.NewReader(out.payload[5:]))
			d.UseNumber()
			if err := d.Decode(&v); err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(v); err != nil {
				t.Fatalf("a good record does not validate against the registered schema: %v\n%s\n%s", err, out.payload[5:], text)
			}
			kinds["good"]++
		case out.verdict == "too_large":
			kinds["too_large"]++
		case out.verdict == "bad_header":
			if !bytes.Equal(out.payload, r.payload) {
				t.Fatalf("a bad_header record is %q, not its JSON", out.payload)
			}
			kinds["bad_header"]++
		case out.verdict == "unknown_schema":
			if !framedUnder(UnknownSchemaID) {
				t.Fatalf("an unknown_schema record is % x", out.payload[:5])
			}
			kinds["unknown_schema"]++
		case out.verdict == "":
			if !framedUnder(42) || !bytes.Equal(out.twin, r.payload) || out.bad == nil || out.bad.Payload != string(out.payload) {
				t.Fatalf("a framed bad record: %q, twin %q, bad %+v", out.payload, out.twin, out.bad)
			}
			if reason, _ := dec.Decode(out.payload[5:], &rec); reason != spec.OK {
				kinds["framed, "+reason.String()]++
			} else {
				kinds["framed, good for this spec"]++
			}
		default:
			t.Fatalf("verdict %q", out.verdict)
		}
	}
	t.Logf("records by kind: %v", kinds)
	framed := 0
	for k, n := range kinds {
		if len(k) > 7 && k[:7] == "framed," {
			framed += n
		}
	}
	if kinds["good"] == 0 || kinds["bad_header"] == 0 || kinds["unknown_schema"] == 0 || framed == 0 {
		t.Errorf("records by kind %v: want good, bad_header, unknown_schema and framed bad JSON", kinds)
	}
}
