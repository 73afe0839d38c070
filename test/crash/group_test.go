package crash

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// With kafka.commit_group_offsets (the default) the consumer group follows the ledger: published
// off the commit path while relay runs, and exactly the last checkpoint's offsets once it stopped,
// so lag tools that read the group see where the job stands.
func TestGroupOffsetsFollowTheLedger(t *testing.T) {
	e := newEnv(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 6000, Batch: 200, SKUs: 30, Windows: 3, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	led := ledger.New(e.db, e.job)
	same := func() (bool, string) {
		want, _, err := led.PartitionOffsets(ctx)
		if err != nil {
			return false, err.Error()
		}
		got, err := groupOffsets(e.brokers, "relay-"+e.job, e.topic, 3)
		if err != nil {
			return false, err.Error()
		}
		for part := int32(0); part < 3; part++ {
			w, _ := want.Get(e.topic, part)
			if got[part] != w {
				return false, fmt.Sprintf("partition %d: group %d, ledger %d", part, got[part], w)
			}
		}
		return true, ""
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		offs, _, _ := led.PartitionOffsets(ctx)
		n := int64(0)
		for part := int32(0); part < 3; part++ {
			o, _ := offs.Get(e.topic, part)
			n += o
		}
		ok, _ := same()
		return n > 0 && ok
	}, "the group's offsets to equal the ledger's while relay runs")
	// More orders, then a clean stop: the drain's final checkpoint reaches the group too.
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 3000, Batch: 200, SKUs: 30, Windows: 3, Seed: 8, TxnID: "lg2-" + e.topic}); err != nil {
		t.Fatal(err)
	}
	_ = p.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, tail(p.Log, 20))
	}
	if ok, why := same(); !ok {
		t.Fatalf("after the stop the group lags the ledger: %s", why)
	}
	e.finish(totals)
}

// groupOffsets reads the committed offsets of group for partitions 0..n-1 of topic.
func groupOffsets(brokers, group, topic string, n int) (map[int32]int64, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": group})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for part := int32(0); part < int32(n); part++ {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: part})
	}
	got, err := c.Committed(tps, 10000)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, tp := range got {
		out[tp.Partition] = int64(tp.Offset)
	}
	return out, nil
}
