// Kafka for the benchmarks: the run's topics (removed at Cleanup) and the loads and reads only a
// measurement needs, a paced producer and every record's producer timestamp.
//
// Invariant: a topic made here is deleted when the run ends, whatever step made it.

package kit

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/loadgen"
)

// CreateTopic creates a fresh topic (deleted at Cleanup) and returns its name.
func (e *Env) CreateTopic(prefix string, partitions int) (string, error) {
	name := prefix + "_" + harness.Suffix()
	if err := harness.CreateTopic(e.Brokers, name, partitions); err != nil {
		return "", err
	}
	e.OnCleanup(func() { e.DeleteTopic(name) })
	return name, nil
}

// DeleteTopic removes a topic (errors are only logged: cleanup is best effort).
func (e *Env) DeleteTopic(name string) {
	if err := harness.DeleteTopic(e.Brokers, name); err != nil {
		Logf("%v", err)
	}
}

// Produce runs `relay loadgen` to completion (its output in OutDir/logName) and returns the topic's
// end offsets and how long it took.
func (e *Env) Produce(o harness.Loadgen, logName string) (map[int32]int64, time.Duration, error) {
	return harness.Produce(e.RelayBin, e.Brokers, o, filepath.Join(e.OutDir, logName))
}

// RecordTimes reads every record of topic (read_committed, from the start up to end) and returns
// partition → offset-indexed producer timestamps, for produce-to-visible latencies.
func (e *Env) RecordTimes(topic string, end map[int32]int64) (map[int32][]time.Time, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.Brokers, "group.id": "relay-bench-times",
		"isolation.level": "read_committed", "enable.auto.commit": false, "enable.partition.eof": false,
		"fetch.queue.backoff.ms": 10})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out := map[int32][]time.Time{}
	var tps []kafka.TopicPartition
	left := 0
	for p, hi := range end {
		out[p] = make([]time.Time, hi)
		if hi > 0 {
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: 0})
			left++
		}
	}
	if err := c.Assign(tps); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for left > 0 {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("reading %s timed out", topic)
		}
		ev := c.Poll(100)
		m, ok := ev.(*kafka.Message)
		if !ok || m.TopicPartition.Error != nil {
			continue
		}
		p, off := m.TopicPartition.Partition, int64(m.TopicPartition.Offset)
		if off < end[p] {
			out[p][off] = m.Timestamp
		}
		if off+1 == end[p] {
			left--
		}
	}
	return out, nil
}

// PacedProduce writes orders from relay loadgen's generator (same records as `relay loadgen`; a
// pool of 262 144 of them, repeated) at a steady rate: every 5 ms it produces what is due, without waiting for delivery in between, so the
// load arrives smoothly. (`relay loadgen --rate` flushes after each batch and so produces in
// bursts; without transactions a flush takes up to 100 ms, which caps it near batch/0.1 s.)
func (e *Env) PacedProduce(o harness.Loadgen) (time.Duration, error) {
	// No delivery reports: each one is a Go message built and sent over a channel (about a third of
	// the producer's CPU, taken from relay on this two-core machine). The caller checks the
	// topic's end offsets instead, and idempotence keeps retries from duplicating records.
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": e.Brokers, "linger.ms": 5, "enable.idempotence": true,
		"go.delivery.reports": false})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	var failed atomic.Int64
	go func() {
		for ev := range p.Events() {
			if ke, ok := ev.(kafka.Error); ok && ke.IsFatal() {
				failed.Add(1)
			}
		}
	}()
	// The generator formats each record with fmt (several µs of CPU each): render a pool once and
	// cycle through it, so the load generator takes as little of the machine's two cores as it can.
	g := loadgen.NewGenerator(loadgen.Options{Seed: uint64(o.Seed), SKUs: o.SKUs, Windows: o.Windows})
	pool := make([][]byte, min(o.Orders, 1<<18))
	for i := range pool {
		pool[i], _ = g.Next()
	}
	topic := o.Topic
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	sent := 0
	for sent < o.Orders {
		<-tick.C
		due := min(o.Orders, int(time.Since(start).Seconds()*o.Rate)+1)
		for ; sent < due; sent++ {
			v := pool[sent%len(pool)]
			for {
				err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: v}, nil)
				if err == nil {
					break
				}
				if ke, ok := err.(kafka.Error); ok && ke.Code() == kafka.ErrQueueFull {
					time.Sleep(time.Millisecond)
					continue
				}
				return 0, err
			}
		}
	}
	if left := p.Flush(30000); left > 0 {
		return 0, fmt.Errorf("%d records not delivered", left)
	}
	if n := failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d fatal producer errors", n)
	}
	return time.Since(start), nil
}
