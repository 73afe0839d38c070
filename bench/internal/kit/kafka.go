package kit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/loadgen"
)

// CreateTopic creates a fresh topic (deleted at Cleanup) and returns its name.
func (e *Env) CreateTopic(prefix string, partitions int) (string, error) {
	name := prefix + "_" + Suffix()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.Brokers})
	if err != nil {
		return "", err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}})
	if err != nil {
		return "", err
	}
	if res[0].Error.Code() != kafka.ErrNoError {
		return "", res[0].Error
	}
	e.OnCleanup(func() { e.DeleteTopic(name) })
	return name, nil
}

// DeleteTopic removes a topic (errors are only logged: cleanup is best effort).
func (e *Env) DeleteTopic(name string) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.Brokers})
	if err != nil {
		Logf("delete topic %s: %v", name, err)
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.DeleteTopics(ctx, []string{name}); err != nil {
		Logf("delete topic %s: %v", name, err)
	}
}

// EndOffsets returns partition → high watermark (the offset after the last record).
func (e *Env) EndOffsets(topic string) (map[int32]int64, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.Brokers, "group.id": "relay-bench-meta",
		"isolation.level": "read_committed"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, err
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError {
		return nil, fmt.Errorf("topic %s: %v", topic, tm.Error)
	}
	out := map[int32]int64{}
	for _, p := range tm.Partitions {
		_, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			return nil, err
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

// LoadgenOpts are the flags of `relay loadgen` the benchmarks use.
type LoadgenOpts struct {
	Topic         string
	Orders        int
	Rate          float64 // 0: as fast as possible
	SKUs, Windows int
	Seed          int
	Batch         int
}

// Args renders the command line against brokers (for the report too, with brokers elided).
func (o LoadgenOpts) Args(brokers string) []string {
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
	return args
}

// Loadgen starts `relay loadgen` (non-transactional producer); done delivers its exit.
func (e *Env) Loadgen(o LoadgenOpts, logName string) (cmd *exec.Cmd, done <-chan error, err error) {
	cmd = exec.Command(e.RelayBin, o.Args(e.Brokers)...)
	f, err := os.Create(filepath.Join(e.OutDir, logName))
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, nil, err
	}
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait(); f.Close() }()
	return cmd, ch, nil
}

// Produce runs loadgen to completion and returns the topic's end offsets.
func (e *Env) Produce(o LoadgenOpts, logName string) (map[int32]int64, time.Duration, error) {
	start := time.Now()
	out, err := exec.Command(e.RelayBin, o.Args(e.Brokers)...).CombinedOutput()
	_ = os.WriteFile(filepath.Join(e.OutDir, logName), out, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("loadgen: %w: %s", err, out)
	}
	took := time.Since(start)
	end, err := e.EndOffsets(o.Topic)
	return end, took, err
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
func (e *Env) PacedProduce(o LoadgenOpts) (time.Duration, error) {
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
