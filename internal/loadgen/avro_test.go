package loadgen

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/linkedin/goavro/v2"

	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/spec"
)

// Every Avro record loadgen writes carries exactly its JSON twin's values, as another library
// (goavro) reads them, for the default spec and random specs (a nested field, an int, a decimal of
// a random scale, either event time format): each field compared by its path; bad records are
// JSON (bad_header) or name an unknown id (unknown_schema), or too_large, and a good record's
// payload is never one of those.
func TestAvroRecordsCarryTheirTwins(t *testing.T) { forTwinPlans(t, checkTwins) }

// forTwinPlans runs check for the default spec and four random ones, each a subtest.
func forTwinPlans(t *testing.T, check func(*testing.T, *spec.Plan)) {
	plans := []*spec.Plan{DefaultPlan()}
	for seed := range 4 {
		p, _, _ := randomSpec(t, seed)
		plans = append(plans, p)
	}
	for i, p := range plans {
		t.Run(fmt.Sprint(i), func(t *testing.T) { check(t, p) })
	}
}

func checkTwins(t *testing.T, p *spec.Plan) {
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
	w := &avroWriter{plan: p, fields: p.InputFields(), versions: []avroVersion{{schema, format.AppendHeader(nil, 42)}}}
	g := NewGenerator(Options{Seed: 36, BadRate: 0.05, Plan: p})
	verdicts := map[string]int{}
	for range 3000 {
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
		var twin map[string]any
		dec := json.NewDecoder(bytes.NewReader(out.twin))
		dec.UseNumber()
		if err := dec.Decode(&twin); err != nil {
			t.Fatal(err)
		}
		for _, f := range w.fields {
			got, want := at(native, f.Path), at(twin, f.Path)
			if !sameValue(f.Kind, got, want) {
				t.Fatalf("%s: Avro %v (%T), JSON twin %v\n%s", f.Name, got, got, want, out.twin)
			}
		}
	}
	if verdicts["bad_header"] == 0 || verdicts["unknown_schema"] == 0 {
		t.Errorf("bad records by verdict %v: want bad_header and unknown_schema", verdicts)
	}
}

func at(v any, path []string) any {
	for _, k := range path {
		v = v.(map[string]any)[k]
	}
	return v
}

// sameValue says whether goavro's value is the JSON twin's, exactly.
func sameValue(kind string, avroV, jsonV any) bool {
	text := fmt.Sprint(jsonV)
	switch kind {
	case spec.KindDecimal:
		r, ok := new(big.Rat).SetString(text)
		return ok && avroV.(*big.Rat).Cmp(r) == 0
	case spec.KindEpochMS:
		ms, err := jsonV.(json.Number).Int64()
		return err == nil && avroV.(time.Time).Equal(time.UnixMilli(ms))
	case spec.KindInt:
		return fmt.Sprint(avroV) == text
	}
	return avroV == jsonV
}
