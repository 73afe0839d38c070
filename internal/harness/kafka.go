// Kafka: topics and their offsets, and records produced by `relay loadgen`.
//
// Invariant: each call opens its own client and closes it before returning, so nothing of a run's
// Kafka state outlives the call but the topic itself.

package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// admin runs fn with an admin client of brokers and a 30 s deadline.
func admin(brokers string, fn func(context.Context, *kafka.AdminClient) error) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers})
	if err != nil {
		return fmt.Errorf("kafka admin: %w", err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return fn(ctx, a)
}

// CreateTopic creates topic name with the given partitions.
func CreateTopic(brokers, name string, partitions int) error {
	return admin(brokers, func(ctx context.Context, a *kafka.AdminClient) error {
		res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}})
		if err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		if res[0].Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("create topic %s: %w", name, res[0].Error)
		}
		return nil
	})
}

// DeleteTopic removes a topic.
func DeleteTopic(brokers, name string) error {
	return admin(brokers, func(ctx context.Context, a *kafka.AdminClient) error {
		if _, err := a.DeleteTopics(ctx, []string{name}); err != nil {
			return fmt.Errorf("delete topic %s: %w", name, err)
		}
		return nil
	})
}

// AddPartitions grows a topic to total partitions.
func AddPartitions(brokers, topic string, total int) error {
	return admin(brokers, func(ctx context.Context, a *kafka.AdminClient) error {
		res, err := a.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: topic, IncreaseTo: total}})
		if err != nil {
			return fmt.Errorf("add partitions to %s: %w", topic, err)
		}
		if res[0].Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("add partitions to %s: %w", topic, res[0].Error)
		}
		return nil
	})
}

// EndOffsets returns partition → high watermark (the offset after the last record).
func EndOffsets(brokers, topic string) (map[int32]int64, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "relay-harness-meta",
		"isolation.level": "read_committed"})
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError {
		return nil, fmt.Errorf("end offsets of %s: %v", topic, tm.Error)
	}
	out := map[int32]int64{}
	for _, p := range tm.Partitions {
		_, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			return nil, fmt.Errorf("end offsets of %s/%d: %w", topic, p.ID, err)
		}
		out[p.ID] = hi
	}
	return out, nil
}

// Total sums offsets over partitions.
func Total(offs map[int32]int64) int64 {
	var n int64
	for _, o := range offs {
		n += o
	}
	return n
}

// Loadgen are the flags of `relay loadgen` for a non-transactional load.
type Loadgen struct {
	Topic         string
	Orders        int
	Rate          float64 // 0: as fast as possible
	SKUs, Windows int
	Seed          int
	Batch         int // 0: 10 000
	// Format and Registry: a registry format's records (--format, --schema-registry); "": JSON.
	Format, Registry string
}

// Args renders the command line against brokers (for a report too, with brokers elided).
func (o Loadgen) Args(brokers string) []string {
	batch := o.Batch
	if batch == 0 {
		batch = 10000
	}
	args := []string{"loadgen", "--brokers", brokers, "--topic", o.Topic, "--orders", strconv.Itoa(o.Orders), "--transactional-id", "",
		"--batch", strconv.Itoa(batch), "--skus", strconv.Itoa(o.SKUs), "--windows", strconv.Itoa(o.Windows),
		"--seed", strconv.Itoa(o.Seed)}
	if o.Rate > 0 {
		args = append(args, "--rate", strconv.FormatFloat(o.Rate, 'f', 0, 64))
	}
	if o.Format != "" {
		args = append(args, "--format", o.Format, "--schema-registry", o.Registry)
	}
	return args
}

// Produce runs `bin loadgen` to completion, its output in logPath, and returns the topic's end
// offsets and how long loadgen took.
func Produce(bin, brokers string, o Loadgen, logPath string) (map[int32]int64, time.Duration, error) {
	start := time.Now()
	out, err := exec.Command(bin, o.Args(brokers)...).CombinedOutput()
	_ = os.WriteFile(logPath, out, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("loadgen: %w: %s", err, out)
	}
	took := time.Since(start)
	end, err := EndOffsets(brokers, o.Topic)
	return end, took, err
}
