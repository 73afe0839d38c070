package oracle

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// registerPlain registers schema (of schemaType) under subject by plain HTTP, as the oracle reads
// the registry, and returns its id.
func registerPlain(t *testing.T, url, subject, schemaType, schema string) uint32 {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"schema": schema, "schemaType": schemaType})
	resp, err := http.Post(url+"/subjects/"+subject+"/versions", "application/vnd.schemaregistry.v1+json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ ID uint32 }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("register %s: %s %v", subject, resp.Status, err)
	}
	return got.ID
}

// Through a real registry: a framed record under a JSON Schema's id is judged as its JSON text is
// on a JSON topic; before that, too_large, bad_header, unknown_schema (404) and bad_encoding (an
// Avro schema's id) are decided in relay's order.
func TestFoldJSONSchema(t *testing.T) {
	url := os.Getenv("RELAY_TEST_REGISTRY")
	if url == "" {
		if os.Getenv("RELAY_TEST_REQUIRE") != "" {
			t.Fatal("RELAY_TEST_REGISTRY is not set")
		}
		t.Skip("no registry (RELAY_TEST_REGISTRY)")
	}
	subject := fmt.Sprintf("relay_oracle_js_%d", time.Now().UnixNano())
	js := registerPlain(t, url, subject+"-value", "JSON", `{"type": "object", "properties": {"sku": {"type": "string"}}}`)
	avro := registerPlain(t, url, subject+"-avro-value", "AVRO", `{"type": "record", "name": "R", "fields": [{"name": "sku", "type": "string"}]}`)
	frame := func(id uint32, text string) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{0}, id), text...)
	}
	good := `{"order_id":"o-1","sku":"SKU-1","amount":"1.50","ts":1764000000000}`
	payloads := [][]byte{
		frame(js, good),
		[]byte(good),
		frame(1<<31-5, good),
		frame(avro, good),
		frame(js, `{"order_id":"o-2","sku":"SKU-1","ts":1764000000000}`),
		frame(js, good+" x"),
		frame(js, `{"order_id":"o-3","sku":"`+strings.Repeat("s", 70000)+`","amount":"1","ts":1764000000000}`),
	}
	s := Default()
	res, err := s.FoldJSONSchema(NewJSONSchemaReader(url), payloads)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range res.Bad {
		got = append(got, fmt.Sprintf("%d %s %s", b.Index, b.Reason, b.Field))
	}
	want := []string{"1 bad_header ", "2 unknown_schema ", "3 bad_encoding ", "4 missing_field amount", "5 not_json ", "6 too_large "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("bad records %q, want %q", got, want)
	}
	if rows := res.Table("order_stats_minute").Rows; len(rows) != 1 || strings.Join(rows[0], ",") != "2025-11-24 16:00:00,SKU-1,1,1.5000" {
		t.Errorf("rows %q", rows)
	}
}
