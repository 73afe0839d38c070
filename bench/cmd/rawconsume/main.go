// Command rawconsume is the baseline of relay's throughput benchmark: a bare consumer with relay's
// own librdkafka settings (read_committed, manual assignment, no commits), reading every partition
// of a topic from offset 0 to its end offset and doing nothing but count. --reader poll (the
// default) is confluent-kafka-go's Poll, a *kafka.Message per record; --reader batch is relay's
// own read path (internal/consumer: one cgo call per batch), with nothing of relay after it;
// --reader franz is franz-go, a Kafka client in Go without librdkafka (its own defaults,
// read_committed; -X does not apply).
//
// It prints one JSON object: records read and the time from the first record to the last.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/partition"
)

type result struct {
	Records      int64   `json:"records"`
	Seconds      float64 `json:"seconds"`       // first record to last record
	Rate         float64 `json:"rate"`          // records per second over Seconds
	StartupSecs  float64 `json:"startup_secs"`  // process start to first record
	ProcessSecs  float64 `json:"process_secs"`  // process start to last record
	CPUSecs      float64 `json:"cpu_secs"`      // user+system CPU of this process
	PayloadBytes int64   `json:"payload_bytes"` // sum of record values
}

func main() {
	start := time.Now()
	brokers := flag.String("brokers", "127.0.0.1:19092", "Kafka bootstrap servers")
	topic := flag.String("topic", "", "topic to read")
	limit := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	reader := flag.String("reader", "poll", "poll: confluent-kafka-go's Poll; batch: relay's consumer.Read; franz: franz-go's PollFetches")
	props := map[string]string{}
	flag.Func("X", "extra librdkafka property key=value (repeatable; for experiments, not used by make bench)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("want key=value, got %q", s)
		}
		props[k] = v
		return nil
	})
	flag.Parse()
	if *topic == "" {
		fmt.Fprintln(os.Stderr, "rawconsume: --topic is required")
		os.Exit(2)
	}
	read := run
	if *reader == "batch" {
		read = runBatch
	} else if *reader == "franz" {
		read = runFranz
	} else if *reader != "poll" {
		fmt.Fprintln(os.Stderr, "rawconsume: --reader is poll, batch or franz")
		os.Exit(2)
	}
	r, err := read(*brokers, *topic, props, start, *limit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rawconsume:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func run(brokers, topic string, props map[string]string, start time.Time, limit time.Duration) (result, error) {
	var r result
	// The very settings relay's consumer runs with (internal/consumer.ConfigMap).
	cm := consumer.ConfigMap(consumer.Options{Brokers: brokers, GroupID: "relay-bench-raw", Properties: props})
	c, err := kafka.NewConsumer(cm)
	if err != nil {
		return r, err
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return r, err
	}
	end := map[int32]int64{}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		_, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			return r, err
		}
		if hi > 0 {
			end[p.ID] = hi
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: 0})
		}
	}
	if len(tps) == 0 {
		return r, fmt.Errorf("topic %s is empty or missing", topic)
	}
	if err := c.Assign(tps); err != nil {
		return r, err
	}
	pr := newProgress(end)
	deadline := time.Now().Add(limit)
	for pr.left > 0 {
		ev := c.Poll(20)
		switch e := ev.(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				return r, e.TopicPartition.Error
			}
			pr.saw(&r, e.TopicPartition.Partition, int64(e.TopicPartition.Offset), len(e.Value))
		case kafka.Error:
			if e.IsFatal() {
				return r, e
			}
		case nil:
			if time.Now().After(deadline) {
				return r, fmt.Errorf("timed out after %d records", r.Records)
			}
		}
	}
	return r.finish(start, pr.first, pr.last), nil
}

// progress counts records until each partition's end offset was read.
type progress struct {
	end         map[int32]int64
	left        int // partitions not read to their end
	first, last time.Time
}

func newProgress(end map[int32]int64) *progress { return &progress{end: end, left: len(end)} }

// saw counts one record. The clock is read only when needed (a read per record would be a few
// percent of a consumer that does nothing else): the end is the record that finishes the last
// partition.
func (p *progress) saw(r *result, part int32, offset int64, size int) {
	if r.Records == 0 {
		p.first = time.Now()
	}
	r.Records++
	r.PayloadBytes += int64(size)
	if offset+1 == p.end[part] {
		p.left--
		p.last = time.Now()
	}
}

// runBatch is run through relay's consumer: its Assign (from the start) and its batch Read.
func runBatch(brokers, topic string, props map[string]string, start time.Time, limit time.Duration) (result, error) {
	var r result
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c, err := consumer.New(consumer.Options{Brokers: brokers, Topics: []string{topic}, GroupID: "relay-bench-raw",
		StartOffset: "earliest", Properties: props}, zap.NewNop())
	if err != nil {
		return r, err
	}
	defer c.Close()
	from, err := c.Assign(ctx, partition.Offsets{})
	if err != nil {
		return r, err
	}
	end := map[int32]int64{}
	for p := range from[topic] {
		if _, hi, err := c.AssignedWatermarks(topic, p, 0); err != nil {
			return r, err
		} else if hi > 0 {
			end[p] = hi
		}
	}
	if len(end) == 0 {
		return r, fmt.Errorf("topic %s is empty or missing", topic)
	}
	pr := newProgress(end)
	b := consumer.DefaultBatch()
	for pr.left > 0 {
		if err := c.Read(20*time.Millisecond, b); err != nil {
			return r, err
		}
		if len(b.Records) == 0 && ctx.Err() != nil {
			return r, fmt.Errorf("timed out after %d records", r.Records)
		}
		for i := range b.Records {
			rec := &b.Records[i]
			pr.saw(&r, rec.Partition, rec.Offset, len(rec.Value))
		}
	}
	return r.finish(start, pr.first, pr.last), nil
}

// runFranz reads with franz-go: every partition from its start, read_committed, franz-go's own
// fetch settings. The end offsets are asked of the brokers through franz-go's admin client first.
func runFranz(brokers, topic string, _ map[string]string, start time.Time, limit time.Duration) (result, error) {
	var r result
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	seeds := strings.Split(brokers, ",")
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return r, err
	}
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
	admin.Close()
	if err != nil {
		return r, err
	}
	end := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			end[o.Partition] = o.Offset
			from[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(end) == 0 {
		return r, fmt.Errorf("topic %s is empty or missing", topic)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		return r, err
	}
	defer cl.Close()
	pr := newProgress(end)
	for pr.left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return r, fmt.Errorf("timed out after %d records", r.Records)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return r, errs[0].Err
		}
		fs.EachRecord(func(rec *kgo.Record) { pr.saw(&r, rec.Partition, rec.Offset, len(rec.Value)) })
	}
	return r.finish(start, pr.first, pr.last), nil
}

// finish sets the times and rates of a run that read its first record at first and its last at last.
func (r result) finish(start, first, last time.Time) result {
	r.Seconds = last.Sub(first).Seconds()
	r.Rate = float64(r.Records) / r.Seconds
	r.StartupSecs = first.Sub(start).Seconds()
	r.ProcessSecs = last.Sub(start).Seconds()
	r.CPUSecs = cpuSeconds()
	return r
}
