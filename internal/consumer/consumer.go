// Package consumer reads the source topics with read_committed and explicit, manual offsets.
//
// Invariants: offsets come only from the ledger (or, for a partition it has never seen, from the
// configured start position resolved to a concrete number); nothing is auto-committed or
// auto-stored, and an out-of-range offset is an error, never a silent reset. Positions are tracked
// from delivered records only: librdkafka's Position() can run ahead of what was delivered on
// transactional topics.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/partition"
)

// Options configure a consumer.
type Options struct {
	Brokers     string
	Topics      []string
	GroupID     string
	StartOffset string // earliest | latest
	Properties  map[string]string
	// Instance of Instances (docs/PROTOCOL.md, "Several instances"): this process reads the partitions p with p mod Instances ==
	// Instance. Zero Instances means 1.
	Instance, Instances int
}

// Consumer is one librdkafka consumer with a manual assignment of every partition of its topics.
type Consumer struct {
	c        *kafka.Consumer
	opts     Options
	r        *reader
	assigned map[string]map[int32]bool
	marks    partition.Marks // low, high watermark per partition, read by Assign
	log      *zap.Logger
	// record, when set, records where partitions without an offset start before they are read
	// (RecordStarts).
	record Recorder
	// only, when set (a member of a consumer group), is the set of partitions this session reads,
	// in place of the instance's share; discovery then adds none (the group assigns new ones).
	only map[string]map[int32]bool
	// total is how many partitions the topics had at the last metadata read.
	total int
}

// Recorder records, before any of them is read, where the partitions of marks that have no offset
// in the ledger start, and returns the ledger's offset of every partition of marks (ledger.RecordStarts
// under the session's fence); latest says where a topic whose starts were never recorded begins.
type Recorder func(ctx context.Context, marks partition.Marks, latest bool) (partition.Offsets, error)

// RecordStarts makes every start position this consumer resolves go through r first: a partition
// without an offset is then read from the position the ledger holds for it, the same in every
// session, process and member, and never resolved again. Call it before Assign.
func (c *Consumer) RecordStarts(r Recorder) { c.record = r }

// TopicPartitions is how many partitions the topics had at the last metadata read.
func (c *Consumer) TopicPartitions() int { return c.total }

// Only restricts the partitions Assign reads to parts (a group member's assignment, as taken in
// the ledger). Call it before Assign.
func (c *Consumer) Only(parts partition.Claims) {
	c.only = map[string]map[int32]bool{}
	for t, ps := range parts {
		c.only[t] = map[int32]bool{}
		for p := range ps {
			c.only[t][p] = true
		}
	}
}

// ConfigMap is the librdkafka configuration relay runs with; user properties cannot override the
// keys exactly-once depends on (config.Validate refuses them).
func ConfigMap(o Options) *kafka.ConfigMap {
	// librdkafka waits fetch.queue.backoff.ms (1 s by default) before fetching again once its local
	// queue passed a threshold; a consumer that drains the queue as fast as relay does spends most
	// of that second idle (bench: the bare consumer went from 134 k to 638 k records/s with 10 ms).
	// Smaller fetches (256 KiB a partition, refilled after 1 ms, a fetch waiting at most 100 ms on
	// the broker) and a shorter local queue were the fastest of the bench's sweep on the 4-partition
	// topic: the bare consumer 664-676 k vs 496-520 k records/s, relay XA 420-441 k vs 384-409 k
	// (docs/BENCHMARKS.md, 2 Dec). The user's kafka.properties override each of them.
	cm := kafka.ConfigMap{"fetch.queue.backoff.ms": 1, "max.partition.fetch.bytes": 262144, "fetch.wait.max.ms": 100,
		"queued.min.messages": 10000, "queued.max.messages.kbytes": 65536}
	for k, v := range o.Properties {
		cm[k] = v
	}
	cm["bootstrap.servers"] = o.Brokers
	cm["group.id"] = o.GroupID
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["isolation.level"] = "read_committed"
	cm["auto.offset.reset"] = "error"
	cm["enable.partition.eof"] = false
	return &cm
}

// New connects a consumer; nothing is assigned yet. librdkafka's own log lines go to log's
// "librdkafka" child instead of stderr, where their "%3|..." format broke the JSON log stream.
func New(o Options, log *zap.Logger) (*Consumer, error) {
	cm := ConfigMap(o)
	// log.queue (set by the Go client with this key) holds even the lines of rd_kafka_new until
	// the channel is attached, so none reaches stderr.
	cm.SetKey("go.logs.channel.enable", true)
	c, err := kafka.NewConsumer(cm)
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	if o.Instances < 1 {
		o.Instances = 1
	}
	go ForwardLogs(c.Logs(), log.Named("librdkafka"))
	r, err := newReader(c, o.Topics)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &Consumer{c: c, opts: o, r: r, assigned: map[string]map[int32]bool{}, log: log}, nil
}

// ForwardLogs writes librdkafka's log events to log until Close closes the channel.
func ForwardLogs(events <-chan kafka.LogEvent, log *zap.Logger) {
	for ev := range events {
		if ce := log.Check(logLevel(ev.Level), ev.Message); ce != nil {
			ce.Write(zap.String("facility", ev.Tag), zap.String("client", ev.Name), zap.Int("syslog_level", ev.Level))
		}
	}
}

// logLevel maps a syslog level (librdkafka's: 0 emergency .. 7 debug) to zap's.
func logLevel(syslog int) zapcore.Level {
	switch {
	case syslog <= 3:
		return zapcore.ErrorLevel
	case syslog == 4:
		return zapcore.WarnLevel
	case syslog <= 6:
		return zapcore.InfoLevel
	}
	return zapcore.DebugLevel
}

// Close leaves the brokers. No Read may be running or follow.
func (c *Consumer) Close() {
	c.r.close()
	_ = c.c.Close()
}

// Kafka exposes the underlying consumer (watermarks for lag, tests).
func (c *Consumer) Kafka() *kafka.Consumer { return c.c }

// Partitions lists the partitions of the topics that this process reads: its share of an instance
// layout, or the set Only gave.
func (c *Consumer) Partitions(ctx context.Context) (map[string][]int32, error) {
	out := map[string][]int32{}
	total := 0
	for _, t := range c.opts.Topics {
		tm, err := topicMetadata(ctx, c.c, t)
		if errors.Is(err, errNoTopic) {
			return nil, fault.Permanent(err)
		}
		if err != nil {
			return nil, err
		}
		total += len(tm.Partitions)
		for _, p := range tm.Partitions {
			if c.only != nil && c.only[t][p.ID] || c.only == nil && int(p.ID)%c.opts.Instances == c.opts.Instance {
				out[t] = append(out[t], p.ID)
			}
		}
		sort.Slice(out[t], func(i, j int) bool { return out[t][i] < out[t][j] })
	}
	c.total = total
	return out, nil
}

// errNoTopic is the broker's answer for a topic it does not know (relay never creates one).
var errNoTopic = errors.New("does not exist")

// topicMetadata asks the brokers about topic t (within ctx, at most 10 s).
func topicMetadata(ctx context.Context, kc *kafka.Consumer, t string) (kafka.TopicMetadata, error) {
	md, err := kc.GetMetadata(&t, false, timeoutMS(ctx, 10*time.Second))
	if err != nil {
		return kafka.TopicMetadata{}, fmt.Errorf("metadata %s: %w", t, err)
	}
	tm, ok := md.Topics[t]
	if !ok || tm.Error.Code() == kafka.ErrUnknownTopicOrPart || tm.Error.Code() == kafka.ErrUnknownTopic {
		return tm, fmt.Errorf("topic %s %w", t, errNoTopic)
	}
	if tm.Error.Code() != kafka.ErrNoError {
		return tm, fmt.Errorf("metadata %s: %w", t, tm.Error)
	}
	return tm, nil
}

// CheckTopics asks the brokers, with a client of its own configured like a session's consumer
// (o's properties: TLS, SASL), whether every topic of o exists, and closes the client. Start-up
// calls it until it succeeds: an error that says Kafka does not answer is fault.Unavailable, and so
// is a topic that does not exist yet (marked Transient: at start another job may not have created
// it yet), unlike in a session, where a topic missing is Permanent.
func CheckTopics(ctx context.Context, o Options, log *zap.Logger) error {
	cm := ConfigMap(o)
	cm.SetKey("go.logs.channel.enable", true)
	kc, err := kafka.NewConsumer(cm)
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	go ForwardLogs(kc.Logs(), log.Named("librdkafka"))
	defer func() { _ = kc.Close() }()
	for _, t := range o.Topics {
		if _, err := topicMetadata(ctx, kc, t); errors.Is(err, errNoTopic) {
			return fault.Transient(fmt.Errorf("%w (relay never creates topics)", err))
		} else if err != nil {
			return err
		}
	}
	return nil
}

// Assign starts reading every owned partition: from its offset in from, else from the start
// position (resolved to a concrete offset so the ledger never stores a logical one). It returns the
// complete set of starting positions.
//
// Every partition's watermarks are read first, while no fetch is in flight, and kept for
// AssignedWatermarks: once partitions are assigned, a watermark query waits on the broker
// connection behind the fetch long poll (fetch.wait.max.ms, 500 ms by default), one partition
// after another (four partitions added 2 s to every start).
func (c *Consumer) Assign(ctx context.Context, from partition.Offsets) (partition.Offsets, error) {
	parts, err := c.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	c.marks = partition.Marks{}
	c.assigned = map[string]map[int32]bool{}
	start, tps, err := c.positions(ctx, parts, from, c.opts.StartOffset)
	if err != nil {
		return nil, err
	}
	if err := c.c.Assign(tps); err != nil {
		return nil, fmt.Errorf("assign: %w", err)
	}
	c.markAll(tps)
	return start, nil
}

// Add starts reading parts as well (a group member took them during its session), each from its
// offset in from, else from the start position, like Assign. It returns their starting positions;
// their watermarks join AssignedWatermarks.
func (c *Consumer) Add(ctx context.Context, parts partition.Claims, from partition.Offsets) (partition.Offsets, error) {
	list := map[string][]int32{}
	if c.only == nil {
		c.only = map[string]map[int32]bool{}
	}
	for t, ps := range parts {
		for p := range ps {
			list[t] = append(list[t], p)
			if c.only[t] == nil {
				c.only[t] = map[int32]bool{}
			}
			c.only[t][p] = true
		}
	}
	start, tps, err := c.positions(ctx, list, from, c.opts.StartOffset)
	if err != nil {
		return nil, err
	}
	if err := c.c.IncrementalAssign(tps); err != nil {
		return nil, fmt.Errorf("assign: %w", err)
	}
	c.markAll(tps)
	return start, nil
}

// Remove stops reading parts. librdkafka drops what it fetched of them and had not delivered (its
// queued fetches carry the assignment's version), and so does the reader with a record it held
// back for the next Read; what was delivered is the caller's to drop. No Read may be running.
func (c *Consumer) Remove(parts partition.Claims) error {
	var tps []kafka.TopicPartition
	for t, ps := range parts {
		for p := range ps {
			c.r.forget(t, p)
			topic := t
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
			delete(c.only[t], p)
			delete(c.assigned[t], p)
			delete(c.marks[t], p)
		}
	}
	if len(tps) == 0 {
		return nil
	}
	if err := c.c.IncrementalUnassign(tps); err != nil {
		return fmt.Errorf("unassign: %w", err)
	}
	return nil
}

// positions reads the watermarks of parts (kept for AssignedWatermarks) and resolves where each
// starts: its offset in from, else the position the recorder holds for it, else (no recorder:
// tools and tests) where resolved against its watermarks.
func (c *Consumer) positions(ctx context.Context, parts map[string][]int32, from partition.Offsets, where string) (partition.Offsets, []kafka.TopicPartition, error) {
	marks, err := c.watermarks(ctx, parts)
	if err != nil {
		return nil, nil, err
	}
	recorded, err := c.recordStarts(ctx, parts, from, marks, where == "latest")
	if err != nil {
		return nil, nil, err
	}
	start := partition.Offsets{}
	var tps []kafka.TopicPartition
	for t, ps := range parts {
		for _, p := range ps {
			lo, hi := marks[t][p][0], marks[t][p][1]
			c.marks.Set(t, p, lo, hi)
			off, ok := from.Get(t, p)
			if !ok {
				if off, ok = recorded.Get(t, p); !ok {
					if c.record != nil {
						return nil, nil, fmt.Errorf("start offset %s/%d: not recorded", t, p)
					}
					off = startOffset(lo, hi, where)
				}
			}
			start.Set(t, p, off)
			topic := t
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(off)})
		}
	}
	return start, tps, nil
}

// markAll marks tps assigned, once librdkafka took them: a partition whose assignment failed is
// found again by the next Discover.
func (c *Consumer) markAll(tps []kafka.TopicPartition) {
	for _, tp := range tps {
		c.mark(*tp.Topic, tp.Partition)
	}
}

// recordStarts has the recorder record the start of every partition of parts that from lacks. It
// passes every partition of their topics: the first process to see a topic records "latest" for
// all of them at one moment, the partitions other processes read included.
func (c *Consumer) recordStarts(ctx context.Context, parts map[string][]int32, from partition.Offsets, marks partition.Marks, latest bool) (partition.Offsets, error) {
	if c.record == nil {
		return nil, nil
	}
	ask, rest := partition.Marks{}, map[string][]int32{}
	for t, ps := range parts {
		if !slices.ContainsFunc(ps, func(p int32) bool { _, ok := from.Get(t, p); return !ok }) {
			continue
		}
		ids, err := c.topicPartitions(ctx, t)
		if err != nil {
			return nil, err
		}
		// The partitions asked for, whatever this metadata read (another broker's, maybe older)
		// says the topic has.
		for _, p := range ps {
			if !slices.Contains(ids, p) {
				ids = append(ids, p)
			}
		}
		for _, p := range ids {
			if m, ok := marks[t][p]; ok {
				ask.Set(t, p, m[0], m[1])
			} else {
				rest[t] = append(rest[t], p)
			}
		}
	}
	if len(ask) == 0 {
		return nil, nil
	}
	more, err := c.watermarks(ctx, rest)
	if err != nil {
		return nil, err
	}
	for t, ps := range more {
		for p, m := range ps {
			ask.Set(t, p, m[0], m[1])
		}
	}
	return c.record(ctx, ask, latest)
}

// topicPartitions lists every partition of topic t.
func (c *Consumer) topicPartitions(ctx context.Context, t string) ([]int32, error) {
	md, err := c.c.GetMetadata(&t, false, timeoutMS(ctx, 10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("metadata %s: %w", t, err)
	}
	tm, ok := md.Topics[t]
	if !ok || tm.Error.Code() != kafka.ErrNoError {
		return nil, fmt.Errorf("metadata %s: %v", t, tm.Error)
	}
	ids := make([]int32, 0, len(tm.Partitions))
	for _, p := range tm.Partitions {
		ids = append(ids, p.ID)
	}
	return ids, nil
}

func (c *Consumer) mark(t string, p int32) {
	if c.assigned[t] == nil {
		c.assigned[t] = map[int32]bool{}
	}
	c.assigned[t][p] = true
}

// Discover assigns partitions added to the topics since the last call, from their beginning (they
// are new, so everything in them is new), recorded first like every start. It returns their
// starting positions.
func (c *Consumer) Discover(ctx context.Context) (partition.Offsets, error) {
	parts, err := c.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	added := map[string][]int32{}
	for t, ps := range parts {
		for _, p := range ps {
			if !c.assigned[t][p] {
				added[t] = append(added[t], p)
			}
		}
	}
	if len(added) == 0 {
		return partition.Offsets{}, nil
	}
	start, tps, err := c.positions(ctx, added, nil, "earliest")
	if err != nil {
		return nil, err
	}
	if err := c.c.IncrementalAssign(tps); err != nil {
		return nil, fmt.Errorf("assign new partitions: %w", err)
	}
	c.markAll(tps)
	for _, tp := range tps {
		c.log.Info("new partition assigned", zap.String("topic", *tp.Topic), zap.Int32("partition", tp.Partition),
			zap.Int64("offset", int64(tp.Offset)))
	}
	return start, nil
}

// startOffset is where "earliest" or "latest" starts a partition with these watermarks.
func startOffset(lo, hi int64, where string) int64 {
	if where == "latest" {
		return hi
	}
	return lo
}

// AssignedWatermarks are a partition's watermarks as Assign read them, in ledger.Watermarks'
// shape: what a session checks its resume offsets against and first exports lag from, without a
// round trip. A partition Assign did not read is an error.
func (c *Consumer) AssignedWatermarks(t string, p int32, _ int) (lo, hi int64, err error) {
	m, ok := c.marks[t][p]
	if !ok {
		return 0, 0, fmt.Errorf("watermarks %s/%d: not read at assignment", t, p)
	}
	return m[0], m[1], nil
}

// watermarks reads the watermarks of every partition in parts, up to 16 queries at a time (one is
// a round trip to the partition's leader, ~1 ms here: hundreds of partitions one after another
// would add that many milliseconds to every start).
func (c *Consumer) watermarks(ctx context.Context, parts map[string][]int32) (map[string]map[int32][2]int64, error) {
	type query struct {
		t      string
		p      int32
		lo, hi int64
		err    error
	}
	var qs []query
	for t, ps := range parts {
		for _, p := range ps {
			qs = append(qs, query{t: t, p: p})
		}
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range qs {
		wg.Add(1)
		sem <- struct{}{}
		go func(q *query) {
			defer func() { <-sem; wg.Done() }()
			q.lo, q.hi, q.err = c.queryWatermarks(ctx, q.t, q.p)
		}(&qs[i])
	}
	wg.Wait()
	out := map[string]map[int32][2]int64{}
	for _, q := range qs {
		if q.err != nil {
			return nil, q.err
		}
		if out[q.t] == nil {
			out[q.t] = map[int32][2]int64{}
		}
		out[q.t][q.p] = [2]int64{q.lo, q.hi}
	}
	return out, nil
}

// queryWatermarks asks the partition leader for a partition's low and high watermark.
func (c *Consumer) queryWatermarks(ctx context.Context, t string, p int32) (lo, hi int64, err error) {
	lo, hi, err = c.c.QueryWatermarkOffsets(t, p, timeoutMS(ctx, 10*time.Second))
	if err != nil {
		return 0, 0, fmt.Errorf("watermarks %s/%d: %w", t, p, err)
	}
	return lo, hi, nil
}

// Wake makes a Read waiting for its first record return at once, with an empty batch. It may be
// called from any goroutine while the consumer is open.
func (c *Consumer) Wake() { c.r.wake() }

// Read fills b with the next records: it waits up to timeout for the first, then takes only what
// librdkafka has queued already. An empty batch is a timeout. Only one goroutine may Read.
func (c *Consumer) Read(timeout time.Duration, b *Batch) error {
	ev, err := c.r.read(timeout, b)
	if err != nil || ev == nil {
		return err
	}
	// An offset out of range means data relay has not read is gone: exactly-once cannot continue
	// by itself; the operator decides (relay offsets reset).
	if ev.IsFatal() || ev.Code() == kafka.ErrAutoOffsetReset {
		return fault.Permanent(fmt.Errorf("kafka: %w", *ev))
	}
	c.log.Warn("kafka client error", zap.Error(*ev))
	return nil
}

// CommitGroup publishes offsets to the consumer group, for lag tooling only.
func (c *Consumer) CommitGroup(offs partition.Offsets) error {
	var tps []kafka.TopicPartition
	for t, ps := range offs {
		for p, o := range ps {
			topic := t
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(o)})
		}
	}
	if len(tps) == 0 {
		return nil
	}
	_, err := c.c.CommitOffsets(tps)
	return err
}

// HighWatermark is the cached high watermark of a partition (no broker round trip).
func (c *Consumer) HighWatermark(t string, p int32) (int64, bool) {
	_, hi, err := c.c.GetWatermarkOffsets(t, p)
	if err != nil || hi < 0 {
		return 0, false
	}
	return hi, true
}

// Position is the client's next offset for a partition: past the last record delivered, and past
// the transaction markers and aborted records after it, which read_committed never delivers.
func (c *Consumer) Position(t string, p int32) (int64, bool) {
	tps, err := c.c.Position([]kafka.TopicPartition{{Topic: &t, Partition: p}})
	if err != nil || len(tps) != 1 || tps[0].Offset < 0 {
		return 0, false
	}
	return int64(tps[0].Offset), true
}

func timeoutMS(ctx context.Context, def time.Duration) int {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < def {
			def = d
		}
	}
	if def < time.Millisecond {
		def = time.Millisecond
	}
	return int(def / time.Millisecond)
}
