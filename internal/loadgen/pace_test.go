package loadgen

import (
	"sort"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/testenv"
)

// Without transactions a rate spreads over each batch: the producer timestamps of one batch of
// 100 records at 400/s span about 250 ms, where pacing only between batches sent them within a
// few milliseconds and then slept (proposal 4 of docs/BENCHMARKS.md).
func TestRateSpreadsABatch(t *testing.T) {
	brokers := testenv.Brokers(t)
	topic := testenv.Topic(t, 1)
	ctx := testenv.Context(t, time.Minute)
	totals := NewTotals()
	o := Options{Brokers: brokers, Topic: topic, Orders: 100, Batch: 100, Rate: 400, SKUs: 5, Windows: 1, Seed: 7}
	if err := Run(ctx, o, totals); err != nil {
		t.Fatal(err)
	}
	if _, _, good := totals.Snapshot(); good != 100 {
		t.Fatalf("totals count %d good orders, want 100", good)
	}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "pace-" + topic, "enable.auto.commit": false})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		t.Fatal(err)
	}
	var ts []time.Time
	for len(ts) < 100 && ctx.Err() == nil {
		if m, err := c.ReadMessage(time.Second); err == nil {
			ts = append(ts, m.Timestamp)
		}
	}
	if len(ts) != 100 {
		t.Fatalf("read %d records back, want 100", len(ts))
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	// 99 gaps of 2.5 ms: 247.5 ms if paced exactly; a burst spans a few ms. Pacing counts from
	// the run's start, so a stall before the first record shortens the span: the bound allows 97 ms.
	if span := ts[99].Sub(ts[0]); span < 150*time.Millisecond {
		t.Fatalf("one batch at 400/s spans %s of producer time, want about 250ms (records paced one by one)", span)
	}
}
