// Verify's recount of the topic. Invariant: it decodes and folds with the job's own spec (the
// pipeline's decoder and its one Plan.Fold) reading read_committed, exactly the ranges the snapshot's
// offsets cover; it never starts on offsets the topic does not hold, and tells its progress.

package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/spec"
)

// recount reads [from, committed offsets) of every partition: it returns the fold of its good
// records and the snapshot's tables.
func (e *Env) recount(ctx context.Context, r *VerifyReport, plan *spec.Plan, from string) (want, got [][]spec.Row, err error) {
	start := partition.Offsets{}
	if from != "" && from != "earliest" {
		id, err := strconv.ParseInt(from, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("--from %q is neither earliest nor a checkpoint id", from)
		}
		if e.Config.Mode != commit.ModeXA {
			return nil, nil, fmt.Errorf("--from %d: mode %s keeps no checkpoint rows; use --from earliest", id, e.Config.Mode)
		}
		rows, err := e.Ledger.Lookup(ctx, []int64{id})
		if err != nil {
			return nil, nil, err
		}
		c, ok := rows[id]
		if !ok {
			return nil, nil, fmt.Errorf("--from %d: no such checkpoint in the ledger (relay keeps the newest 1000)", id)
		}
		start = c.Offsets
	}
	c, err := e.consumer()
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	begin, err := c.Assign(ctx, start)
	if err != nil {
		return nil, nil, err
	}
	parts := partitionsOf(begin)
	for _, t := range sortedTopics(parts) {
		for _, p := range parts[t] {
			if lo, _ := begin.Get(t, p); lo > 0 {
				if _, set := start.Get(t, p); !set {
					r.Notes = append(r.Notes, fmt.Sprintf("%s:%d starts at offset %d: older records were deleted by retention and cannot be recounted", t, p, lo))
				}
			}
		}
	}
	snap, err := e.snapshot(ctx, plan, begin)
	if err != nil {
		return nil, nil, err
	}
	// A range the topic does not hold (recreated, truncated, records deleted) would be waited for
	// forever: fail now, saying which and why.
	firsts, ends := partition.Offsets{}, partition.Offsets{}
	for _, rg := range snap.ranges {
		firsts.Set(rg.Topic, rg.Partition, rg.From)
		ends.Set(rg.Topic, rg.Partition, rg.To)
	}
	q := c.Kafka().QueryWatermarkOffsets
	if err := errors.Join(ledger.CheckRange(ctx, firsts, q), ledger.CheckRange(ctx, ends, q)); err != nil {
		return nil, nil, fmt.Errorf("verify: the range to recount is not in the topic: %w", err)
	}
	r.Checkpoint = &snap.checkpoint
	r.Ranges = snap.ranges
	r.Notes = append(r.Notes, snap.notes...)
	ranges := map[string]map[int32]*Range{}
	for i := range r.Ranges {
		rg := &r.Ranges[i]
		if ranges[rg.Topic] == nil {
			ranges[rg.Topic] = map[int32]*Range{}
		}
		ranges[rg.Topic][rg.Partition] = rg
	}
	tables, bad, err := e.count(ctx, c, r, plan, ranges)
	if err != nil {
		return nil, nil, err
	}
	want = make([][]spec.Row, len(snap.tables))
	for a := range want {
		want[a] = tables.Rows(a)
	}
	var rows []BadRecord
	for _, b := range snap.dlq {
		if rg := ranges[b.Topic][b.Partition]; rg != nil && b.Offset >= rg.From {
			rows = append(rows, b)
		}
	}
	if e.Config.Input.BadInputPolicy != "dlq" {
		bad = nil // skip: counted only; fail: relay stops instead
	}
	r.DeadLetter = diffDeadLetters(bad, rows)
	if r.Detail = snap.detail; r.Detail != nil {
		r.Detail.Expected = r.Good
	}
	return want, snap.tables, nil
}

// progressEvery paces a recount's progress lines.
const progressEvery = 5 * time.Second

// count folds every record of the ranges exactly as the pipeline does (the plan's format decoder and
// Plan.Fold, into one Tables: routing does not change a total), logging its progress. When
// ctx ends first, the error names where each unfinished partition stood. (A range out of the topic
// was refused before it started; a topic recreated shorter meanwhile ends it with the consumer's
// out-of-range error.)
func (e *Env) count(ctx context.Context, c *consumer.Consumer, r *VerifyReport, plan *spec.Plan, ranges map[string]map[int32]*Range) (*spec.Tables, []BadRecord, error) {
	dec, err := e.Config.Decoder(plan)
	if err != nil {
		return nil, nil, err
	}
	tables := plan.NewTables()
	var bad []BadRecord
	open := map[string]map[int32]bool{}
	next := map[*Range]int64{} // the next offset to cover in each range
	var covered, total int64
	left := 0
	var done []kafka.TopicPartition
	advance := func(rg *Range, to int64) {
		if to > next[rg] {
			covered += to - next[rg]
			next[rg] = to
		}
	}
	finish := func(t string, p int32) {
		if open[t][p] {
			delete(open[t], p)
			left--
			advance(ranges[t][p], ranges[t][p].To)
			topic := t
			done = append(done, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	for t, ps := range ranges {
		open[t] = map[int32]bool{}
		for p, rg := range ps {
			open[t][p] = true
			next[rg] = rg.From
			total += max(rg.To-rg.From, 0)
			left++
			if rg.From >= rg.To {
				finish(t, p)
			}
		}
	}
	// unfinished names where each open range stands, for an error that says why verify stopped.
	unfinished := func() string {
		var s []string
		parts := partitionsOf(openEnds(open, ranges))
		for _, t := range sortedTopics(parts) {
			for _, p := range parts[t] {
				rg := ranges[t][p]
				s = append(s, fmt.Sprintf("%s:%d at offset %d of [%d,%d)", t, p, next[rg], rg.From, rg.To))
			}
		}
		return fmt.Sprintf("%d partitions unfinished after %d records (%s)", left, r.Records, strings.Join(s, ", "))
	}
	log := e.Log.Named("verify")
	progress := func() {
		log.Info("verify progress", zap.Int64("records_read", r.Records), zap.Int64("offsets_done", covered),
			zap.Int64("offsets_total", total), zap.Int("partitions_left", left))
	}
	// The first line comes at once: it tells the operator how much there is to read.
	progress()
	var rec spec.Record
	batch := consumer.DefaultBatch()
	for nextLog := time.Now().Add(progressEvery); left > 0; {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("recount: %s: %w", unfinished(), err)
		}
		if now := time.Now(); !now.Before(nextLog) {
			nextLog = now.Add(progressEvery)
			progress()
		}
		if err := c.Read(200*time.Millisecond, batch); err != nil {
			return nil, nil, err
		}
		if len(batch.Records) == 0 {
			// Nothing delivered: the rest of a range may be transaction markers or aborted records,
			// which are never delivered but move the position.
			if err := positionsDone(c.Kafka(), open, ranges, finish); err != nil {
				return nil, nil, err
			}
		}
		for _, msg := range batch.Records {
			t, p, off := msg.Topic, msg.Partition, msg.Offset
			rg := ranges[t][p]
			if rg == nil {
				continue
			}
			if open[t][p] && off < rg.To {
				advance(rg, off+1)
				r.Records++
				reason, _, err := dec.Decode(ctx, msg.Value, &rec)
				if err != nil {
					// The registry could not be asked: a recount that counted the record as bad
					// would report a difference that is not there.
					return nil, nil, fmt.Errorf("recount %s/%d@%d: %w", t, p, off, err)
				}
				if reason == spec.OK {
					plan.Fold(&rec, []*spec.Tables{tables})
					r.Good++
					rg.Good++
				} else {
					bad = append(bad, BadRecord{Topic: t, Partition: p, Offset: off, Reason: reason.String()})
					r.Bad++
				}
			}
			if off+1 >= rg.To {
				finish(t, p)
			}
		}
		if len(done) > 0 {
			// Stop fetching what lies past the range.
			if err := c.Kafka().Pause(done); err != nil {
				return nil, nil, fmt.Errorf("recount: pause: %w", err)
			}
			done = done[:0]
		}
	}
	return tables, bad, nil
}

// openEnds is the end offset of every range still open.
func openEnds(open map[string]map[int32]bool, ranges map[string]map[int32]*Range) partition.Offsets {
	out := partition.Offsets{}
	for t, ps := range open {
		for p := range ps {
			out.Set(t, p, ranges[t][p].To)
		}
	}
	return out
}

func positionsDone(c *kafka.Consumer, open map[string]map[int32]bool, ranges map[string]map[int32]*Range, finish func(string, int32)) error {
	var tps []kafka.TopicPartition
	for t, ps := range open {
		for p := range ps {
			topic := t
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	pos, err := c.Position(tps)
	if err != nil {
		return fmt.Errorf("recount: positions: %w", err)
	}
	for _, tp := range pos {
		if tp.Offset >= 0 && int64(tp.Offset) >= ranges[*tp.Topic][tp.Partition].To {
			finish(*tp.Topic, tp.Partition)
		}
	}
	return nil
}
