// Package pipeline runs one relay job: recovery, the consume loop, and the checkpoint protocol.
//
// Invariants:
//   - One goroutine (the loop) polls Kafka, decodes and aggregates; it alone cuts epochs, so the
//     offsets recorded for checkpoint c are exactly the records folded into c.
//   - At most one checkpoint is in flight; records after its barrier go to epoch c+1 meanwhile.
//   - The ledger row is written only after every participating branch prepared, only before the
//     fence's lease deadline, and XA COMMIT is issued only after that row is durable. Any failure
//     aborts the session: its connections are discarded (and their server sessions ended, should
//     the network have kept them alive) and recovery (the same code as at start-up) rolls back what
//     was not decided and commits what was, then the consumer rewinds to the last decision.
//   - The process leaves Run only for what no restart can cure: another live owner (ErrFenced),
//     bad input under policy fail, data Kafka no longer has, or failures past the bound.
//   - Every statement of the protocol runs under a deadline, so a connection the network
//     blackholed fails the session in bounded time instead of freezing it.
package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
)

// State is the pipeline's lifecycle state.
type State int32

const (
	Starting   State = iota // connecting, taking the fence
	Recovering              // resolving in-doubt branches, seeking offsets
	Running                 // consuming and checkpointing
	Draining                // SIGTERM: final checkpoint
	Stopped                 // exited cleanly
	Failed                  // exited with an error
	Restarting              // a session failed: waiting out the back-off before the next one
)

func (s State) String() string {
	switch s {
	case Starting:
		return "starting"
	case Recovering:
		return "recovering"
	case Running:
		return "running"
	case Draining:
		return "draining"
	case Stopped:
		return "stopped"
	case Failed:
		return "failed"
	case Restarting:
		return "restarting"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ErrBadInput stops the pipeline under bad_input_policy=fail.
var ErrBadInput = fault.Fatal("bad input")

// Deps are the opened resources a pipeline runs on.
type Deps struct {
	Config config.Config
	// Plan is the configuration's pipeline spec, compiled (config.Config.Plan): what a record
	// holds and which aggregate tables it folds into.
	Plan    *spec.Plan
	Log     *zap.Logger
	Metrics *metrics.Metrics
	Sink    *sql.DB
	Ledger  *ledger.Ledger
	// Fence says how to take the job's fence; the pipeline takes it before its first session and
	// again whenever its lock session is lost.
	Fence ledger.FenceConfig
	// NewConsumer opens a consumer for a session (tests may wrap it).
	NewConsumer func() (*consumer.Consumer, error)
}

// Pipeline is one job's runtime.
type Pipeline struct {
	Deps
	state     atomic.Int32
	lastOK    atomic.Int64 // unix nanos of the last committed (or idle) checkpoint
	recovered atomic.Bool
	// sessionFirstID is the first checkpoint id of the live session; the resolver leaves ids at or
	// above it alone.
	sessionFirstID atomic.Int64
	fence          atomic.Pointer[ledger.Fence] // the fence held now (nil between two), for the resolver's epoch
	schema         sink.Schema
	decoder        *spec.Decoder
	held           bool // held mode: partition-affine subtasks, local transactions
	// reported holds the (reason, field) pairs of bad input already logged: the dead-letter row
	// carries only the reason (VARCHAR(32)), so the field a spec's reason is about is logged once.
	reported map[badField]bool
}

type badField struct {
	reason spec.Reason
	field  string
}

// New prepares a pipeline; Run starts it.
func New(d Deps) *Pipeline {
	c := d.Config
	p := &Pipeline{Deps: d, schema: d.Plan.Schema(c.MySQL.DLQTable, c.MySQL.DetailTable),
		decoder: d.Plan.NewDecoder(), held: c.Mode == config.ModeHeld, reported: map[badField]bool{}}
	var reasons []string
	for _, r := range d.Plan.Reasons() {
		reasons = append(reasons, r.String())
	}
	d.Metrics.InitReasons(reasons)
	d.Metrics.InitRestartCauses(fault.Causes)
	return p
}

// State is the current lifecycle state.
func (p *Pipeline) State() State { return State(p.state.Load()) }

func (p *Pipeline) setState(s State) {
	old := State(p.state.Swap(int32(s)))
	if old != s {
		p.Log.Info("state", zap.Stringer("from", old), zap.Stringer("to", s))
	}
}

// Ready reports whether recovery finished and a checkpoint succeeded recently.
func (p *Pipeline) Ready() (bool, string) {
	if !p.recovered.Load() {
		return false, "recovery has not finished"
	}
	if st := p.State(); st != Running {
		return false, "state is " + st.String()
	}
	age := time.Since(time.Unix(0, p.lastOK.Load()))
	if age > p.Config.Checkpoint.ReadyMaxAge {
		return false, fmt.Sprintf("last successful checkpoint %s ago (limit %s)", age.Round(time.Millisecond), p.Config.Checkpoint.ReadyMaxAge)
	}
	return true, "ok"
}

// Run takes the fence, recovers and consumes until ctx ends (then drains and returns nil) or a
// fatal error. A failed session (a checkpoint, a lost connection, a server restart, the fence's
// lock session lost) is torn down and started again in-process through recovery, after a jittered
// back-off, up to the tolerable number of failures in a row without a committed checkpoint.
func (p *Pipeline) Run(ctx context.Context) error {
	var fence *ledger.Fence
	defer func() {
		if fence != nil {
			fence.Release()
		}
	}()
	failures := 0
	serial := false
	ran := false // a session committed a checkpoint
	for {
		committed := false
		err := p.ensureFence(ctx, &fence)
		if err == nil {
			var s *session
			if s, err = p.newSession(ctx, fence, serial); err == nil {
				err = s.run(ctx)
				if committed = s.committedAny.Load(); committed {
					failures = 0
				}
			}
		}
		if err == nil || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
			// Stopped, after the drain or before a session started: the ledger is consistent.
			p.setState(Stopped)
			return nil
		}
		ran = ran || committed
		if ctx.Err() != nil || fatal(err, ran) {
			p.setState(Failed)
			return err
		}
		failures++
		cause := fault.Cause(err)
		p.Metrics.Restarts.WithLabelValues(cause).Inc()
		var ce *checkpointError
		if errors.As(err, &ce) {
			p.Metrics.Checkpoints.WithLabelValues("failed").Inc()
		}
		// Lock conflicts between this checkpoint's own branches repeat when the same records are
		// replayed in parallel; one connection cannot conflict with itself. A replay still owed
		// stays owed through failures before it (MySQL still restarting) until a session commits.
		serial = !p.held && ((serial && !committed) || errors.Is(err, errPeerLock) || fault.LockConflict(err))
		if failures > p.Config.Checkpoint.TolerableFailures {
			p.setState(Failed)
			return fmt.Errorf("%d consecutive failures without a committed checkpoint, last: %w", failures, err)
		}
		p.setState(Restarting)
		wait := restartPolicy.Backoff(failures)
		p.Log.Warn("session failed; restarting in-process through recovery", zap.String("cause", cause),
			zap.Int("consecutive_failures", failures), zap.Duration("backoff", wait), zap.Error(err))
		if restartPolicy.Sleep(ctx, wait) != nil {
			// Stopped while waiting to restart: the ledger holds a consistent state to resume from.
			p.setState(Stopped)
			return nil
		}
	}
}

// restartPolicy spaces in-process restarts; the number of them is Checkpoint.TolerableFailures.
var restartPolicy = fault.Policy{Initial: 200 * time.Millisecond, Max: 10 * time.Second, Sleep: fault.SleepContext}

// errFenceLost: the lease could not be renewed (the lock session died or hung). The fence is
// taken again before the next session, by the lease rule when the server still holds the old one.
var errFenceLost = fault.Classed("fence_lost", "fence lock session lost")

// fatal reports whether err ends the process: a Fatal sentinel always; a Permanent condition
// (a topic missing, a resume offset outside the topic) at start, before any session committed.
// Once the job ran, such a condition may be a broker that just restarted answering too early, so
// it is restarted like any failure, within the same bound.
func fatal(err error, ran bool) bool {
	return fault.IsFatal(err) || (fault.IsPermanent(err) && !ran)
}

// ensureFence leaves *f a live fence: the one held, or a new one when its lock session was lost.
func (p *Pipeline) ensureFence(ctx context.Context, f **ledger.Fence) error {
	prev := *f
	if prev != nil {
		select {
		case <-prev.Lost():
		default:
			if time.Now().Before(prev.Deadline()) {
				return nil
			}
			// Not renewed in time (the process froze, or renewals hang): the job may be another's
			// by now; take the fence again rather than recover under a lease that may be gone.
		}
		p.fence.Store(nil)
		prev.Release()
		*f = nil
	}
	p.setState(Starting)
	cfg := p.Fence
	cfg.Prev = prev
	// The lock session just dropped (or an older one of this process) may be alive on the
	// server: ending it first frees the lock at once.
	if err := p.endZombies(ctx); err != nil {
		return err
	}
	// Bounded: waiting out a vanished owner's lease, then ending its sessions.
	actx, cancel := context.WithTimeout(ctx, cfg.EffectiveLease()+time.Minute)
	defer cancel()
	fence, err := ledger.Acquire(actx, p.Ledger, cfg)
	if err != nil {
		return err
	}
	log := p.Log.Named("fence")
	if t := fence.TookOver; t != nil {
		from := "expired_lease"
		if t.Own {
			from = "own"
		}
		p.Metrics.FenceTakeovers.WithLabelValues(from).Inc()
		log.Warn("took the job over", zap.String("from", from), zap.String("previous_owner", t.Owner),
			zap.Int64("previous_epoch", t.Epoch), zap.Duration("lease_expired_for", t.ExpiredFor),
			zap.Duration("waited", t.WaitedLease), zap.Int64s("sessions_ended", t.Killed))
	}
	log.Info("job fenced", zap.Int64("owner_epoch", fence.Epoch))
	*f = fence
	p.fence.Store(fence)
	return nil
}

// checkpointError marks the failure of a checkpoint (counted as relay_checkpoints_total{result=
// "failed"}), as opposed to one of recovery or of the fence; both restart the session alike.
type checkpointError struct{ err error }

func (e *checkpointError) Error() string { return e.err.Error() }
func (e *checkpointError) Unwrap() error { return e.err }

// epoch is the in-memory state of one checkpoint being filled.
type epoch struct {
	id        int64
	tables    []*spec.Tables // one per subtask, every aggregate
	dlq       [][]sink.DLQRow
	details   [][]sink.DetailRow
	records   int64
	ok        int64
	dlqCount  int64
	skipped   int64
	firstPoll time.Time
	oldestTS  time.Time // oldest Kafka timestamp folded in (zero when the records carry none)
	// serial routes every row to subtask 0: the replay of an epoch that failed on a lock
	// conflict, possibly between its own subtasks (one branch cannot wait for itself).
	serial bool
}

func (p *Pipeline) newEpoch(id int64) *epoch {
	n := p.Config.Subtasks
	e := &epoch{id: id, tables: make([]*spec.Tables, n), dlq: make([][]sink.DLQRow, n), details: make([][]sink.DetailRow, n)}
	for i := range e.tables {
		e.tables[i] = p.Plan.NewTables()
	}
	return e
}

func (e *epoch) empty() bool { return e.records == 0 }

// session is one consumer plus N subtasks between two recoveries.
type session struct {
	p            *Pipeline
	fence        *ledger.Fence
	ctx          context.Context // ends when the session fails
	fail         context.CancelCauseFunc
	cons         *consumer.Consumer
	subs         []*subtask
	wg           sync.WaitGroup
	positions    ledger.Offsets                 // next offset per partition, as of the records folded so far
	decided      atomic.Pointer[ledger.Offsets] // offsets of the last decided checkpoint
	cur          *epoch
	inflight     chan error // result of the checkpoint in flight; nil when none
	lastEnd      time.Time
	lastRecord   time.Time // when the last batch of records arrived
	committedAny atomic.Bool
	blockLast    int64 // last checkpoint id of the block reserved for this session
}

func (p *Pipeline) newSession(ctx context.Context, fence *ledger.Fence, serial bool) (*session, error) {
	p.setState(Recovering)
	p.recovered.Store(false)
	p.Metrics.Recoveries.Inc()
	p.Metrics.PendingTransactions.Set(0)
	rctx, cancel := context.WithTimeout(ctx, p.Config.Checkpoint.RestartAllowance)
	defer cancel()
	if err := p.endZombies(rctx); err != nil {
		return nil, err
	}
	rec, from, err := p.recover(rctx, fence)
	if err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	cons, err := p.NewConsumer()
	if err != nil {
		return nil, err
	}
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
	s := &session{p: p, fence: fence, cons: cons, positions: start, cur: p.newEpoch(first), blockLast: last}
	if serial {
		s.cur.serial = true
		p.Log.Warn("replaying from the last decision with one sink connection for the first checkpoint",
			zap.Int64("checkpoint", first), zap.String("why", "the failed checkpoint hit a lock conflict (its subtasks waiting for each other, a lock wait timeout or a deadlock)"))
	}
	decided := start.Clone()
	if p.held {
		// Only what the ledger holds is decided: a partition started from the configured position
		// must get its offset row at the first checkpoint, or a restart would re-resolve "latest".
		decided = from.Clone()
	}
	s.decided.Store(&decided)
	s.ctx, s.fail = context.WithCancelCause(context.Background())
	var peers *peerConns
	if !p.held {
		peers = &peerConns{}
	}
	for i := 0; i < p.Config.Subtasks; i++ {
		global := p.Config.InstanceIndex()*p.Config.Subtasks + i
		st := newSubtask(i, global, p.Config.Job.Name, p.Sink, p.schema, p.Plan, p.Config.MySQL.BatchRows, p.Config.MySQL.LockWait/5, peers, p.Log.Named("subtask"), p.Metrics)
		if p.held {
			st.held, st.fence = p.Ledger, fence
		}
		s.subs = append(s.subs, st)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := st.run(s.ctx); err != nil {
				if !errors.Is(err, ledger.ErrFenced) {
					err = &checkpointError{err}
				}
				s.fail(err)
			}
		}()
	}
	p.Log.Info("recovered", zap.Int64("resume_checkpoint", first), zap.Int("committed", rec.Committed),
		zap.Int("rolled_back", rec.RolledBack), zap.Int("left_to_resolver", rec.Skipped), zap.Any("offsets", start))
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

// endZombies ends the server sessions of connections this process dropped: when the network cut
// them off the server keeps them, and with them the locks and attached branches that recovery
// must resolve.
func (p *Pipeline) endZombies(ctx context.Context) error {
	for _, pool := range p.Fence.Pools {
		killed, err := pool.Sessions.KillZombies(ctx, pool.DB)
		if err != nil {
			return fmt.Errorf("end dropped sessions: %w", err)
		}
		if len(killed) > 0 {
			p.Log.Named("recovery").Warn("ended server sessions of dropped connections", zap.String("pool", pool.Name), zap.Int64s("sessions", killed))
		}
	}
	return nil
}

// recover finishes what earlier runs left and returns where to resume. XA mode resolves in-doubt
// branches from the ledger; held mode has nothing in doubt: each partition's committed offset is
// exactly what its committed data covers.
func (p *Pipeline) recover(ctx context.Context, fence *ledger.Fence) (Recovered, ledger.Offsets, error) {
	var rec Recovered
	if !p.held {
		var err error
		if rec, err = Recover(ctx, p.Ledger, fence.Epoch, p.Sink, p.Log.Named("recovery"), p.Metrics, metrics.OriginRecovery); err != nil {
			return rec, nil, err
		}
	}
	offs, maxID, err := p.Ledger.PartitionOffsets(ctx)
	if err != nil {
		return rec, nil, err
	}
	if maxID > 0 {
		p.Metrics.LastCommittedID.Set(float64(maxID))
	}
	rec.NextID = max(rec.NextID, maxID+1)
	return rec, offs, nil
}

// close ends the session: subtasks stop and drop their connections, the consumer leaves.
func (s *session) close(cause error) {
	s.fail(cause)
	s.wg.Wait()
	if s.inflight != nil {
		<-s.inflight
	}
	s.cons.Close()
}

var errSessionEnd = errors.New("session ended")

func (s *session) run(ctx context.Context) (err error) {
	defer func() {
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
	// The barrier is checked after every event; this keeps an idle loop checking it too.
	wake := time.NewTicker(10 * time.Millisecond)
	defer wake.Stop()
	batches := make(chan polled, 4)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.poll(batches)
	}()
	var rec spec.Record
	for {
		select {
		case <-ctx.Done():
			return s.drain()
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		case <-s.fence.Lost():
			return errFenceLost
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
			for t, ps := range added {
				for part, off := range ps {
					s.positions.Set(t, part, off)
				}
			}
		case <-lagEvery.C:
			s.exportLag(s.cons.HighWatermark)
		case <-wake.C:
		case b := <-batches:
			s.lastRecord = time.Now()
			// Whole batches only: a barrier falls between two records, never inside the fold of one.
			for _, msg := range b.msgs {
				if err := s.fold(msg, &rec); err != nil {
					return err
				}
			}
			if b.err != nil {
				return b.err
			}
		}
		if s.inflight == nil && (!time.Now().Before(nextCut) || s.idle()) {
			if err := s.cut(); err != nil {
				return err
			}
			nextCut = time.Now().Add(cfg.Checkpoint.Interval)
		}
	}
}

// idle says the input paused with records read since the last cut: they need not wait for the
// interval. The minimum pause still holds.
func (s *session) idle() bool {
	cp := s.p.Config.Checkpoint
	now := time.Now()
	return cp.IdleAfter > 0 && !s.cur.empty() && now.Sub(s.lastRecord) >= cp.IdleAfter &&
		!now.Before(s.lastEnd.Add(cp.MinPause))
}

// polled is a batch of records in the order librdkafka delivered them, and the error that ended it.
type polled struct {
	msgs []*kafka.Message
	err  error
}

// poll runs on its own goroutine so that librdkafka's Poll (a cgo call per record) and the fold
// use two cores. It stops with the session; the session closes the consumer only after it returned.
// A batch is what librdkafka has queued once a record arrived: only the first Poll waits. (Waiting
// until a batch is full held a slow topic's records back: at 200 records/s, 256 of them took
// 1.3 s, unseen by the visibility histogram, which starts at the fold.)
func (s *session) poll(out chan<- polled) {
	for s.ctx.Err() == nil {
		b := polled{msgs: make([]*kafka.Message, 0, 256)}
		wait := 20 * time.Millisecond
		for len(b.msgs) < cap(b.msgs) {
			msg, err := s.cons.Poll(wait)
			if err != nil {
				b.err = err
				break
			}
			if msg == nil {
				break
			}
			b.msgs = append(b.msgs, msg)
			wait = 0
		}
		if len(b.msgs) == 0 && b.err == nil {
			continue
		}
		select {
		case out <- b:
		case <-s.ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
	}
}

// fold decodes one record into the current epoch.
func (s *session) fold(msg *kafka.Message, rec *spec.Record) error {
	p := s.p
	e := s.cur
	tp := msg.TopicPartition
	s.positions.Set(*tp.Topic, tp.Partition, int64(tp.Offset)+1)
	if e.records == 0 {
		e.firstPoll = time.Now()
	}
	e.records++
	if ts := msg.Timestamp; !ts.IsZero() && (e.oldestTS.IsZero() || ts.Before(e.oldestTS)) {
		e.oldestTS = ts
	}
	// Held mode keeps each partition on one subtask: its offsets commit with its rows.
	owner := int(tp.Partition) % len(s.subs)
	if e.serial {
		owner = 0
	}
	reason, field := p.decoder.Decode(msg.Value, rec)
	if reason == spec.OK {
		// Every aggregate's keys are routed among the subtasks by their encoded primary key; held
		// mode and a serial replay give the fold only the owner's tables.
		tables := e.tables
		if p.held || e.serial {
			tables = e.tables[owner : owner+1]
		}
		p.Plan.Fold(rec, tables)
		e.ok++
		if p.schema.Detail != "" {
			// The append sink exists only with the default spec (config refuses it next to a
			// pipeline block), whose fields are order_id, sku and amount in this order.
			e.details[owner] = append(e.details[owner], sink.DetailRow{OrderID: string(rec.Vals[0].Bytes), SKU: string(rec.Vals[1].Bytes),
				Amount: rec.Vals[2].Int, TS: rec.TS, Topic: *tp.Topic, Partition: tp.Partition, Offset: int64(tp.Offset)})
			if len(e.details[owner]) >= 4*p.Config.MySQL.BatchRows {
				d := e.details[owner]
				e.details[owner] = nil
				if err := s.send(owner, batch{epoch: e.id, details: d}); err != nil {
					return err
				}
			}
		}
		// Held mode flushes aggregates only at the barrier: one sorted pass per transaction keeps
		// row locks ordered across subtasks that share keys, so they cannot deadlock.
		if p.held {
			return nil
		}
		for i, t := range e.tables {
			if t.Keys() >= p.Config.Checkpoint.BufferKeys {
				e.tables[i] = p.Plan.NewTables()
				if err := s.send(i, batch{epoch: e.id, table: t}); err != nil {
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
			zap.String("topic", *tp.Topic), zap.Int32("partition", tp.Partition), zap.Int64("offset", int64(tp.Offset)))
	}
	p.Metrics.BadRecords.WithLabelValues(reason.String()).Inc()
	switch p.Config.Input.BadInputPolicy {
	case "skip":
		e.skipped++
		return nil
	case "fail":
		return fmt.Errorf("%w: %s at %s/%d@%d", ErrBadInput, reason, *tp.Topic, tp.Partition, tp.Offset)
	}
	payload := msg.Value
	if len(payload) > p.Config.Input.DLQPayloadBytes {
		payload = payload[:p.Config.Input.DLQPayloadBytes]
	}
	i := owner
	e.dlq[i] = append(e.dlq[i], sink.DLQRow{Topic: *tp.Topic, Partition: tp.Partition, Offset: int64(tp.Offset),
		Reason: reason.String(), Payload: append([]byte(nil), payload...), Size: len(msg.Value)})
	e.dlqCount++
	return nil
}

// send hands a batch to a subtask, waiting while it is busy (back-pressure on the consume loop).
func (s *session) send(i int, b batch) error {
	select {
	case s.subs[i].data <- b:
		return nil
	case <-s.ctx.Done():
		return context.Cause(s.ctx)
	}
}

// cut closes the current epoch at the barrier and starts its checkpoint.
func (s *session) cut() error {
	e := s.cur
	if e.empty() {
		// Nothing new: no ledger row, no transaction; the job is idle, not stale.
		s.p.lastOK.Store(time.Now().UnixNano())
		s.p.Metrics.Checkpoints.WithLabelValues("empty").Inc()
		s.p.Metrics.LastCommittedTime.SetToCurrentTime()
		return nil
	}
	cp := &pending{e: e, offsets: s.positions.Clone(), cutAt: time.Now(),
		replies: make(chan prepared, len(s.subs))}
	for i := range s.subs {
		b := batch{epoch: e.id, table: e.tables[i], dlq: e.dlq[i], details: e.details[i], prepare: cp.replies}
		if s.p.held {
			b.offsets = s.advanced(cp.offsets, i)
		}
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
		err := s.complete(cp)
		if err != nil {
			// Fail the session at once: the loop may be blocked on a subtask that waits for a decision.
			s.fail(err)
		}
		done <- err
	}()
	return nil
}

// advanced returns the offsets of subtask i's partitions that moved since the last decision.
func (s *session) advanced(cut ledger.Offsets, i int) ledger.Offsets {
	prev := *s.decided.Load()
	out := ledger.Offsets{}
	for t, ps := range cut {
		for part, off := range ps {
			if int(part)%len(s.subs) != i {
				continue
			}
			if old, ok := prev.Get(t, part); !ok || old != off {
				out.Set(t, part, off)
			}
		}
	}
	return out
}

// pending is a checkpoint past its barrier.
type pending struct {
	e       *epoch
	offsets ledger.Offsets
	cutAt   time.Time
	replies chan prepared
}

// complete runs preCommit → decide → commit for one checkpoint.
func (s *session) complete(cp *pending) error {
	p := s.p
	cfg := p.Config
	log := p.Log.Named("checkpoint").With(zap.Int64("checkpoint", cp.e.id))
	tctx, cancel := context.WithTimeout(s.ctx, cfg.Checkpoint.Timeout)
	defer cancel()

	var tags []string
	var participants []*subtask
	var flushMax, prepMax time.Duration
	for range s.subs {
		select {
		case r := <-cp.replies:
			if r.err != nil {
				return &checkpointError{fmt.Errorf("checkpoint %d: prepare: %w", cp.e.id, r.err)}
			}
			flushMax, prepMax = max(flushMax, r.flush), max(prepMax, r.prep)
			if r.tag != "" {
				tags = append(tags, r.tag)
				participants = append(participants, s.subs[r.subtask])
			}
		case <-tctx.Done():
			return &checkpointError{fmt.Errorf("checkpoint %d: prepare: %w", cp.e.id, context.Cause(tctx))}
		}
	}
	p.Metrics.PhaseDuration.WithLabelValues("flush").Observe(flushMax.Seconds())
	if p.held {
		// Each subtask's COMMIT was its own decision; all of them succeeded.
		crashpoint.Hit(crashpoint.AfterCommit)
		s.committed(cp, tags, log)
		return nil
	}
	p.Metrics.PhaseDuration.WithLabelValues("prepare").Observe(prepMax.Seconds())
	crashpoint.Hit(crashpoint.AfterPrepare)

	t := time.Now()
	// Decide only while the lease surely holds: past the deadline another process may be taking
	// the job over (its epoch bump would fail this write anyway; this keeps the old owner quiet).
	deadline := s.fence.Deadline()
	if !t.Before(deadline) {
		return &checkpointError{fmt.Errorf("checkpoint %d: decide: %w: lease not renewed since %s", cp.e.id, errFenceLost, deadline.Format(time.RFC3339Nano))}
	}
	dctx, dcancel := context.WithDeadline(tctx, deadline)
	err := p.Ledger.Decide(dctx, s.fence.Epoch, ledger.Checkpoint{ID: cp.e.id, Tags: tags, Offsets: cp.offsets, Records: cp.e.records})
	dcancel()
	if errors.Is(err, ledger.ErrFenced) {
		return err
	}
	if err != nil {
		// The decision may or may not have committed: recovery reads the verdict and acts on it.
		return &checkpointError{err}
	}
	p.Metrics.PhaseDuration.WithLabelValues("decide").Observe(time.Since(t).Seconds())
	log.Debug("decided", zap.Strings("tags", tags), zap.Int64("records", cp.e.records))
	crashpoint.Hit(crashpoint.AfterDecide)

	// From here the checkpoint is committed; failures only delay it (recovery finishes the commit,
	// from XA RECOVER and the ledger, never by retrying a COMMIT whose reply was lost). The
	// commit phase gets a deadline of its own so that a blackholed connection cannot hold it.
	cctx, ccancel := context.WithTimeout(s.ctx, cfg.Checkpoint.Timeout)
	defer ccancel()
	t = time.Now()
	// The first branch commits alone, the rest together: a death in between leaves the state the
	// between-commits crash point tests (some committed, some prepared, the decision durable).
	for i := 0; i < len(participants); {
		group := participants[i:min(i+1, len(participants))]
		if i > 0 {
			group = participants[i:]
		}
		if err := s.commitGroup(cctx, group); err != nil {
			return &checkpointError{fmt.Errorf("checkpoint %d: commit: %w", cp.e.id, err)}
		}
		if i == 0 && len(participants) > 1 {
			crashpoint.Hit(crashpoint.BetweenCommits)
		}
		i += len(group)
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	if err := p.Ledger.MarkCommitted(cctx, cp.e.id); err != nil {
		return &checkpointError{err}
	}
	p.Metrics.PhaseDuration.WithLabelValues("commit").Observe(time.Since(t).Seconds())
	s.committed(cp, tags, log)
	if cp.e.id%100 == 0 {
		if err := p.Ledger.Prune(cctx, cp.e.id, 1000); err != nil {
			log.Warn("ledger prune failed", zap.Error(err))
		}
	}
	return nil
}

// committed records a checkpoint whose data is durable in MySQL.
func (s *session) committed(cp *pending, tags []string, log *zap.Logger) {
	p := s.p
	now := time.Now()
	p.Metrics.PhaseDuration.WithLabelValues("total").Observe(now.Sub(cp.cutAt).Seconds())
	p.Metrics.VisibilityLatency.Observe(now.Sub(cp.e.firstPoll).Seconds())
	if !cp.e.oldestTS.IsZero() {
		p.Metrics.EndToEndLatency.Observe(max(now.Sub(cp.e.oldestTS), 0).Seconds())
	}
	p.Metrics.Checkpoints.WithLabelValues("committed").Inc()
	p.Metrics.LastCommittedID.Set(float64(cp.e.id))
	p.Metrics.LastCommittedTime.Set(float64(now.UnixNano()) / 1e9)
	p.Metrics.Records.WithLabelValues("ok").Add(float64(cp.e.ok))
	p.Metrics.Records.WithLabelValues("dlq").Add(float64(cp.e.dlqCount))
	p.Metrics.Records.WithLabelValues("skipped").Add(float64(cp.e.skipped))
	p.lastOK.Store(now.UnixNano())
	s.committedAny.Store(true)
	s.decided.Store(&cp.offsets)
	log.Debug("committed", zap.Strings("tags", tags), zap.Duration("duration", now.Sub(cp.cutAt)))
	if p.Config.Kafka.CommitGroupOffsets {
		if err := s.cons.CommitGroup(cp.offsets); err != nil {
			log.Warn("publishing offsets to the consumer group failed (lag tooling only)", zap.Error(err))
		}
	}
}

// commitGroup commits the prepared branches of subs in parallel, each on its own connection,
// within ctx's deadline.
func (s *session) commitGroup(ctx context.Context, subs []*subtask) error {
	done := make(chan error, len(subs))
	deadline, _ := ctx.Deadline()
	for _, st := range subs {
		st.ctrl <- decision{commit: true, done: done, deadline: deadline}
	}
	for range subs {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// drain runs the final checkpoint on SIGTERM: finish the one in flight, then commit what was read.
func (s *session) drain() error {
	s.p.setState(Draining)
	wait := func() error {
		if s.inflight == nil {
			return nil
		}
		err := <-s.inflight
		s.inflight = nil
		return err
	}
	if err := wait(); err != nil {
		return err
	}
	if err := s.cut(); err != nil {
		return err
	}
	if err := wait(); err != nil {
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
