package pipeline

import (
	"context"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/spec"
)

// benchPayloads are records exactly as `relay loadgen` writes them (same generator), with the key
// space of the end-to-end benchmark: skus × windows distinct (window, sku) keys.
func benchPayloads(n, skus, windows int) [][]byte {
	g := loadgen.NewGenerator(loadgen.Options{Seed: 7, SKUs: skus, Windows: windows})
	out := make([][]byte, n)
	for i := range out {
		out[i], _ = g.Next()
	}
	return out
}

// BenchmarkDecodeRouteAggregate is the per-record CPU work of the consume loop without Kafka:
// decode + validate (the default spec's decoder), window, route to one of 2 subtasks, add to that
// subtask's tables (Plan.Fold). The tables are warm (steady state inside an epoch): every key is
// already present.
func BenchmarkDecodeRouteAggregate(b *testing.B) {
	for _, c := range []struct {
		name          string
		skus, windows int
	}{{"keys=1k", 100, 10}, {"keys=10k", 1000, 10}, {"keys=100k", 10000, 10}} {
		b.Run(c.name, func(b *testing.B) {
			recs := benchPayloads(1<<16, c.skus, c.windows)
			cfg := config.Default()
			plan, err := cfg.Plan()
			if err != nil {
				b.Fatal(err)
			}
			d := plan.NewDecoder()
			tables := []*spec.Tables{plan.NewTables(), plan.NewTables()}
			var rec spec.Record
			fold := func(p []byte) {
				if r, f := d.Decode(p, &rec); r != spec.OK {
					b.Fatal(r, f)
				}
				plan.Fold(&rec, tables)
			}
			for _, p := range recs {
				fold(p)
			}
			var bytes int64
			for _, p := range recs {
				bytes += int64(len(p))
			}
			b.SetBytes(bytes / int64(len(recs)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				fold(recs[i])
				i = (i + 1) & (len(recs) - 1)
			}
		})
	}
}

// BenchmarkSessionFold runs the real per-record functions, the reader goroutine's decode and the
// loop's session.fold, on consumer.Record values built in memory (no broker): decode, validate, offsets bookkeeping, route,
// aggregate — and, for "append", the detail row of the append sink. The epoch is replaced every
// epochRecs records, as a checkpoint does, so per-epoch allocations are counted at their real rate.
func BenchmarkSessionFold(b *testing.B) {
	for _, c := range []struct {
		name      string
		detail    bool
		epochRecs int
	}{
		{"aggregate/epoch=300k", false, 300000},
		{"aggregate/epoch=60k", false, 60000},
		{"append/epoch=300k", true, 300000},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := config.Default()
			cfg.Job.Name = "bench"
			cfg.Subtasks = 2
			cfg.Checkpoint.BufferKeys = 1 << 30
			if c.detail {
				cfg.MySQL.DetailTable = "order_details"
			}
			plan, err := cfg.Plan()
			if err != nil {
				b.Fatal(err)
			}
			p := New(Deps{Config: cfg, Plan: plan, Decoders: []format.Decoder{format.NewJSON(plan)}, Log: zap.NewNop(), Metrics: metrics.New("bench")})
			// The session reads the records' four partitions (fold refuses a record of any other).
			s := &session{p: p, positions: partition.Offsets{"orders": {0: 0, 1: 0, 2: 0, 3: 0}}, cur: p.newEpoch(1)}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			s.ctx, s.fail = ctx, cancel
			for i := 0; i < cfg.Subtasks; i++ {
				st := make(chan commit.Work, 64)
				s.subs = append(s.subs, st)
				go func() { // a sink that accepts and drops batches
					for {
						select {
						case <-ctx.Done():
							return
						case <-st:
						}
					}
				}()
			}
			recs := benchPayloads(1<<16, 1000, 10)
			topic := "orders"
			// librdkafka delivers a fetched partition's records together: runs of a batch (512).
			msgs := make([]consumer.Record, len(recs))
			next := map[int32]int64{}
			for i, v := range recs {
				part := int32(i / 512 % 4)
				msgs[i] = consumer.Record{Topic: topic, Partition: part, Offset: next[part], Value: v}
				next[part]++
			}
			var d decoded
			b.ReportAllocs()
			i, n := 0, 0
			for b.Loop() {
				// The reader goroutine's decode, then the loop's fold: one record's whole CPU work.
				d.reason, d.field, _ = p.Decoders[0].Decode(ctx, msgs[i].Value, &d.rec)
				if err := s.fold(&msgs[i], &d); err != nil {
					b.Fatal(err)
				}
				i = (i + 1) & (len(msgs) - 1)
				if n++; n == c.epochRecs {
					s.cur, n = p.newEpoch(s.cur.id+1), 0
				}
			}
		})
	}
}

// BenchmarkPositions is the per-record offset bookkeeping of session.fold (partition.Offsets.Set: a
// map lookup by topic string, then by partition) against a cache of the last topic's partition
// map, to size what fold spends on it.
func BenchmarkPositions(b *testing.B) {
	topic := "orders"
	tps := make([]kafka.TopicPartition, 1024)
	for i := range tps {
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: int32(i % 4), Offset: kafka.Offset(i)}
	}
	b.Run("Offsets.Set", func(b *testing.B) {
		pos := partition.Offsets{}
		i := 0
		for b.Loop() {
			tp := &tps[i&1023]
			pos.Set(*tp.Topic, tp.Partition, int64(tp.Offset)+1)
			i++
		}
	})
	b.Run("last-topic-cache", func(b *testing.B) {
		pos := partition.Offsets{}
		var lastTopic *string
		var parts map[int32]int64
		i := 0
		for b.Loop() {
			tp := &tps[i&1023]
			if tp.Topic != lastTopic {
				if parts = pos[*tp.Topic]; parts == nil {
					parts = map[int32]int64{}
					pos[*tp.Topic] = parts
				}
				lastTopic = tp.Topic
			}
			parts[tp.Partition] = int64(tp.Offset) + 1
			i++
		}
	})
}
