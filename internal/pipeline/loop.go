// Consume loop: poll, fold, cut, drain and lag of one session.
//
// Invariant: one goroutine (the loop) folds records and alone cuts epochs, between two whole
// batches, so the offsets recorded for checkpoint c are exactly the records folded into c; at most
// one checkpoint is in flight, and records after its barrier go to epoch c+1 meanwhile.

package pipeline

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/membership"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
)

func (s *session) run(ctx context.Context) (err error) {
	defer func() {
		if fault.DataRefused(err) {
			// The record MySQL refused is among those not yet decided: name them for the operator.
			err = fmt.Errorf("records %s not committed: %w", s.undecided(), err)
		}
		if err != nil {
			s.close(err)
		} else {
			s.close(errSessionEnd)
		}
	}()
	p := s.p
	cfg := p.Config
	discover := time.NewTicker(cfg.Kafka.DiscoveryInterval)
	defer discover.Stop()
	lagEvery := time.NewTicker(5 * time.Second)
	defer lagEvery.Stop()
	nextCut := time.Now().Add(cfg.Checkpoint.Interval)
	// The barrier is checked after every event; the timer wakes an idle loop when a cut falls due
	// (no periodic wake-up: an idle relay sleeps until the interval or the idle cut).
	wake := time.NewTimer(cfg.Checkpoint.Interval)
	defer wake.Stop()
	var changes <-chan *membership.Change
	if p.Member != nil {
		changes = p.Member.Changes()
	}
	batches := make(chan *polled, 4)
	free := make(chan *polled, s.batches())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.poll(batches, free)
	}()
	for {
		select {
		case <-ctx.Done():
			return s.drain()
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		case <-s.fence.Lost():
			return commit.ErrFenceLost
		case ch := <-changes:
			if ch.Kind == membership.Lost {
				return s.lost(ch)
			}
			if err := s.reassign(batches, free); err != nil {
				return &errReassigned{ch, err}
			}
			ch.Done()
		case err := <-s.inflight:
			s.inflight = nil
			if err != nil {
				return err
			}
			s.lastEnd = time.Now()
			nextCut = maxTime(nextCut, s.lastEnd.Add(cfg.Checkpoint.MinPause))
			// The decided offsets moved: the lag with them (cached watermarks, no round trip), so
			// a caught-up job does not show its old lag until the next 5 s tick.
			s.exportLag(s.cons.HighWatermark)
		case <-discover.C:
			added, err := s.cons.Discover(s.ctx)
			if err != nil {
				// A broker restart: the partitions read so far keep being read; look again later.
				p.Log.Warn("partition discovery failed", zap.Error(err))
				continue
			}
			s.started(added)
		case <-lagEvery.C:
			s.exportLag(s.cons.HighWatermark)
		case <-wake.C:
		case b := <-batches:
			if err := s.foldBatch(b, free); err != nil {
				return err
			}
		}
		if s.inflight == nil && (!time.Now().Before(nextCut) || s.idle() || s.hurried()) {
			if err := s.cut(); err != nil {
				return err
			}
			nextCut = time.Now().Add(cfg.Checkpoint.Interval)
		}
		wake.Reset(max(time.Until(s.due(nextCut)), time.Millisecond))
	}
}

// lost ends the session on a lost assignment: the partitions are another member's already, so no
// new epoch is cut. A checkpoint already in flight finishes (a zombie's decision is refused by the
// partitions' epochs: counted, not abandoned with the session).
func (s *session) lost(ch *membership.Change) error {
	if err := s.awaitInflight(); err != nil && !s.p.countFenced(err) {
		return &errReassigned{ch, err}
	}
	return &errReassigned{ch, nil}
}

// foldBatch folds a whole batch (a barrier falls between two records, never inside the fold of
// one) and hands its memory back to the poll.
func (s *session) foldBatch(b *polled, free chan<- *polled) error {
	s.lastRecord = time.Now()
	defer s.endStreak()
	for i := range b.recs.Records {
		if err := s.fold(&b.recs.Records[i], &b.dec[i]); err != nil {
			return err
		}
	}
	if b.err != nil {
		return b.err
	}
	free <- b // nothing folded keeps a value: keys, dead letters and details are copies
	return nil
}

// quiesce parks the poll goroutine and folds every batch it read before: from then until resume
// is called no record is read, and every record read is in the current epoch. The request waits in
// a buffered channel for the poll's next look (between two reads) rather than meeting it there: a
// loop busy folding would miss that moment, read after read.
func (s *session) quiesce(batches <-chan *polled, free chan<- *polled) (resume func(), err error) {
	r := make(chan struct{})
	s.pause <- r
	s.cons.Wake() // a poll waiting for records (an idle partition) would see the request only after 100 ms
	for {
		select {
		case <-s.parked:
			for {
				select {
				case b := <-batches:
					if err := s.foldBatch(b, free); err != nil {
						close(r)
						return nil, err
					}
				default:
					return func() { close(r) }, nil
				}
			}
		case b := <-batches:
			if err := s.foldBatch(b, free); err != nil {
				// The poll may still park on the request: let it go on (the session is ending).
				close(r)
				return nil, err
			}
		case <-s.ctx.Done():
			return nil, context.Cause(s.ctx)
		}
	}
}

// due is when the next cut may fall due without an event: at the interval, or, with records read,
// once the input has paused for idle_after (and min_pause has passed). While a checkpoint is in
// flight its completion is the event that wakes the loop.
func (s *session) due(nextCut time.Time) time.Time {
	if s.inflight != nil {
		return nextCut.Add(s.p.Config.Checkpoint.Timeout)
	}
	cp := s.p.Config.Checkpoint
	if s.soon {
		return minTime(nextCut, s.lastEnd.Add(cp.MinPause))
	}
	if cp.IdleAfter > 0 && !s.cur.empty() {
		return minTime(nextCut, maxTime(s.lastRecord.Add(cp.IdleAfter), s.lastEnd.Add(cp.MinPause)))
	}
	return nextCut
}

// idle says the input paused with records read since the last cut: they need not wait for the
// interval. The minimum pause still holds.
func (s *session) idle() bool {
	cp := s.p.Config.Checkpoint
	now := time.Now()
	return cp.IdleAfter > 0 && !s.cur.empty() && now.Sub(s.lastRecord) >= cp.IdleAfter &&
		!now.Before(s.lastEnd.Add(cp.MinPause))
}

// hurried says the first record of a partition moved here was folded (moved): the checkpoint that
// decides it need not wait for the interval. The minimum pause still holds.
func (s *session) hurried() bool {
	return s.soon && !time.Now().Before(s.lastEnd.Add(s.p.Config.Checkpoint.MinPause))
}

// fold adds one decoded record to the current epoch.
func (s *session) fold(msg *consumer.Record, d *decoded) error {
	p := s.p
	e := s.cur
	if !s.streak.on || msg.Partition != s.streak.part || msg.Topic != s.streak.topic {
		s.endStreak()
		ps := s.positions[msg.Topic]
		if _, ok := ps[msg.Partition]; !ok {
			// librdkafka drops what it fetched of a partition before its unassignment, and the poll is
			// parked while partitions move: a record of a partition not read here is a bug, not input.
			return fmt.Errorf("a record of %s/%d, which this session does not read", msg.Topic, msg.Partition)
		}
		s.streak = streak{on: true, topic: msg.Topic, part: msg.Partition, parts: ps}
	}
	s.streak.next = msg.Offset + 1
	if len(s.moved) > 0 {
		if _, ok := s.moved.Get(msg.Topic, msg.Partition); ok {
			s.unmove(msg.Topic, msg.Partition)
			s.soon = true
		}
	}
	if e.records == 0 {
		e.firstPoll = time.Now()
	}
	e.records++
	if ts := msg.Timestamp; !ts.IsZero() && (e.oldestTS.IsZero() || ts.Before(e.oldestTS)) {
		e.oldestTS = ts
	}
	// A partition-affine protocol keeps each partition on one subtask: its offsets commit with its rows.
	owner := int(msg.Partition) % len(s.subs)
	rec, reason, field := &d.rec, d.reason, d.field
	if reason == spec.OK {
		// Every aggregate's keys are routed among the subtasks by their encoded primary key; a
		// partition-affine protocol gives the fold only the owner's tables.
		tables := e.tables
		if e.affine {
			tables = e.tables[owner : owner+1]
		}
		p.Plan.Fold(rec, tables)
		e.ok++
		if p.schema.Detail != "" {
			// The append sink exists only with the default spec (config refuses it next to a
			// pipeline block), whose fields are order_id, sku and amount in this order.
			e.details[owner] = append(e.details[owner], sink.DetailRow{OrderID: string(rec.Vals[0].Bytes), SKU: string(rec.Vals[1].Bytes),
				Amount: rec.Vals[2].Int, TS: rec.TS, Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset})
			if len(e.details[owner]) >= 4*p.Config.MySQL.BatchRows {
				d := e.details[owner]
				e.details[owner] = nil
				if err := s.send(owner, commit.Work{Epoch: e.id, Details: d}); err != nil {
					return err
				}
			}
		}
		// Partition-affine subtasks share keys, so their aggregates are flushed only at the barrier:
		// one sorted pass per transaction keeps row locks ordered across them, so they cannot deadlock.
		if e.affine {
			return nil
		}
		for i, t := range e.tables {
			if t.Keys() >= p.Config.Checkpoint.BufferKeys {
				e.tables[i] = p.Plan.NewTables()
				e.handOver(t)
				if err := s.send(i, commit.Work{Epoch: e.id, Table: t}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if field != "" && !p.reported[badField{reason, field}] {
		p.reported[badField{reason, field}] = true
		p.Log.Warn("bad input (logged once per reason and field; the dead-letter row names the reason)",
			zap.String("reason", reason.String()), zap.String("field", field),
			zap.String("topic", msg.Topic), zap.Int32("partition", msg.Partition), zap.Int64("offset", msg.Offset))
	}
	p.Metrics.BadRecords.WithLabelValues(reason.String()).Inc()
	switch p.Config.Input.BadInputPolicy {
	case "skip":
		e.skipped++
		return nil
	case "fail":
		return fmt.Errorf("%w: %s at %s/%d@%d", ErrBadInput, reason, msg.Topic, msg.Partition, msg.Offset)
	}
	payload := msg.Value
	if len(payload) > p.Config.Input.DLQPayloadBytes {
		payload = payload[:p.Config.Input.DLQPayloadBytes]
	}
	i := owner
	e.dlq[i] = append(e.dlq[i], sink.DLQRow{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset,
		Reason: reason.String(), Payload: append([]byte(nil), payload...), Size: len(msg.Value)})
	e.dlqCount++
	return nil
}

// streak is a partition whose records follow one another in a batch (librdkafka delivers a fetched
// partition's records together): it is looked up in positions at its first record, and its next
// offset written there at its end, not two map lookups per record.
type streak struct {
	on    bool
	topic string
	part  int32
	next  int64
	parts map[int32]int64 // positions[topic]
}

// endStreak writes the current streak's next offset to positions. Every fold of a batch ends with it, so
// between batches, where epochs are cut and partitions move, positions are whole.
func (s *session) endStreak() {
	if s.streak.on {
		s.streak.parts[s.streak.part] = s.streak.next
		s.streak.on = false
	}
}

// send hands a batch to a subtask, waiting while it is busy (back-pressure on the consume loop).
func (s *session) send(i int, b commit.Work) error {
	select {
	case s.subs[i] <- b:
		return nil
	case <-s.ctx.Done():
		return context.Cause(s.ctx)
	}
}

// cut closes the current epoch at the barrier and starts its checkpoint.
func (s *session) cut() error {
	e := s.cur
	s.soon = false
	if e.empty() {
		// Nothing new: no ledger row, no transaction; the job is idle, not stale.
		s.p.lastOK.Store(time.Now().UnixNano())
		s.p.Metrics.Checkpoints.WithLabelValues("empty").Inc()
		s.p.Metrics.LastCommittedTime.SetToCurrentTime()
		return nil
	}
	offsets, cutAt := s.positions.Clone(), time.Now()
	cp := &commit.Pending{ID: e.id, Records: e.records, Offsets: offsets, Replies: make(chan commit.Reply, len(s.subs)),
		Committed: func(tags []string, log *zap.Logger) { s.committed(e, offsets, cutAt, tags, log) }}
	decided := *s.decided.Load()
	for i := range s.subs {
		e.handOver(e.tables[i])
		b := commit.Work{Epoch: e.id, Table: e.tables[i], DLQ: e.dlq[i], Details: e.details[i], Barrier: cp.Replies,
			Offsets: s.p.proto.BarrierOffsets(decided, offsets, i, len(s.subs))}
		if err := s.send(i, b); err != nil {
			return err
		}
	}
	next := e.id + 1
	if next > s.blockLast {
		rctx, cancel := context.WithTimeout(s.ctx, s.p.Config.Checkpoint.Timeout)
		first, last, err := s.fence.ReserveIDs(rctx, s.p.Ledger, next)
		cancel()
		if err != nil {
			return err
		}
		next, s.blockLast = first, last
	}
	// The batches own the epoch's rows now; the checkpoint keeps only its counts.
	e.tables, e.dlq, e.details = nil, nil, nil
	s.cur = s.p.newEpoch(next)
	done := make(chan error, 1)
	s.inflight = done
	go func() {
		err := s.p.proto.Complete(s.ctx, s.coord, cp)
		if err != nil {
			// Fail the session at once: the loop may be blocked on a subtask that waits for a decision.
			s.fail(err)
		}
		done <- err
	}()
	return nil
}

// awaitInflight waits for the checkpoint in flight, if any, and returns its error.
func (s *session) awaitInflight() error {
	if s.inflight == nil {
		return nil
	}
	err := <-s.inflight
	s.inflight = nil
	return err
}

// drain runs the final checkpoint on SIGTERM: finish the one in flight, then commit what was read.
func (s *session) drain() error {
	s.p.setState(Draining)
	if err := s.awaitInflight(); err != nil {
		return err
	}
	if err := s.cut(); err != nil {
		return err
	}
	if err := s.awaitInflight(); err != nil {
		return err
	}
	s.p.Log.Info("drained", zap.Any("offsets", *s.decided.Load()))
	return nil
}

// exportLag sets relay_consumer_lag_records of every partition with a decided offset, reading high
// watermarks from highWatermark.
func (s *session) exportLag(highWatermark func(topic string, part int32) (int64, bool)) {
	for t, ps := range *s.decided.Load() {
		for part, off := range ps {
			hi, ok := highWatermark(t, part)
			if !ok {
				continue
			}
			// On a transactional topic the end holds markers (and maybe aborted records) that relay
			// never receives, so a caught-up partition would show them as lag for ever. Once all it
			// read is decided, what lies between that and the client's position is such records.
			// (The poll goroutine may hold a few records not yet folded: lag reads low by those.)
			if read, _ := s.positions.Get(t, part); read == off {
				if pos, ok := s.cons.Position(t, part); ok {
					off = max(off, pos)
				}
			}
			s.p.Metrics.ConsumerLag.WithLabelValues(t, fmt.Sprint(part)).Set(float64(max(hi-off, 0)))
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
