// Session: one consumer plus N subtasks between two recoveries, and the epoch they fill.
//
// Invariant: a session starts only from a finished recovery, with the consumer at the last
// decision and a fresh block of checkpoint ids above every id used before; it ends by failing as
// a whole (every subtask's connection dropped, the consumer closed), never by half.

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
)

// epoch is the in-memory state of one checkpoint being filled.
type epoch struct {
	id        int64
	tables    []*spec.Tables // one per subtask, every aggregate
	dlq       [][]sink.DLQRow
	details   [][]sink.DetailRow
	records   int64
	rows      []int64 // per aggregate: the keys of every table handed to a subtask
	ok        int64
	dlqCount  int64
	skipped   int64
	firstPoll time.Time
	oldestTS  time.Time // oldest Kafka timestamp folded in (zero when the records carry none)
	// affine is the protocol's partitionAffine, read once per epoch rather than per record.
	affine bool
}

func (p *Pipeline) newEpoch(id int64) *epoch {
	n := p.Config.Subtasks
	e := &epoch{id: id, tables: make([]*spec.Tables, n), dlq: make([][]sink.DLQRow, n), details: make([][]sink.DetailRow, n),
		rows: make([]int64, len(p.Plan.Tables())), affine: p.proto.PartitionAffine()}
	for i := range e.tables {
		e.tables[i] = p.Plan.NewTables()
	}
	return e
}

func (e *epoch) empty() bool { return e.records == 0 }

// handOver counts the rows of a table the loop hands to a subtask: each key is one upsert.
func (e *epoch) handOver(t *spec.Tables) {
	for a := range e.rows {
		e.rows[a] += int64(t.Len(a))
	}
}

// session is one consumer plus N subtasks between two recoveries.
type session struct {
	p            *Pipeline
	fence        *ledger.Fence
	ctx          context.Context // ends when the session fails
	fail         context.CancelCauseFunc
	cons         *consumer.Consumer
	subs         []chan<- commit.Work // each subtask's input, in order (commit.Subtask.Data)
	wg           sync.WaitGroup
	positions    partition.Offsets                 // next offset per partition, as of the records folded so far
	streak       streak                            // the partition of the batch's current streak of records
	begin        partition.Offsets                 // positions at the session's start
	decided      atomic.Pointer[partition.Offsets] // offsets of the last decided checkpoint
	decidedMu    sync.Mutex                        // held while decided is changed (updateDecided)
	cur          *epoch
	inflight     chan error // result of the checkpoint in flight; nil when none
	lastEnd      time.Time
	lastRecord   time.Time // when the last batch of records arrived
	committedAny atomic.Bool
	coord        *commit.Coordinator // completes the checkpoints cut in this session
	blockLast    int64               // last checkpoint id of the block reserved for this session
	// pause asks the poll goroutine to park until the channel it carries is closed; parked is its
	// answer once it parked (quiesce).
	pause  chan chan struct{}
	parked chan struct{}
	// queue is the poll's helpers, which decode its batches with input.decoders above 1 (decode.go).
	queue *decodeQueue
	// moved are the partitions add started reading whose first record is not folded yet. Their
	// records waited for the hand-over already (the other member's drain, the group's rounds, the
	// take): the fold of the first makes the next checkpoint due at once (soon, min_pause still
	// holding) rather than at the rest of the interval (docs/PROTOCOL.md, "The rebalance timeline").
	moved partition.Offsets
	soon  bool
	// takeovers are the partitions taken after another process decided them (handedOver), each
	// with when that last decision was (UnixNano, this process's clock), until this session's
	// first committed checkpoint of it (tookOver). Guarded by decidedMu: the loop adds and releases,
	// the commit path observes.
	takeovers partition.Offsets
	// group holds the latest committed offsets for the consumer group (kafka.commit_group_offsets),
	// published off the commit path: the group coordinator being slow must not delay checkpoints.
	group chan partition.Offsets
}

func (p *Pipeline) newSession(ctx context.Context, fence *ledger.Fence) (*session, error) {
	p.setState(Recovering)
	p.recovered.Store(false)
	p.Metrics.Recoveries.Inc()
	p.Metrics.PendingTransactions.Set(0)
	rctx, cancel := context.WithTimeout(ctx, p.Config.Checkpoint.RestartAllowance)
	defer cancel()
	if err := p.endZombies(rctx); err != nil {
		return nil, err
	}
	if p.Member != nil {
		// From here a revoke waits for this session to end; what came before is settled now.
		p.Member.Reading(true)
		p.settleChanges()
	}
	rec, from, err := p.proto.Recover(rctx, fence)
	if err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	var claims partition.Claims
	var handovers []ledger.Handover
	if p.Member != nil {
		fence.SetClaims(partition.Claims{})
		want, g := p.Member.Wants()
		taken, err := p.take(rctx, fence, want, g)
		if err != nil {
			return nil, fmt.Errorf("take partitions: %w", err)
		}
		claims, from, handovers = taken.Claims, taken.Offsets, taken.Handovers
	}
	cons, err := p.NewConsumer()
	if err != nil {
		return nil, err
	}
	if claims != nil {
		cons.Only(claims)
	}
	cons.RecordStarts(func(ctx context.Context, marks partition.Marks, latest bool) (partition.Offsets, error) {
		return p.Ledger.RecordStarts(ctx, fence.Epoch(), marks, latest)
	})
	start, err := cons.Assign(rctx, from)
	if err == nil {
		err = ledger.CheckRange(rctx, start, cons.AssignedWatermarks)
	}
	if err != nil {
		cons.Close()
		return nil, err
	}
	// A fresh block of ids, above every id an earlier owner (or another instance) may have used.
	first, last, err := fence.ReserveIDs(rctx, p.Ledger, rec.NextID)
	if err != nil {
		cons.Close()
		return nil, err
	}
	p.sessionFirstID.Store(first)
	p.Metrics.AssignedPartitions.Set(float64(start.Len()))
	p.Metrics.TopicPartitions.Set(float64(cons.TopicPartitions()))
	s := &session{p: p, fence: fence, cons: cons, positions: start, begin: start.Clone(), cur: p.newEpoch(first), blockLast: last,
		pause: make(chan chan struct{}, 1), parked: make(chan struct{})}
	// Every start is the ledger's: an offset a checkpoint decided, or a start position recorded
	// before its partition was read.
	decided := start.Clone()
	s.decided.Store(&decided)
	s.handedOver(handovers)
	s.ctx, s.fail = context.WithCancelCause(context.Background())
	env := &commit.Env{Deps: p.commit(), Settings: p.Config.Commit(), Proto: p.proto, Plan: p.Plan, Schema: p.schema}
	var subs []*commit.Subtask
	for i := 0; i < p.Config.Subtasks; i++ {
		global := p.Config.InstanceIndex()*p.Config.Subtasks + i
		st := commit.NewSubtask(env, i, global, fence)
		subs = append(subs, st)
		s.subs = append(s.subs, st.Data())
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := st.Run(s.ctx); err != nil {
				if !errors.Is(err, ledger.ErrFenced) {
					err = &commit.CheckpointError{Err: err}
				}
				s.fail(err)
			}
		}()
	}
	if p.Config.Kafka.CommitGroupOffsets {
		s.group = make(chan partition.Offsets, 1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.publishGroup()
		}()
	}
	s.coord = commit.NewCoordinator(subs, p.Ledger, fence, p.Config.Checkpoint.Timeout, p.Metrics, p.Log.Named("checkpoint"))
	p.Log.Info("recovered", zap.Int64("resume_checkpoint", first), zap.Int("committed", rec.Committed),
		zap.Int("rolled_back", rec.RolledBack), zap.Int("left_to_resolver", rec.Skipped), zap.Any("offsets", start))
	// The partitions of an earlier session that this one does not read (a group member's revoked
	// ones) must not keep exporting their old lag: the member that reads them now exports theirs.
	p.Metrics.ConsumerLag.Reset()
	// Lag is exported before readiness flips, so a ready process never lacks the series dashboards
	// and alerts read: the loop refreshes it only every 5 s, and from librdkafka's cache, which is
	// empty until the first fetch. The watermarks are those Assign read (no round trip).
	s.exportLag(func(t string, part int32) (int64, bool) {
		_, hi, err := cons.AssignedWatermarks(t, part, 0)
		return hi, err == nil
	})
	p.lastOK.Store(time.Now().UnixNano())
	p.recovered.Store(true)
	p.setState(Running)
	return s, nil
}

// started adds partitions the session reads from now on, at start: the ledger's offsets (decided,
// or a start position recorded before the partition was read).
func (s *session) started(start partition.Offsets) {
	s.updateDecided(func(decided partition.Offsets) {
		for t, ps := range start {
			for part, off := range ps {
				decided.Set(t, part, off)
				s.positions.Set(t, part, off)
				s.begin.Set(t, part, off)
			}
		}
	})
}

// updateDecided publishes a copy of the decided offsets as fn changes it. The loop (partitions
// added or released) and the checkpoint in flight's completion (committed) both change them, so
// neither may publish a copy made before the other's change.
func (s *session) updateDecided(fn func(partition.Offsets)) {
	s.decidedMu.Lock()
	defer s.decidedMu.Unlock()
	decided := s.decided.Load().Clone()
	fn(decided)
	s.decided.Store(&decided)
}

// close ends the session: subtasks stop and drop their connections, the consumer leaves.
func (s *session) close(cause error) {
	s.fail(cause)
	s.wg.Wait()
	if s.inflight != nil {
		<-s.inflight
	}
	if s.group != nil {
		// The last offsets the publisher had no time for (a drain's final checkpoint): lag tools
		// should see where a stopped job stands.
		select {
		case o := <-s.group:
			s.commitGroup(o)
		default:
		}
	}
	s.cons.Close()
}

// publishGroup commits the latest offsets handed over by committed to the consumer group, one at
// a time, until the session ends.
func (s *session) publishGroup() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case o := <-s.group:
			s.commitGroup(o)
		}
	}
}

func (s *session) commitGroup(o partition.Offsets) {
	commit := s.cons.CommitGroup
	if s.p.Member != nil {
		// Only a member of the group may commit its offsets while the group has members.
		commit = s.p.Member.Commit
	}
	if err := commit(o); err != nil {
		s.p.Log.Named("checkpoint").Warn("publishing offsets to the consumer group failed (lag tooling only)", zap.Error(err))
	}
}

var errSessionEnd = errors.New("session ended")

// undecided names the records read but not decided, per partition as topic/partition@first-last:
// those of the checkpoint in flight and of the epoch being filled. Called by the loop (which owns
// positions).
func (s *session) undecided() string {
	decided := *s.decided.Load()
	var parts []string
	for t, ps := range s.positions {
		for part, next := range ps {
			from, ok := decided.Get(t, part)
			if !ok {
				from, _ = s.begin.Get(t, part)
			}
			if next > from {
				parts = append(parts, fmt.Sprintf("%s/%d@%d-%d", t, part, from, next-1))
			}
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// committed records checkpoint e, cut at cutAt with offsets, once its data is durable in MySQL.
func (s *session) committed(e *epoch, offsets partition.Offsets, cutAt time.Time, tags []string, log *zap.Logger) {
	p := s.p
	now := time.Now()
	p.Metrics.PhaseDuration.WithLabelValues("total").Observe(now.Sub(cutAt).Seconds())
	p.Metrics.VisibilityLatency.Observe(now.Sub(e.firstPoll).Seconds())
	if !e.oldestTS.IsZero() {
		p.Metrics.EndToEndLatency.Observe(max(now.Sub(e.oldestTS), 0).Seconds())
	}
	p.Metrics.Checkpoints.WithLabelValues("committed").Inc()
	p.Metrics.LastCommittedID.Set(float64(e.id))
	p.Metrics.LastCommittedTime.Set(float64(now.UnixNano()) / 1e9)
	p.Metrics.Records.WithLabelValues("ok").Add(float64(e.ok))
	p.Metrics.Records.WithLabelValues("dlq").Add(float64(e.dlqCount))
	p.Metrics.Records.WithLabelValues("skipped").Add(float64(e.skipped))
	for a, table := range p.Plan.Tables() {
		p.Metrics.UpsertedRows.WithLabelValues(table).Add(float64(e.rows[a]))
	}
	p.lastOK.Store(now.UnixNano())
	s.committedAny.Store(true)
	// The checkpoint's cut, over what the loop added since (a partition discovered while it
	// committed is decided at its start).
	s.updateDecided(func(decided partition.Offsets) {
		for t, ps := range offsets {
			for part, off := range ps {
				decided.Set(t, part, off)
			}
		}
		s.tookOver(offsets, now)
	})
	log.Debug("committed", zap.Strings("tags", tags), zap.Duration("duration", now.Sub(cutAt)))
	if s.group != nil {
		// Latest wins: committed runs on one goroutine at a time (one checkpoint in flight), so
		// emptying the slot and filling it cannot race another sender.
		select {
		case <-s.group:
		default:
		}
		s.group <- offsets
	}
}
