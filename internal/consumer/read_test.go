package consumer

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// Every record of two topics arrives once, in offset order per partition, with its topic, value
// and timestamp, through batches whose buffer is smaller than some records (held back, then read
// into a grown buffer) and larger than most; empty values stay empty. The position follows.
func TestReadDeliversEveryRecordOnce(t *testing.T) {
	brokers := testenv.Brokers(t)
	ctx := testenv.Context(t, 2*time.Minute)
	topics := []string{testenv.Topic(t, 2), testenv.Topic(t, 2)}
	type sent struct {
		value []byte
		ts    time.Time
	}
	want := map[string]map[int32][]sent{}
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 1), 2))
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	const perPartition = 300
	for _, topic := range topics {
		want[topic] = map[int32][]sent{}
		produceAll(t, brokers, topic, 2, perPartition, func(part int32, i int) ([]byte, time.Time) {
			v := make([]byte, rng.IntN(3000))
			if i%50 == 7 {
				v = nil
			}
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			ts := base.Add(time.Duration(i) * time.Millisecond)
			want[topic][part] = append(want[topic][part], sent{v, ts})
			return v, ts
		})
	}

	c, err := New(Options{Brokers: brokers, Topics: topics, GroupID: "g-" + topics[0], StartOffset: "earliest"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Assign(ctx, partition.Offsets{}); err != nil {
		t.Fatal(err)
	}
	b := NewBatch(64, 2048)
	next := map[string]map[int32]int64{topics[0]: {}, topics[1]: {}}
	total, grown := 0, false
	for deadline := time.Now().Add(time.Minute); total < 4*perPartition && time.Now().Before(deadline); {
		if err := c.Read(100*time.Millisecond, b); err != nil {
			t.Fatal(err)
		}
		grown = grown || len(b.buf) > 2048
		for _, r := range b.Records {
			w, ok := want[r.Topic]
			if !ok {
				t.Fatalf("record of topic %q", r.Topic)
			}
			if r.Offset != next[r.Topic][r.Partition] {
				t.Fatalf("%s/%d: offset %d, want %d", r.Topic, r.Partition, r.Offset, next[r.Topic][r.Partition])
			}
			s := w[r.Partition][r.Offset]
			if !bytes.Equal(r.Value, s.value) || len(r.Value) != len(s.value) {
				t.Fatalf("%s/%d@%d: %d bytes, not the %d produced", r.Topic, r.Partition, r.Offset, len(r.Value), len(s.value))
			}
			if !r.Timestamp.Equal(s.ts) {
				t.Fatalf("%s/%d@%d: timestamp %s, want %s", r.Topic, r.Partition, r.Offset, r.Timestamp, s.ts)
			}
			next[r.Topic][r.Partition]++
			total++
		}
	}
	if total != 4*perPartition {
		t.Fatalf("read %d records, want %d", total, 4*perPartition)
	}
	if !grown {
		t.Fatal("no record was larger than the batch buffer: the held-back path was not exercised")
	}
	for _, topic := range topics {
		for part := int32(0); part < 2; part++ {
			if pos, ok := c.Position(topic, part); !ok || pos != perPartition {
				t.Errorf("%s/%d: position %d (%v), want %d", topic, part, pos, ok, perPartition)
			}
		}
	}
	// Nothing more: a timeout is an empty batch.
	if err := c.Read(200*time.Millisecond, b); err != nil || len(b.Records) != 0 {
		t.Fatalf("read past the end: %d records, %v", len(b.Records), err)
	}
}

// A resume offset past the end of a partition is librdkafka's auto-offset-reset error (relay sets
// auto.offset.reset=error): Read returns it as permanent, never silently resetting.
func TestReadOffsetOutOfRangeIsPermanent(t *testing.T) {
	brokers := testenv.Brokers(t)
	ctx := testenv.Context(t, time.Minute)
	topic := testenv.Topic(t, 1)
	c, err := New(Options{Brokers: brokers, Topics: []string{topic}, GroupID: "g-" + topic}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	from := partition.Offsets{}
	from.Set(topic, 0, 1000)
	if _, err := c.Assign(ctx, from); err != nil {
		t.Fatal(err)
	}
	b := NewBatch(16, 1024)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		err := c.Read(100*time.Millisecond, b)
		if err == nil {
			continue
		}
		var ke kafka.Error
		if !fault.IsPermanent(err) || !errors.As(err, &ke) || ke.Code() != kafka.ErrAutoOffsetReset {
			t.Fatalf("error %v (permanent %v), want a permanent auto-offset-reset error", err, fault.IsPermanent(err))
		}
		return
	}
	t.Fatal("no error for an offset past the end of the partition")
}

// rdkafka_min.h declares part of rdkafka.h by hand: the message layout and the constants must be
// the real header's, and the prototypes must compile against the real ones.
func TestRdkafkaDeclarations(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/confluentinc/confluent-kafka-go/v2").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	real := filepath.Join(strings.TrimSpace(string(out)), "kafka", "librdkafka_vendor", "rdkafka.h")
	if _, err := os.Stat(real); err != nil {
		t.Fatal(err)
	}
	ours, err := filepath.Abs("rdkafka_min.h")
	if err != nil {
		t.Fatal(err)
	}
	const layout = `
#include <stdio.h>
#include <stddef.h>
int main(void) {
	printf("message %zu: err %zu/%zu rkt %zu partition %zu payload %zu len %zu key %zu key_len %zu offset %zu/%zu _private %zu\n",
		sizeof(rd_kafka_message_t), offsetof(rd_kafka_message_t, err), sizeof(rd_kafka_resp_err_t),
		offsetof(rd_kafka_message_t, rkt), offsetof(rd_kafka_message_t, partition), offsetof(rd_kafka_message_t, payload),
		offsetof(rd_kafka_message_t, len), offsetof(rd_kafka_message_t, key), offsetof(rd_kafka_message_t, key_len),
		offsetof(rd_kafka_message_t, offset), sizeof(((rd_kafka_message_t *)0)->offset), offsetof(rd_kafka_message_t, _private));
	printf("timestamp type %zu, errors %d %d\n", sizeof(rd_kafka_timestamp_type_t), (int)RD_KAFKA_RESP_ERR__PARTITION_EOF, (int)RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC);
	return 0;
}
`
	dir := t.TempDir()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	run := func(name, src string) string {
		t.Helper()
		c := filepath.Join(dir, name+".c")
		if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, name)
		if out, err := exec.Command(cc, "-Wall", "-Werror", "-o", bin, c).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return string(out)
	}
	want := run("real", fmt.Sprintf("#include %q\n%s", real, layout))
	got := run("ours", fmt.Sprintf("#include %q\n%s", ours, layout))
	if got != want {
		t.Fatalf("rdkafka_min.h:\n%s\nrdkafka.h:\n%s", got, want)
	}
	run("prototypes", fmt.Sprintf("#include %q\n#define RELAY_RDKAFKA_PROTOTYPES_ONLY\n#include %q\nint main(void) { return 0; }\n", real, ours))
	t.Logf("%s", want)
}

// Remove drops every record of the removed partitions not yet returned: librdkafka's queued ones
// and the one the reader held back for the next Read (it did not fit the last batch), which had
// left librdkafka's queue already. A group member releases partitions so (pipeline, group.go);
// a record of them read after would end its session.
func TestRemoveDropsHeldRecord(t *testing.T) {
	brokers := testenv.Brokers(t)
	ctx := testenv.Context(t, 2*time.Minute)
	topic := testenv.Topic(t, 2)
	const perPartition = 200
	produceAll(t, brokers, topic, 2, perPartition, func(int32, int) ([]byte, time.Time) { return make([]byte, 1000), time.Time{} })
	c, err := New(Options{Brokers: brokers, Topics: []string{topic}, GroupID: "g-" + topic, StartOffset: "earliest"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start, err := c.Assign(ctx, partition.Offsets{})
	if err != nil {
		t.Fatal(err)
	}
	// Four 1000-byte records fill the 4096-byte buffer; a fifth queued behind them is held back.
	b := NewBatch(64, 4096)
	read := 0
	for deadline := time.Now().Add(time.Minute); ; {
		if err := c.Read(100*time.Millisecond, b); err != nil {
			t.Fatal(err)
		}
		read += len(b.Records)
		if len(b.Records) == 4 && read >= 20 {
			break
		}
		if time.Now().After(deadline) || read >= 2*perPartition-10 {
			t.Fatalf("no full batch with records queued behind it (%d records read)", read)
		}
	}
	parts := partition.Claims{}
	for t, ps := range start {
		for p := range ps {
			parts.Set(t, p, 1)
		}
	}
	if err := c.Remove(parts); err != nil {
		t.Fatal(err)
	}
	if err := c.Read(300*time.Millisecond, b); err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Records {
		t.Errorf("record %s/%d@%d read after its partition was removed", r.Topic, r.Partition, r.Offset)
	}
}

// produceAll writes n records to each of the topic's partitions 0..parts-1, in order (idempotent:
// the i-th record of a partition is at offset i), each value and timestamp from rec (a zero time:
// the producer's), and waits until every one is acknowledged.
func produceAll(t *testing.T, brokers, topic string, parts int32, n int, rec func(part int32, i int) ([]byte, time.Time)) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "linger.ms": 5, "enable.idempotence": true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, int(parts)*n)
	for part := range parts {
		for i := range n {
			v, ts := rec(part, i)
			if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part}, Value: v, Timestamp: ts}, done); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range int(parts) * n {
		if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	}
}

// A read returns as soon as a record is there: the timeout bounds the wait for the first record,
// not for a fuller batch (librdkafka's batch call alone would wait for max records or the timeout,
// holding a slow topic's records back).
func TestReadReturnsFirstRecordWithoutWaitingForBatch(t *testing.T) {
	brokers := testenv.Brokers(t)
	ctx := testenv.Context(t, time.Minute)
	topic := testenv.Topic(t, 1)
	c, err := New(Options{Brokers: brokers, Topics: []string{topic}, GroupID: "g-" + topic, StartOffset: "earliest"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Assign(ctx, partition.Offsets{}); err != nil {
		t.Fatal(err)
	}
	produceAll(t, brokers, topic, 1, 3, func(int32, int) ([]byte, time.Time) { return []byte("v"), time.Time{} })
	b := NewBatch(512, 1<<16)
	read := 0
	for deadline := time.Now().Add(30 * time.Second); read < 3 && time.Now().Before(deadline); {
		start := time.Now()
		if err := c.Read(10*time.Second, b); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); len(b.Records) > 0 && took > 5*time.Second {
			t.Fatalf("a read of %d records took %s: it waited for a fuller batch, not for the first record", len(b.Records), took)
		}
		read += len(b.Records)
	}
	if read != 3 {
		t.Fatalf("read %d records, want 3", read)
	}
}
