// Subtask: one sink writer, its connection and its transaction per epoch (the protocol's: an XA
// branch, or in held mode a local transaction).
//
// Invariants: a subtask opens its transaction lazily, on the first write of an epoch, so an epoch
// with nothing to write leaves no branch; writes, the barrier and the decision for one epoch
// arrive in order on one goroutine; while a branch is prepared the subtask takes nothing but the
// decision (MariaDB cannot start another transaction on a connection holding a prepared one, and
// must commit it on that same connection). What the barrier does is the protocol's (xa.go,
// held.go).
//
// Subtasks write disjoint rows, yet InnoDB can make one wait for another: when a page splits, the
// record locks on the first row of the new right page are inherited as a gap lock on the left
// page's supremum, so a subtask inserting a new key just before a row another subtask updated
// waits for that subtask, whose transaction only ends after every branch prepared. InnoDB sees no
// deadlock (the holder is idle), only a lock wait that can never be granted. A subtask whose
// statement waits for a peer of the same checkpoint ends it (KILL of its own connection) and fails
// the checkpoint with errPeerLock; the pipeline then replays the epoch on one connection.
package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/xa"
)

// batch is work for one subtask in one epoch: rows to write and, at the barrier, the order to prepare.
type batch struct {
	epoch   int64
	table   *spec.Tables
	dlq     []sink.DLQRow
	details []sink.DetailRow
	offsets ledger.Offsets  // at the barrier: what the subtask commits with its rows (protocol.barrierOffsets)
	prepare chan<- prepared // non-nil at the barrier
}

// prepared is a subtask's answer to the barrier.
type prepared struct {
	subtask int
	tag     string // empty when the subtask had nothing to write in the epoch
	err     error
	flush   time.Duration
	prep    time.Duration
}

// txn is a subtask's transaction of one epoch: *xa.Branch, or *heldTxn in held mode.
type txn interface {
	Tag() string
	State() xa.State
	ConnID() int64
	Start(ctx context.Context, tag string) error
	Exec(ctx context.Context, q string, args ...any) error
	Prepare(ctx context.Context) error
	Commit(ctx context.Context) error
	Close()
}

// decision commits the prepared branch on its own connection. (An undecided branch is never
// rolled back here: the session fails, drops the connection and recovery rolls it back.)
type decision struct {
	done     chan<- error
	deadline time.Time // the statement's; zero: none
}

type subtask struct {
	idx    int // index within this process
	global int // index across every instance of the job: names the tag
	job    string
	db     *sql.DB
	schema sink.Schema
	plan   *spec.Plan
	rows   int // rows per statement
	data   chan batch
	ctrl   chan decision
	branch txn
	buf    []byte
	log    *zap.Logger
	m      *metrics.Metrics
	// lockReport: a statement still running after this long has the lock it waits for explained in
	// the log, while the wait lasts (afterwards the server no longer says who held it).
	lockReport time.Duration
	// peers are the sink connections of this session's subtasks and the epoch each one's open
	// branch belongs to: a lock held by a peer's branch of the same epoch can never be granted
	// before that epoch ends (a peer's branch of an earlier epoch commits without waiting for us).
	peers *peerConns
	peer  *peerState    // this subtask's entry in peers
	proto protocol      // opens the transaction and ends it at the barrier
	fence *ledger.Fence // the session's: a barrier that decides (held mode's COMMIT) does so under it
}

func newSubtask(idx, global int, job string, db *sql.DB, schema sink.Schema, plan *spec.Plan, rows int, lockReport time.Duration,
	proto protocol, peers *peerConns, fence *ledger.Fence, log *zap.Logger, m *metrics.Metrics) *subtask {
	return &subtask{idx: idx, global: global, job: job, db: db, schema: schema, plan: plan, rows: rows,
		data: make(chan batch, 4), ctrl: make(chan decision, 1), lockReport: lockReport, proto: proto, peers: peers,
		fence: fence, log: log.With(zap.Int("subtask", global)), m: m}
}

// commit is the coordinator's order, once the checkpoint is decided, to commit the prepared branch.
func (s *subtask) commit(deadline time.Time, done chan<- error) {
	s.ctrl <- decision{done: done, deadline: deadline}
}

// errPeerLock: a subtask's statement waited for a row lock held by another subtask of the same
// checkpoint (see the file comment); the checkpoint cannot finish as it is.
var errPeerLock = fault.Classed("lock_conflict", "row lock held by another subtask of the same checkpoint")

// peerConns maps the server connection ids of a session's subtasks to their state.
type peerConns struct{ m sync.Map }

// peerState is one subtask's: its index, and the epoch of its open branch (0: none).
type peerState struct {
	subtask int
	epoch   atomic.Int64
}

// add records a subtask's connection; a nil set (a protocol whose peers' locks are released by
// their own COMMIT at the barrier) records nothing and returns a state nobody reads.
func (p *peerConns) add(conn int64, subtask int) *peerState {
	st := &peerState{subtask: subtask}
	if p != nil {
		p.m.Store(conn, st)
	}
	return st
}

func (p *peerConns) lookup(conn int64) (*peerState, bool) {
	if p == nil {
		return nil, false
	}
	v, ok := p.m.Load(conn)
	if !ok {
		return nil, false
	}
	return v.(*peerState), true
}

// peerCheck is how long a statement runs before the subtask looks at what it waits for.
const peerCheck = time.Second

// run serves batches until ctx ends or a write fails. On return the connection is released, and
// discarded if it holds a transaction: the server then rolls back an active branch and keeps a
// prepared one for recovery.
func (s *subtask) run(ctx context.Context) error {
	defer func() {
		if s.branch != nil {
			if st := s.branch.State(); st != xa.Idle {
				s.log.Info("releasing connection with open branch", zap.String("tag", s.branch.Tag()), zap.Stringer("state", st))
			}
			s.branch.Close()
		}
	}()
	for {
		var b batch
		select {
		case <-ctx.Done():
			return nil
		case b = <-s.data:
		}
		start := time.Now()
		err := s.write(ctx, b)
		if b.prepare == nil {
			if err != nil {
				return err
			}
			continue
		}
		r := prepared{subtask: s.idx, flush: time.Since(start)}
		waits := false
		if err == nil {
			waits, err = s.proto.barrier(ctx, s, b, &r)
		}
		r.err = err
		b.prepare <- r
		if err != nil {
			return err
		}
		if !waits {
			continue
		}
		var d decision
		select {
		case <-ctx.Done():
			return nil
		case d = <-s.ctrl:
		}
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if !d.deadline.IsZero() {
			dctx, cancel = context.WithDeadline(ctx, d.deadline)
		}
		err = s.commitBranch(dctx, b.epoch)
		cancel()
		d.done <- err
		if err != nil {
			return err
		}
	}
}

// commitBranch commits the prepared branch of epoch, as the decision says.
func (s *subtask) commitBranch(ctx context.Context, epoch int64) error {
	tag := s.branch.Tag()
	if err := s.branch.Commit(ctx); err != nil {
		s.log.Warn("branch resolution failed; recovery will finish it", zap.String("tag", tag),
			zap.Int64("checkpoint", epoch), zap.String("action", "commit"), zap.Error(err))
		return err
	}
	s.peer.epoch.Store(0)
	s.m.PendingTransactions.Dec()
	s.m.Transactions.WithLabelValues("commit", metrics.OriginNormal).Inc()
	s.log.Debug("commit", zap.String("tag", tag), zap.Int64("checkpoint", epoch))
	return nil
}

// write flushes one batch into the epoch's transaction, opening it on first use.
func (s *subtask) write(ctx context.Context, b batch) error {
	hasRows := b.table != nil && b.table.Keys() > 0
	if !hasRows && len(b.dlq) == 0 && len(b.details) == 0 {
		return nil
	}
	if err := s.begin(ctx, b.epoch); err != nil {
		return err
	}
	// Aggregates in spec order, each one's rows in primary-key order: every transaction takes its
	// row locks in the same order, table by table.
	for a := range s.plan.Tables() {
		if !hasRows {
			break
		}
		rows := b.table.Drain(a)
		for i := 0; i < len(rows); i += s.rows {
			j := min(i+s.rows, len(rows))
			s.buf = s.plan.AppendUpsert(s.buf[:0], a, rows[i:j])
			if err := s.exec(ctx, b.epoch); err != nil {
				return fmt.Errorf("subtask %d: %s: %w", s.global, s.plan.Tables()[a], err)
			}
		}
	}
	for i := 0; i < len(b.details); i += s.rows {
		j := min(i+s.rows, len(b.details))
		s.buf = s.schema.AppendDetailInsert(s.buf[:0], b.details[i:j])
		if err := s.exec(ctx, b.epoch); err != nil {
			return fmt.Errorf("subtask %d: detail rows: %w", s.global, err)
		}
	}
	for i := 0; i < len(b.dlq); i += s.rows {
		j := min(i+s.rows, len(b.dlq))
		s.buf = s.schema.AppendDLQInsert(s.buf[:0], s.job, b.epoch, b.dlq[i:j])
		if err := s.exec(ctx, b.epoch); err != nil {
			return fmt.Errorf("subtask %d: dead-letter rows: %w", s.global, err)
		}
	}
	return nil
}

// exec runs the statement in s.buf inside epoch's transaction. While it runs longer than
// peerCheck, its lock waits are watched.
func (s *subtask) exec(ctx context.Context, epoch int64) error {
	tag, conn := s.branch.Tag(), s.branch.ConnID()
	wctx, stop := context.WithCancel(ctx)
	var blocked string // written by the watcher before done closes, read only after
	done := make(chan struct{})
	t := time.AfterFunc(peerCheck, func() {
		defer close(done)
		blocked = s.watchLocks(wctx, tag, epoch, conn)
	})
	err := s.branch.Exec(ctx, string(s.buf))
	stop()
	if !t.Stop() {
		<-done
	}
	if msg := blocked; msg != "" {
		// Even a statement that finished just before the KILL is failed: its connection was
		// killed (or, if the KILL failed, is discarded when the subtask returns).
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errPeerLock, msg, err)
		}
		return fmt.Errorf("%w: %s", errPeerLock, msg)
	}
	return err
}

// watchLocks looks at the lock waits of the statement on connection conn, which writes epoch,
// every second until ctx ends. A wait for a peer's branch of the same epoch ends the statement at
// once (KILL of the waiting connection: the server rolls its transaction back) and is returned as
// a description; other blockers are logged once the wait passed lockReport. A blocker without a
// session is a prepared branch nobody resolved yet: its locks stay until recovery or the resolver
// (or an operator, for another job's branch) finishes it.
func (s *subtask) watchLocks(ctx context.Context, tag string, epoch, conn int64) string {
	start := time.Now().Add(-peerCheck)
	reported, unreadable := false, false
	for ctx.Err() == nil {
		bs, err := database.Blockers(ctx, s.db, conn)
		due := time.Since(start) >= s.lockReport
		if err != nil && ctx.Err() == nil && due && !unreadable {
			unreadable = true
			s.log.Warn("statement slow; cannot read its lock waits", zap.String("tag", tag), zap.Int64("connection", conn), zap.Error(err))
		}
		for _, b := range bs {
			if peer, ok := s.peers.lookup(b.Thread); ok && b.Thread != conn && peer.epoch.Load() == epoch {
				msg := fmt.Sprintf("subtask %d (connection %d) holds a lock subtask %d (connection %d) waits for", peer.subtask, b.Thread, s.global, conn)
				s.log.Warn("row lock held by another subtask of this checkpoint; ending the statement to replay the epoch on one connection",
					zap.String("tag", tag), zap.Int64("checkpoint", epoch), zap.Int64("connection", conn),
					zap.Int("blocker_subtask", peer.subtask), zap.Int64("blocker_connection", b.Thread))
				kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if _, err := s.db.ExecContext(kctx, fmt.Sprintf("KILL %d", conn)); err != nil {
					s.log.Warn("ending the waiting statement failed", zap.String("tag", tag), zap.Int64("connection", conn), zap.Error(err))
				}
				cancel()
				return msg
			}
		}
		if len(bs) > 0 && due && !reported {
			reported = true
			for _, b := range bs {
				s.log.Warn("waiting for a row lock", zap.String("tag", tag), zap.Int64("connection", conn),
					zap.String("blocker_trx", b.TrxID), zap.Int64("blocker_connection", b.Thread),
					zap.Bool("blocker_detached", b.Thread == 0), zap.String("blocker_state", b.State),
					zap.Time("blocker_started", b.Started), zap.Int64("blocker_rows_locked", b.RowsLocked),
					zap.String("blocker_query", b.Query))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return ""
}

func (s *subtask) begin(ctx context.Context, epoch int64) error {
	tag := config.Tag(s.job, epoch, s.global)
	if s.branch != nil && s.branch.State() == xa.Active {
		if s.branch.Tag() == tag {
			return nil
		}
		return fmt.Errorf("subtask %d: branch %s still active at epoch %d", s.global, s.branch.Tag(), epoch)
	}
	if s.branch == nil || s.branch.State() == xa.Broken {
		b, err := s.proto.newTxn(ctx, s.db)
		if err != nil {
			return fmt.Errorf("subtask %d: connect: %w", s.global, err)
		}
		s.branch = b
		s.peer = s.peers.add(b.ConnID(), s.global)
		s.log.Info("sink connection opened", zap.Int64("connection", b.ConnID()))
	}
	if err := s.branch.Start(ctx, tag); err != nil {
		return err
	}
	s.peer.epoch.Store(epoch)
	s.log.Debug("begin", zap.String("tag", tag), zap.Int64("checkpoint", epoch))
	return nil
}
