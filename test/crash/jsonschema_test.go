// JSON Schema topics end to end (issue 36), against real Kafka, MariaDB and Apicurio Registry.
//
// Invariant: what these tests require of MySQL is the oracle's fold of the records Kafka committed,
// read through the registry by the oracle's own header parse and HTTP (test/oracle/jsonschema.go)
// and its own JSON rules, never relay's decoder; the loadgen run also checks MySQL against
// loadgen's own totals (the JSON twins, spec.Plan.Fold).

package crash

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
)

// A JSON Schema topic (loadgen's records: aborted transactions, bad_header, unknown_schema,
// too_large and the generator's bad JSON under the registered id among them) read by relay with
// RELAY_INPUT_FORMAT=json_schema, SIGKILLed once mid-run: the tables equal the oracle's fold and
// loadgen's totals, each bad record is dead-lettered once under its reason, and relay verify
// agrees.
func TestJSONSchemaExact(t *testing.T) { testFramedExact(t, "json_schema") }

// At start relay waits for the topic's subject, then refuses a JSON Schema without sku by the
// default spec's key; relay preflight fails the same way.
func TestJSONSchemaStartCheck(t *testing.T) {
	testStartCheck(t, "json_schema", schemaregistry.SchemaInfo{SchemaType: "JSON", Schema: `{"type": "object", "properties": {
	  "order_id": {"type": "string"}, "amount": {"type": ["number", "string"]}, "ts": {"type": "integer"}}}`})
}
