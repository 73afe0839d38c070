// Registry formats end to end (issue 36), against real Kafka, MariaDB and Apicurio Registry.
//
// Invariant: what these tests require of MySQL is the oracle's fold of the records Kafka committed,
// read through the registry with linkedin/goavro (test/oracle/avro.go) or protoparse and dynamicpb
// (test/oracle/protobuf.go), never relay's decoders;
// the loadgen runs also check MySQL against loadgen's own totals (the JSON twins, spec.Plan.Fold).

package crash

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/linkedin/goavro/v2"

	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/test/oracle"
)

// committedOnce waits until p finished recovery and committed a checkpoint of the job.
func (e *env) committedOnce(p *proc) {
	e.t.Helper()
	if _, err := p.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, 60*time.Second); err != nil {
		e.t.Fatalf("relay did not finish recovery: %v\n%s", err, tail(p.Log, 30))
	}
	testenv.Eventually(e.t, 60*time.Second, func() bool {
		p.exited(e.t)
		for _, st := range e.ledgerRows() {
			if st == string(ledger.Committed) {
				return true
			}
		}
		return false
	}, "a committed checkpoint")
}

// formatEnv is an env whose relay reads the topic in a registry format through registryURL (the
// oracle reads the registry itself, directly).
func formatEnv(t *testing.T, format string, partitions int, registryURL string, extra ...string) *env {
	direct := testenv.Registry(t)
	e := newEnv(t, partitions, append([]string{"RELAY_INPUT_FORMAT=" + format, "RELAY_SCHEMA_REGISTRY_URL=" + registryURL}, extra...)...)
	e.format, e.registry = format, direct
	return e
}

func newRegistry(t *testing.T, url string) *format.Registry {
	t.Helper()
	reg, err := format.NewRegistry(format.RegistryConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// A topic in each registry format (loadgen's records: aborted transactions, bad_header,
// unknown_schema and too_large records among them) read by relay with RELAY_INPUT_FORMAT, SIGKILLed
// once mid-run: the tables equal the oracle's fold (goavro, or protoparse and dynamicpb) and
// loadgen's totals, each bad record is dead-lettered once under its reason, and relay verify's
// recount (relay's decoder, through the registry) agrees.
func TestRegistryFormatsExact(t *testing.T) {
	for _, f := range []string{"avro", "protobuf", "json_schema"} {
		t.Run(f, func(t *testing.T) {
			t.Parallel() // each its own job and topic
			registryExact(t, f)
		})
	}
}

func registryExact(t *testing.T, format string) {
	e := formatEnv(t, format, 4, testenv.Registry(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	seed := testenv.Seed(t, "RELAY_TEST_SEED", 0)
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 20000, Batch: 400, AbortRate: 0.1, BadRate: 0.002, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	e.committedOnce(p)
	p.Kill()
	_ = p.Wait(10 * time.Second)
	e.finish(totals)
	want, _, good := totals.Snapshot()
	if d := diff(want, e.actual(want.Plan)); d != "" {
		t.Fatalf("MySQL differs from loadgen's totals:\n%s", d)
	}
	// relay verify recounts the topic through the registry with relay's decoder: consistent.
	stdout, stderr, code := e.cli(nil, "verify")
	if code != 0 || !strings.Contains(stdout, "no differences") || !strings.Contains(stdout, fmt.Sprintf("(%d good, %d bad)", good, len(totals.Bad))) {
		t.Fatalf("verify after a %s run: exit %d\n%s%s", format, code, stdout, stderr)
	}
	x := e.expected(totals)
	t.Logf("%d records committed to Kafka, %d good, %d bad; %d rows in order_stats_minute", x.records, good, len(x.bad), len(x.result.Tables[0].Rows))
}

// evolutionSpec is a spec whose fields the evolving schemas below give differently: qty is an
// Avro int, then a long; customer.region is in a nested optional record, then gone.
const evolutionSpec = `input:
  format: avro
  fields:
    order_id: string(64)
    sku: string(32)
    customer.region: string(8)
    qty: int
    amount: decimal(2)
  event_time: {field: ts, format: epoch_ms}
aggregates:
  - table: evo_by_region
    window: 1m
    dimensions:
      - {column: region, field: customer.region}
      - {column: sku, field: sku}
    measures:
      - {column: orders, kind: count}
      - {column: units, kind: sum, field: qty}
      - {column: revenue, kind: sum, field: amount}
      - {column: top, kind: max, field: amount}
`

// The writer schemas, registered in this order under BACKWARD compatibility: v2 promotes qty from
// int to long, drops channel (which had a default) and adds coupon (with a default); v3 drops
// the customer record, so its records lack customer.region (missing_field, dead-lettered).
var evolution = []string{
	`{"type":"record","name":"Order","namespace":"relay.evo","fields":[
	  {"name":"order_id","type":"string"},
	  {"name":"sku","type":"string"},
	  {"name":"customer","type":["null",{"type":"record","name":"Customer","fields":[{"name":"region","type":"string"}]}],"default":null},
	  {"name":"qty","type":"int"},
	  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
	  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
	  {"name":"channel","type":"string","default":"web"}]}`,
	`{"type":"record","name":"Order","namespace":"relay.evo","fields":[
	  {"name":"order_id","type":"string"},
	  {"name":"sku","type":"string"},
	  {"name":"customer","type":["null",{"type":"record","name":"Customer","fields":[{"name":"region","type":"string"}]}],"default":null},
	  {"name":"qty","type":"long"},
	  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
	  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
	  {"name":"coupon","type":["null","string"],"default":null}]}`,
	`{"type":"record","name":"Order","namespace":"relay.evo","fields":[
	  {"name":"order_id","type":"string"},
	  {"name":"sku","type":"string"},
	  {"name":"qty","type":"long"},
	  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
	  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
	  {"name":"coupon","type":["null","string"],"default":null}]}`,
}

// avroWriter is one registered writer schema, encoding with goavro.
type avroWriter struct {
	id    int
	codec *goavro.Codec
}

func registerWriter(t *testing.T, c schemaregistry.Client, subject, schema string) avroWriter {
	t.Helper()
	id, err := c.Register(subject, schemaregistry.SchemaInfo{Schema: schema}, false)
	if err != nil {
		t.Fatalf("register under %s: %v", subject, err)
	}
	codec, err := goavro.NewCodec(schema)
	if err != nil {
		t.Fatal(err)
	}
	return avroWriter{id, codec}
}

// order is one record of the evolving stream, written by w (schema version v, 0-based).
func (w avroWriter) order(t *testing.T, v int, rng *rand.Rand, n int) []byte {
	t.Helper()
	rec := map[string]any{
		"order_id": fmt.Sprintf("o-%d", n),
		"sku":      fmt.Sprintf("SKU-%d", rng.IntN(5)),
		"amount":   big.NewRat(rng.Int64N(2_000_000)-500_000, 100),
		"ts":       time.UnixMilli(1764000000000 + rng.Int64N(10*60_000)).UTC(),
	}
	if v < 2 {
		if rng.IntN(20) == 0 {
			rec["customer"] = nil // null: missing_field customer.region
		} else {
			rec["customer"] = goavro.Union("relay.evo.Customer", map[string]any{"region": []string{"eu", "us", "apac"}[rng.IntN(3)]})
		}
	}
	switch v {
	case 0:
		rec["qty"] = int32(rng.IntN(1000))
		rec["channel"] = "app"
	default:
		rec["qty"] = int64(rng.IntN(1000)) + int64(rng.IntN(2))*3_000_000_000 // past int32 in v2 and v3
		if rng.IntN(2) == 0 {
			rec["coupon"] = goavro.Union("string", "SAVE10")
		} else {
			rec["coupon"] = nil
		}
	}
	body, err := w.codec.BinaryFromNative(nil, rec)
	if err != nil {
		t.Fatalf("goavro: %v", err)
	}
	return append(format.AppendHeader(nil, w.id), body...)
}

// sendAll produces payloads (not transactionally; the test waits for each delivery).
func sendAll(t *testing.T, brokers, topic string, payloads [][]byte) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "enable.idempotence": true, "linger.ms": 5})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, len(payloads))
	for _, v := range payloads {
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: v}, done); err != nil {
			t.Fatal(err)
		}
	}
	for range payloads {
		if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	}
}

// Schema evolution mid-stream: relay starts on v1's records; while it runs, v2 (int promoted to
// long, a defaulted field dropped, one added) and v3 (the customer record dropped) are registered,
// and old writers keep writing v1 among v2's and v3's records. Every table is exact, the v3
// records and the null customers are dead-lettered as missing_field, nothing else.
func TestAvroSchemaEvolution(t *testing.T) {
	// The spec names its format itself (RELAY_INPUT_FORMAT is the default spec's).
	e := newEnv(t, 3, "RELAY_SCHEMA_REGISTRY_URL="+testenv.Registry(t))
	e.format, e.registry = "avro", testenv.Registry(t)
	specPath := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(specPath, []byte(evolutionSpec), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.oracle, err = oracle.Parse([]byte(evolutionSpec)); err != nil {
		t.Fatal(err)
	}
	client := newRegistry(t, e.registry).Client()
	subject := e.topic + "-value"
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 0), 36))
	v1 := registerWriter(t, client, subject, evolution[0])
	var payloads [][]byte
	batch := func(n int, writers ...avroWriter) {
		var b [][]byte
		for range n {
			v := rng.IntN(len(writers))
			b = append(b, writers[v].order(t, v, rng, len(payloads)+len(b)))
		}
		sendAll(t, e.brokers, e.topic, b)
		payloads = append(payloads, b...)
	}
	batch(2000, v1)
	p := e.start("RELAY_PIPELINE_FILE=" + specPath)
	e.committedOnce(p)
	v2 := registerWriter(t, client, subject, evolution[1])
	v3 := registerWriter(t, client, subject, evolution[2])
	if v1.id == v2.id || v2.id == v3.id {
		t.Fatalf("schema ids %d, %d, %d: the registry did not register new versions", v1.id, v2.id, v3.id)
	}
	batch(3000, v1, v2, v3)
	x := e.expectedOf(payloads)
	missing := 0
	for _, b := range x.bad {
		if b.Reason != "missing_field" {
			t.Fatalf("the oracle dead-letters a record as %s: the stream has only missing_field records", b.Reason)
		}
		missing++
	}
	if missing < 500 {
		t.Fatalf("only %d missing_field records: v3 and null customers should give about 1200", missing)
	}
	testenv.Poll(90*time.Second, func() bool {
		p.exited(t)
		return e.diffOracle(x) == ""
	})
	e.stopAll([]*proc{p})
	e.checkEnd(nil, x, nil)
	t.Logf("%d records (schema ids %d, %d, %d), %d dead-lettered as missing_field", len(payloads), v1.id, v2.id, v3.id, missing)
}

// The registry goes away mid-run (relay reaches it through a TCP proxy that is closed: every
// connection reset, every new one refused), just as records of a schema id relay has not seen yet
// arrive: relay waits (relay_schema_registry_waiting 1, the unavailable counter rising), dead-letters
// nothing, and once the registry is back finishes with every table exact.
func TestAvroRegistryOutage(t *testing.T) {
	direct := testenv.Registry(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	proxy := testenv.NewFaultProxyAt(t, addr, u.Host)
	e := formatEnv(t, "avro", 2, "http://"+addr+u.Path)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	seed := testenv.Seed(t, "RELAY_TEST_SEED", 0)
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 3000, Batch: 300, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	maddr := httpAddr(t, p)
	e.committedOnce(p)
	// A second writer schema (the same fields and one more with a default), known only to the
	// registry: relay must ask for it.
	v2 := registerWriter(t, newRegistry(t, direct).Client(), e.topic+"-value", `{"type":"record","name":"Order","namespace":"relay.loadgen","fields":[
	  {"name":"order_id","type":"string"},{"name":"sku","type":"string"},
	  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":38,"scale":4}},
	  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
	  {"name":"note","type":"string","default":""}]}`)
	proxy.Close()
	var later [][]byte
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range 500 {
		body, err := v2.codec.BinaryFromNative(nil, map[string]any{"order_id": fmt.Sprintf("late-%d", i), "sku": fmt.Sprintf("SKU-%d", rng.IntN(7)),
			"amount": big.NewRat(rng.Int64N(100_000), 100), "ts": time.UnixMilli(1764000000000 + rng.Int64N(600_000)).UTC(), "note": "x"})
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, append(format.AppendHeader(nil, v2.id), body...))
	}
	sendAll(t, e.brokers, e.topic, later)
	if _, err := p.WaitLog(func(l harness.LogLine) bool {
		return l.Msg == "waiting for the schema registry (the record is not bad input: it is decoded again)"
	}, 60*time.Second); err != nil {
		t.Fatalf("relay did not wait for the registry: %v\n%s", err, tail(p.Log, 30))
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := scrapeMetrics(t, maddr)
		return s.value(t, "relay_schema_registry_waiting") == 1 && s.value(t, "relay_schema_registry_unavailable_total") >= 2
	}, "relay_schema_registry_waiting 1 and two failed asks")
	time.Sleep(3 * time.Second) // a few more asks fail while the registry is gone
	var dlq int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM relay_dlq WHERE job = ?`, e.job).Scan(&dlq); err != nil {
		t.Fatal(err)
	}
	if dlq != 0 {
		t.Fatalf("%d dead-letter rows while the registry was unreachable", dlq)
	}
	p.exited(t)
	testenv.NewFaultProxyAt(t, addr, u.Host)
	committed, err := totals.Committed()
	if err != nil {
		t.Fatal(err)
	}
	x := e.expectedOf(append(committed, later...))
	testenv.Poll(90*time.Second, func() bool {
		p.exited(t)
		return e.diffOracle(x) == ""
	})
	s := scrapeMetrics(t, maddr)
	if w := s.value(t, "relay_schema_registry_waiting"); w != 0 {
		t.Errorf("relay_schema_registry_waiting %v after the registry came back", w)
	}
	asks := s.value(t, "relay_schema_registry_unavailable_total")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, tail(p.Log, 30))
	}
	e.checkEnd(totals, x, nil)
	t.Logf("%d + %d records exact; %v asks found the registry unavailable", len(committed), len(later), asks)
}

// At start relay waits for a subject no producer registered yet (/readyz says so, nothing is
// read), and refuses, naming the spec's key, a subject whose versions lack a field the spec
// needs: no topic is read that would be dead-lettered whole. relay preflight fails the same way.
// Each registry format's subject is checked so, with a schema of that format without sku.
func TestRegistryStartCheck(t *testing.T) {
	for _, c := range []struct {
		format string
		noSKU  schemaregistry.SchemaInfo
	}{
		{"avro", schemaregistry.SchemaInfo{Schema: `{"type":"record","name":"Order","fields":[
	  {"name":"order_id","type":"string"},
	  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":38,"scale":4}},
	  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}`}},
		{"protobuf", schemaregistry.SchemaInfo{SchemaType: "PROTOBUF", Schema: `syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Order { string order_id = 1; string amount = 2; google.protobuf.Timestamp ts = 3; }
`}},
		{"json_schema", schemaregistry.SchemaInfo{SchemaType: "JSON", Schema: `{"type": "object", "properties": {
	  "order_id": {"type": "string"}, "amount": {"type": ["number", "string"]}, "ts": {"type": "integer"}}}`}},
	} {
		t.Run(c.format, func(t *testing.T) { testStartCheck(t, c.format, c.noSKU) })
	}
}

// testStartCheck is TestRegistryStartCheck in registry format f, noSKU a schema of f without sku.
func testStartCheck(t *testing.T, f string, noSKU schemaregistry.SchemaInfo) {
	e := formatEnv(t, f, 1, testenv.Registry(t))
	client := newRegistry(t, e.registry).Client()
	p := e.start()
	testenv.Eventually(t, 60*time.Second, func() bool {
		p.exited(t)
		_, body := get(t, httpAddr(t, p), "/readyz")
		return strings.Contains(body, "waiting for schema_registry") && strings.Contains(body, e.topic+"-value")
	}, "/readyz saying relay waits for the topic's subject")
	if _, err := client.Register(e.topic+"-value", noSKU, false); err != nil {
		t.Fatalf("register under %s-value: %v", e.topic, err)
	}
	refusal := "input.sku_field: no version of " + e.topic + "-value has sku"
	err := p.wait(t, 60*time.Second)
	if err == nil || !strings.Contains(tail(p.Log, 5), refusal) {
		t.Fatalf("relay with a spec its subject cannot give: %v\n%s", err, tail(p.Log, 5))
	}
	stdout, stderr, code := e.cli(nil, "preflight")
	if code == 0 || !strings.Contains(stdout, "FAIL schema_registry: ") || !strings.Contains(stdout, refusal) {
		t.Fatalf("preflight with a spec its subject cannot give: exit %d\n%s%s", code, stdout, stderr)
	}
}
