// Status's lag: how far each partition's committed offset is behind its high watermark. Invariant:
// a lag is measured from the offsets the ledger says committed, and what is waiting is counted by
// reading only when at most countLimit records are, within the time given, so status stays cheap.

package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// lags pairs every partition of the configured topics with its resume offset and high watermark.
func (e *Env) lags(ctx context.Context, decided partition.Offsets) ([]PartitionLag, error) {
	c, parts, err := e.partitions(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out := []PartitionLag{}
	for _, t := range sortedTopics(parts) {
		for _, p := range parts[t] {
			lo, hi, err := c.Kafka().QueryWatermarkOffsets(t, p, timeoutMS(ctx))
			if err != nil {
				return nil, fmt.Errorf("watermarks %s/%d: %w", t, p, err)
			}
			pl := PartitionLag{Topic: t, Partition: p, HighWatermark: hi}
			if off, ok := decided.Get(t, p); ok {
				pl.Offset = &off
				if err := ledger.InRange(t, p, off, lo, hi); err != nil {
					why := err.Error()
					pl.OutOfRange = &why
				} else {
					lag := hi - off
					pl.Lag = &lag
				}
			}
			out = append(out, pl)
		}
	}
	countWaiting(c.Kafka(), out, 3*time.Second)
	return out, nil
}

// countLimit bounds the records status reads to count what is waiting behind a partition's offset.
const countLimit = 10000

// countWaiting fills in Waiting for every partition whose lag is at most countLimit, by reading
// from its offset to its high watermark within d.
func countWaiting(c *kafka.Consumer, parts []PartitionLag, d time.Duration) {
	type key struct {
		topic string
		part  int32
	}
	var tps []kafka.TopicPartition
	idx := map[key]int{}
	for i, p := range parts {
		switch {
		case p.Lag == nil || *p.Lag > countLimit:
		case *p.Lag == 0:
			parts[i].Waiting = new(int64)
		default:
			topic := p.Topic
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.Partition, Offset: kafka.Offset(*p.Offset)})
			idx[key{topic, p.Partition}] = i
		}
	}
	if len(tps) == 0 || c.Assign(tps) != nil {
		return
	}
	defer func() { _ = c.Unassign() }()
	counts := make([]int64, len(parts))
	pending := len(tps)
	for deadline := time.Now().Add(d); pending > 0 && time.Now().Before(deadline); {
		if m, ok := c.Poll(50).(*kafka.Message); ok && m.TopicPartition.Error == nil {
			if i, ok := idx[key{*m.TopicPartition.Topic, m.TopicPartition.Partition}]; ok && int64(m.TopicPartition.Offset) < parts[i].HighWatermark {
				counts[i]++
			}
		}
		pos, err := c.Position(tps)
		if err != nil {
			return
		}
		pending = 0
		for _, tp := range pos {
			i, ok := idx[key{*tp.Topic, tp.Partition}]
			if !ok {
				continue
			}
			if int64(tp.Offset) >= parts[i].HighWatermark {
				if parts[i].Waiting == nil {
					n := counts[i]
					parts[i].Waiting = &n
				}
			} else {
				pending++
			}
		}
	}
}
