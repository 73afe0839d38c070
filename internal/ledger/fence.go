// Fence: one owner per job.
//
// Invariant: while a Fence is held, its GET_LOCK connection is open, the job row's owner epoch is
// the one this Fence bumped last (at Acquire, and at each held-mode session), and the owner renews
// a lease (server clock) about every second, recording its server sessions (each new one before it
// is used, and only those the server still has). A second process fails fast
// naming the holder while the holder renews; one that finds the lease run out ends the recorded
// sessions and takes over with a higher epoch. Safety rests on the epoch alone: every decision
// write, and every XA COMMIT/ROLLBACK recovery issues, checks the epoch under the job row's lock,
// which the takeover's bump must take exclusively, so nothing of an old owner can follow a
// takeover. Deadline only keeps an owner that cannot renew from trying (best effort: it assumes
// the host's monotonic clock and the server's clock run at the same rate).
package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/partition"
)

// Fence is the ownership of one job.
type Fence struct {
	conn   *sql.Conn
	connID int64
	boot   int64  // the ledger server's lifetime the lock session belongs to
	node   string // the Galera node of the lock session (empty elsewhere)
	key    string
	cfg    FenceConfig
	mu     sync.Mutex
	epoch  int64     // the owner epoch; a held-mode session takes a new one (NewSession)
	valid  time.Time // decisions may be written until then (monotonic clock)
	// leaseMu serialises the lease row's writes of this process: a renewal, and NewSession's
	// move of the lease to the new epoch (a renewal between the two would miss it and fail).
	leaseMu sync.Mutex
	lost    chan struct{}
	stop    chan struct{}
	kick    chan chan error // a new session to record now: renew, and answer on the channel
	tasks   sync.WaitGroup  // the renewing and pruning goroutines, which Release waits for
	// TookOver is set when Acquire ended an earlier owner's sessions to get the fence.
	TookOver *Takeover
}

// FenceConfig says who asks for the fence and what it may do to get it.
type FenceConfig struct {
	Owner string        // this process (host, pid), for the error another process prints
	Lease time.Duration // 0: DefaultLease
	// Pools are this process's connection pools: their sessions are recorded with each renewal,
	// so that a process taking over after this one vanished can end them.
	Pools []Pool
	// TakeOver lets Acquire end the sessions of an owner whose lease expired (relay run). Operator
	// commands leave that to the next relay run.
	TakeOver bool
	// Prev is this process's own earlier fence, whose lock connection died: when the server still
	// holds that session, it is ended at once (nobody else can own the epoch it holds).
	Prev *Fence
	// Readyz is the URL of this process's /readyz, recorded with the lease so that relay status
	// asks the owner of the current epoch, wherever it runs ("" when it serves none).
	Readyz string
	// Cluster says the ledger is a Galera node: GET_LOCK holds only on that node, so a live lease
	// recorded on another node is also an owner (see otherNode).
	Cluster bool
}

// Pool is one connection pool whose server sessions are tracked.
type Pool struct {
	Name     string
	DB       *sql.DB
	Sessions *database.Tracker
}

// Takeover describes the owner whose sessions Acquire ended.
type Takeover struct {
	Owner       string
	Epoch       int64
	Own         bool          // it was this process's own dead lock connection
	ExpiredFor  time.Duration // how long its lease had run out (server clock)
	Killed      []int64       // sessions ended
	WaitedLease time.Duration // time spent waiting for the lease to run out
}

// DefaultLease is how long an owner's lease lasts past its last renewal.
const DefaultLease = 10 * time.Second

// LockName is the GET_LOCK name of an instance key.
func LockName(key string) string { return "relay/" + key }

// lockWaitSeconds is how long Acquire waits for the lock: long enough for the server to notice that the
// previous owner's connection died with its process (a restart right after a SIGKILL), short
// enough that a second live instance still fails fast.
const lockWaitSeconds = 2

// EffectiveLease is Lease, or DefaultLease when unset.
func (c FenceConfig) EffectiveLease() time.Duration {
	if c.Lease > 0 {
		return c.Lease
	}
	return DefaultLease
}

// renewEvery is how often the owner renews its lease: several renewals fit in one lease, so a
// slow one does not lose it.
func (c FenceConfig) renewEvery() time.Duration { return min(time.Second, c.EffectiveLease()/5) }

// recorded is what the lease row records of an owner: its sessions, and where it answers /readyz.
type recorded struct {
	Lock   database.Sessions            `json:"lock"`
	Pools  map[string]database.Sessions `json:"pools"`
	Readyz string                       `json:"readyz,omitempty"`
	Node   string                       `json:"node,omitempty"` // Galera node of the lock session
}

// Acquire takes the instance's lock and bumps its owner epoch. When the lock is held, it fails
// with ErrFenced naming the holder while the holder renews its lease; with TakeOver, a holder that
// stopped renewing is waited for until its lease runs out (server clock), then its recorded
// sessions are ended (KILL: a prepared branch survives it, an unprepared transaction rolls back)
// and the fence is taken with a higher epoch, which fails every later decision of the old owner.
// Instances of another layout (a different number of instances) must all be stopped before the
// layout changes.
func Acquire(ctx context.Context, l *Ledger, cfg FenceConfig) (*Fence, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("fence %s: %w", l.key, err)
	}
	f := &Fence{conn: conn, key: l.key, cfg: cfg, lost: make(chan struct{}), stop: make(chan struct{}),
		kick: make(chan chan error)}
	if f.connID, err = database.ConnID(ctx, conn); err == nil {
		f.boot, err = database.Boot(ctx, l.db)
	}
	if err == nil && cfg.Cluster {
		var g database.Galera
		g, err = database.ReadGalera(ctx, conn)
		f.node = g.Node
	}
	if err != nil {
		database.Discard(conn)
		return nil, fmt.Errorf("fence %s: %w", l.key, err)
	}
	if err := f.lock(ctx, l); err != nil {
		database.Discard(conn)
		return nil, err
	}
	// Row lock waits on this session are short: the claim and the renewals must notice a
	// session that holds the job row and will never let go (see claimRow).
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", lockWaitSeconds)); err != nil {
		f.Release()
		return nil, fmt.Errorf("fence %s: %w", l.key, err)
	}
	if err := f.claimRow(ctx, l); err != nil {
		f.Release()
		return nil, err
	}
	for _, p := range cfg.Pools {
		p.Sessions.OnOpen(f.record)
	}
	f.tasks.Add(2)
	go f.watch()
	go f.prune()
	return f, nil
}

// record renews at once, so that a session just opened is recorded before it is used (a host
// that vanished a moment after opening it would otherwise leave it unknown to the next owner).
func (f *Fence) record() {
	done := make(chan error, 1)
	select {
	case f.kick <- done:
	case <-f.stop:
		return
	case <-f.lost:
		return
	}
	select {
	case <-done:
	case <-f.stop:
	case <-f.lost:
	}
}

// claimRow runs claim until it succeeds. Instances starting together queue on the job row; a
// deadlock report is retried like any. A lock wait on the job row that outlasts the short wait
// is a session of an earlier owner stuck in a decision (its host vanished mid-transaction: the
// server keeps the session, and the row lock, until wait_timeout). With TakeOver, that owner's
// recorded sessions are ended once its lease ran out, as when it still held the lock.
func (f *Fence) claimRow(ctx context.Context, l *Ledger) error {
	p := fault.DefaultPolicy()
	for attempt := 1; ; attempt++ {
		if f.cfg.Cluster {
			if err := f.otherNode(ctx, l); err != nil {
				return err
			}
		}
		err := f.claim(ctx, l, f.cfg.Owner, l.layout)
		if err == nil {
			return nil
		}
		if fault.IsMySQL(err, fault.ErLockWaitTimeout) && f.cfg.TakeOver {
			if err := f.endStaleOwner(ctx, l); err != nil {
				return err
			}
			continue
		}
		if !fault.Retryable(err) || attempt >= p.Attempts {
			return err
		}
		if err := fault.SleepContext(ctx, p.Backoff(attempt)); err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
	}
}

// endStaleOwner waits until the recorded owner's lease ran out (it cannot renew: this process
// holds the lock) and ends its recorded sessions.
func (f *Fence) endStaleOwner(ctx context.Context, l *Ledger) error {
	start := time.Now()
	for {
		h, err := readHolder(ctx, l)
		if err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		if !h.claimed || !h.lease.Valid {
			return fmt.Errorf("%w: job %s: the job row is locked by a session of an owner without a lease", ErrFenced, l.key)
		}
		if h.remaining <= 0 {
			return f.takeOver(ctx, l, h, time.Since(start))
		}
		if err := waitLease(ctx, l, h); err != nil {
			return err
		}
	}
}

// waitLease sleeps until the holder's lease may have run out, but looks again within half a
// second (the holder may renew, or let go).
func waitLease(ctx context.Context, l *Ledger, h holderRow) error {
	if err := fault.SleepContext(ctx, min(h.remaining+time.Millisecond, 500*time.Millisecond)); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	return nil
}

// holderRow is what the ledger and the server say about the lock's holder.
type holderRow struct {
	holder    sql.NullInt64 // IS_USED_LOCK: the session holding the lock now
	claimed   bool          // the job row exists
	connID    int64         // the session the last claim recorded
	owner     string
	epoch     int64
	lease     sql.NullTime
	remaining time.Duration // until the lease runs out, by the server's clock (negative: expired)
	sessions  recorded
}

func readHolder(ctx context.Context, l *Ledger) (holderRow, error) {
	var h holderRow
	if err := l.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(l.key)).Scan(&h.holder); err != nil {
		return h, err
	}
	var us sql.NullInt64
	var js string
	err := l.db.QueryRowContext(ctx, `SELECT j.conn_id, j.owner, j.owner_epoch, l.lease_until,
		TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.lease_until), COALESCE(l.sessions, '')
		FROM relay_jobs j LEFT JOIN relay_leases l ON l.job = j.job AND l.owner_epoch = j.owner_epoch WHERE j.job = ?`,
		l.key).Scan(&h.connID, &h.owner, &h.epoch, &h.lease, &us, &js)
	if errors.Is(err, sql.ErrNoRows) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	h.claimed = true
	h.remaining = time.Duration(us.Int64) * time.Microsecond
	if js != "" {
		if err := json.Unmarshal([]byte(js), &h.sessions); err != nil {
			return h, fmt.Errorf("recorded sessions: %w", err)
		}
	}
	return h, nil
}

// LeaseExpired reports whether the instance's owner has stopped renewing past its lease (or never
// had one). The resolver acts for another instance only then: an instance whose lock session just
// dropped is restarting in-process and takes its fence back within its lease.
func LeaseExpired(ctx context.Context, l *Ledger) (bool, error) {
	h, err := readHolder(ctx, l)
	if err != nil {
		return false, err
	}
	return !h.lease.Valid || h.remaining <= 0, nil
}

// lock takes the GET_LOCK, through the lease rule when its holder stopped renewing.
func (f *Fence) lock(ctx context.Context, l *Ledger) error {
	wait := lockWaitSeconds
	var seen sql.NullTime // the holder's lease when this process started watching it
	start := time.Now()
	for {
		var got sql.NullInt64
		if err := f.conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, LockName(l.key), wait).Scan(&got); err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
		wait = 0
		h, err := readHolder(ctx, l)
		if err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		prev := f.cfg.Prev
		switch {
		case !h.holder.Valid:
			continue // released meanwhile
		case !h.claimed || h.holder.Int64 != h.connID || !database.SameBoot(h.sessions.Lock.Boot, f.boot):
			// Not the recorded owner's lock session (an operator command, an older relay, or a
			// session of a later server lifetime that happens to carry the recorded id).
			return fmt.Errorf("%w: job %s is running elsewhere: %s", ErrFenced, l.key, Holder(ctx, l))
		case prev != nil && h.epoch == prev.Epoch() && h.connID == prev.connID:
			// This process's own lock session, cut off from it but alive on the server: only that
			// one is ended (the process's other sessions are its own business, see endZombies).
			killed, err := database.Kill(ctx, l.db, database.Sessions{Boot: prev.boot, IDs: []int64{prev.connID}}, f.connID)
			if err != nil {
				return fmt.Errorf("fence %s: end own lock session: %w", l.key, err)
			}
			f.TookOver = &Takeover{Owner: h.owner, Epoch: h.epoch, Own: true, Killed: killed}
			wait = lockWaitSeconds
			continue
		case !f.cfg.TakeOver || !h.lease.Valid:
			return fmt.Errorf("%w: job %s is running elsewhere: %s", ErrFenced, l.key, Holder(ctx, l))
		case h.remaining <= 0:
			if err := f.takeOver(ctx, l, h, time.Since(start)); err != nil {
				return err
			}
			wait = lockWaitSeconds
			continue
		case seen.Valid && !seen.Time.Equal(h.lease.Time):
			return fmt.Errorf("%w: job %s is running elsewhere: %s (renewing its lease)", ErrFenced, l.key, Holder(ctx, l))
		}
		// The holder has not renewed since this process looked: it may have vanished. Its lease
		// tells how long it may still decide; wait that out (or see it renew).
		seen = h.lease
		if err := waitLease(ctx, l, h); err != nil {
			return err
		}
	}
}

// takeOver ends the sessions the lock's holder recorded (each only on the server lifetime it was
// recorded in), and the holder's lock session itself; never this fence's own lock session.
func (f *Fence) takeOver(ctx context.Context, l *Ledger, h holderRow, waited time.Duration) error {
	t := &Takeover{Owner: h.owner, Epoch: h.epoch, ExpiredFor: -h.remaining, WaitedLease: waited}
	for _, p := range f.cfg.Pools {
		killed, err := database.Kill(ctx, p.DB, h.sessions.Pools[p.Name], f.connID)
		t.Killed = append(t.Killed, killed...)
		if err != nil {
			return fmt.Errorf("fence %s: end sessions of %s: %w", l.key, h.owner, err)
		}
	}
	killed, err := database.Kill(ctx, l.db, h.sessions.Lock, f.connID)
	t.Killed = append(t.Killed, killed...)
	if err != nil {
		return fmt.Errorf("fence %s: end lock session of %s: %w", l.key, h.owner, err)
	}
	f.TookOver = t
	return nil
}

// claim bumps the owner epoch and records the layout, under the job row's lock.
func (f *Fence) claim(ctx context.Context, l *Ledger, owner string, m int) error {
	tx, err := f.conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	defer func() { _ = tx.Rollback() }()
	// Lock the job row exclusively from the first statement: a shared lock taken first (as INSERT
	// IGNORE's duplicate check does) and upgraded later deadlocks against a sibling doing the same.
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_jobs (job, owner_epoch, owner, acquired_at, layout)
		VALUES (?, 0, '', UTC_TIMESTAMP(6), ?) ON DUPLICATE KEY UPDATE layout = layout`, l.job, m); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	var layout int
	if err := tx.QueryRowContext(ctx, `SELECT layout FROM relay_jobs WHERE job = ? FOR UPDATE`, l.job).Scan(&layout); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	if layout != m {
		// A partition must never have two owners: no instance of the last layout may still run.
		// Claims queue on the job row, so an instance holding its lock but not yet claimed (its
		// owner row does not name its connection) checks after this one, against this layout.
		for j := 0; j < layout; j++ {
			old := InstanceKey(l.job, j, layout)
			if old == l.key {
				continue
			}
			var holder sql.NullInt64
			if err := tx.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(old)).Scan(&holder); err != nil {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
			var claimedBy int64
			var claimedLayout int
			err := tx.QueryRowContext(ctx, `SELECT conn_id, layout FROM relay_jobs WHERE job = ?`, old).Scan(&claimedBy, &claimedLayout)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
			if holder.Valid && err == nil && holder.Int64 == claimedBy && claimedLayout != m {
				return fmt.Errorf("%w: job %s runs as %d instances (%s is up); stop them all before running it as %d",
					ErrFenced, l.job, claimedLayout, old, m)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET layout = ? WHERE job = ?`, m, l.job); err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_jobs (job, owner_epoch, owner, acquired_at, layout, conn_id)
		VALUES (?, 1, ?, UTC_TIMESTAMP(6), ?, CONNECTION_ID())
		ON DUPLICATE KEY UPDATE owner_epoch = owner_epoch + 1, owner = VALUES(owner), acquired_at = VALUES(acquired_at),
			layout = VALUES(layout), conn_id = VALUES(conn_id)`,
		l.key, owner, m); err != nil {
		return fmt.Errorf("fence %s: bump epoch: %w", l.key, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ?`, l.key).Scan(&f.epoch); err != nil {
		return fmt.Errorf("fence %s: read epoch: %w", l.key, err)
	}
	if err := l.claimOwner(ctx, tx, f.epoch); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	sent := time.Now()
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_leases (job, owner_epoch, owner, conn_id, lease_until, sessions)
		VALUES (?, ?, ?, CONNECTION_ID(), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?)
		ON DUPLICATE KEY UPDATE owner_epoch = VALUES(owner_epoch), owner = VALUES(owner), conn_id = VALUES(conn_id),
			lease_until = VALUES(lease_until), sessions = VALUES(sessions)`,
		l.key, f.epoch, owner, f.cfg.EffectiveLease().Microseconds(), f.sessions()); err != nil {
		return fmt.Errorf("fence %s: lease: %w", l.key, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	f.renewed(sent)
	return nil
}

// Epoch is the owner epoch this fence holds now: every decision is written under it.
func (f *Fence) Epoch() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// NewSession starts a held-mode session of this owner: in one ledger transaction it takes the
// owner row exclusively, bumps the owner epoch (and the lease's with it) and reads every
// partition's offset with a locking read. A data transaction of the previous session holds the
// owner row shared from its fence check to its COMMIT, and its offset rows exclusively: one whose
// COMMIT is still under way on the server (its client gave up on it) is waited for, so the new
// session resumes after it rather than from the offsets before it; one that has not checked the
// fence yet finds the new epoch and fails with ErrFenced. It returns the offsets and the highest
// checkpoint id among them, as PartitionOffsets does.
//
// The waits run on a pool connection, not on the lock session, and without holding up renewals:
// a transaction waited for may need a new connection of this process to finish (the resolver's
// guarded XA COMMIT), and a new connection waits for a renewal to record it.
func (f *Fence) NewSession(ctx context.Context, l *Ledger) (partition.Offsets, int64, error) {
	old := f.Epoch()
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("new session: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := checkEpoch(ctx, tx, l.key, old); err != nil {
		return nil, 0, fmt.Errorf("new session: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET owner_epoch = ? WHERE job = ?`, old+1, l.key); err != nil {
		return nil, 0, fmt.Errorf("new session: bump epoch: %w", err)
	}
	if err := l.advanceOwner(ctx, tx, old, old+1); err != nil {
		return nil, 0, fmt.Errorf("new session: %w", err)
	}
	offs, maxID, err := l.partitionOffsets(ctx, tx, " LOCK IN SHARE MODE")
	if err != nil {
		return nil, 0, fmt.Errorf("new session: %w", err)
	}
	// The lease moves to the new epoch with it; no renewal of the old one may run past this point.
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	res, err := tx.ExecContext(ctx, `UPDATE relay_leases SET owner_epoch = ? WHERE job = ? AND owner_epoch = ? AND conn_id = ?`,
		old+1, l.key, old, f.connID)
	if err != nil {
		return nil, 0, fmt.Errorf("new session: lease: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return nil, 0, fmt.Errorf("new session: %w: lease of epoch %d not found", ErrFenced, old)
	}
	if err := tx.Commit(); err != nil {
		// Unknown outcome: the lease may be at either epoch, so the next renewal may fail and
		// the fence be taken again. Nothing decides under an epoch it does not know it holds.
		return nil, 0, fmt.Errorf("new session: commit: %w", err)
	}
	f.mu.Lock()
	f.epoch = old + 1
	f.mu.Unlock()
	return offs, maxID, nil
}

// idBlock is how many checkpoint ids one reservation covers: one ledger write per block.
const idBlock = 1000

// ReserveIDs hands this owner the next block of checkpoint ids, all at or above floor. Blocks are
// disjoint across instances and owners, and recorded: an id is never handed out twice, even when its
// first use left no trace (an epoch that died before its prepare), and the block tells which
// instance may hold a branch with that id.
func (f *Fence) ReserveIDs(ctx context.Context, l *Ledger, floor int64) (first, last int64, err error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// Exclusive locks from the first read, the job row before the instance's owner row (the order
	// claim takes them in): a shared lock upgraded later deadlocks against a second reservation
	// doing the same (the job row is the owner row when the job runs as one instance).
	var reserved, blocks, cur int64
	if err := tx.QueryRowContext(ctx, `SELECT id_reserved FROM relay_jobs WHERE job = ? FOR UPDATE`, l.job).Scan(&reserved); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ? FOR UPDATE`, l.key).Scan(&cur); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	if epoch := f.Epoch(); cur != epoch {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w: owner epoch is %d, this process holds %d", ErrFenced, cur, epoch)
	}
	// The blocks themselves too: a job row deleted by hand (a demo reset, an operator) must not
	// hand out ids a recorded block already covers.
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(last_id), 0) FROM relay_id_blocks WHERE job = ?`, l.job).Scan(&blocks); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	first = max(reserved+1, blocks+1, floor)
	last = first + idBlock - 1
	if _, err := tx.ExecContext(ctx, `UPDATE relay_jobs SET id_reserved = ? WHERE job = ?`, last, l.job); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_id_blocks (job, first_id, last_id, owner_key, reserved_at)
		VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))`, l.job, first, last, l.key); err != nil {
		return 0, 0, fmt.Errorf("reserve checkpoint ids: %w", err)
	}
	return first, last, tx.Commit()
}

// BlockOwner tells which instance key reserved checkpoint id; ok is false for an id no block covers.
func (l *Ledger) BlockOwner(ctx context.Context, id int64) (key string, ok bool, err error) {
	err = l.db.QueryRowContext(ctx, `SELECT owner_key FROM relay_id_blocks WHERE job = ? AND first_id <= ? AND last_id >= ?
		ORDER BY first_id DESC LIMIT 1`, l.job, id, id).Scan(&key)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return key, err == nil, err
}

// Holder describes who holds the job's lock, for error messages and `relay status`.
func Holder(ctx context.Context, l *Ledger) string {
	var connID sql.NullInt64
	_ = l.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(l.key)).Scan(&connID)
	var owner string
	var epoch int64
	var at time.Time
	err := l.db.QueryRowContext(ctx, `SELECT owner, owner_epoch, acquired_at FROM relay_jobs WHERE job = ?`, l.key).Scan(&owner, &epoch, &at)
	switch {
	case !connID.Valid:
		return "nobody holds the lock"
	case errors.Is(err, sql.ErrNoRows) || err != nil:
		return fmt.Sprintf("lock held by MySQL connection %d", connID.Int64)
	default:
		return fmt.Sprintf("owner %s (epoch %d, since %s UTC, MySQL connection %d)", owner, epoch, at.Format(time.RFC3339), connID.Int64)
	}
}

// IsHeld reports whether some process holds the job's lock (used by offline commands).
func IsHeld(ctx context.Context, l *Ledger) (bool, error) {
	var connID sql.NullInt64
	if err := l.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, LockName(l.key)).Scan(&connID); err != nil {
		return false, err
	}
	return connID.Valid, nil
}

// watch renews the lease on the lock connection. A renewal that fails (the connection died or
// hung past its deadline, the lock or the epoch is gone) closes Lost; decisions already stopped
// being allowed at Deadline, before the lease can run out on the server.
func (f *Fence) watch() {
	defer f.tasks.Done()
	every := f.cfg.renewEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case done := <-f.kick:
			err := f.renew(max(every, f.cfg.EffectiveLease()/4))
			done <- err
			if err != nil {
				close(f.lost)
				return
			}
		case <-t.C:
			if err := f.renew(max(every, f.cfg.EffectiveLease()/4)); err != nil {
				close(f.lost)
				return
			}
		}
	}
}

// prune forgets, at the renewal's pace, the pools' closed sessions the server no longer has, so
// that the sessions each renewal records stay those that may still hold something. It runs apart
// from watch: a pool may open a connection to answer it, and that connection's record waits for
// watch. A failed pass is only retried: the list is then longer, never shorter, than it should be.
func (f *Fence) prune() {
	defer f.tasks.Done()
	every := f.cfg.renewEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-f.lost:
			return
		case <-t.C:
		}
		for _, p := range f.cfg.Pools {
			ctx, cancel := context.WithTimeout(context.Background(), max(every, f.cfg.EffectiveLease()/4))
			_ = p.Sessions.Prune(ctx, p.DB)
			cancel()
		}
	}
}

// sessions renders the lock session and the pools' server sessions as recorded with the lease.
func (f *Fence) sessions() string {
	r := recorded{Lock: database.Sessions{Boot: f.boot, IDs: []int64{f.connID}}, Pools: map[string]database.Sessions{},
		Readyz: f.cfg.Readyz, Node: f.node}
	for _, p := range f.cfg.Pools {
		r.Pools[p.Name] = p.Sessions.List()
	}
	js, _ := json.Marshal(r) // ints and strings always marshal
	return string(js)
}

// beforeRenew, when set (tests only), runs at the start of every renewal: a test holds a
// renewal there, in flight, to race it with Release.
var beforeRenew func()

func (f *Fence) renew(timeout time.Duration) error {
	if beforeRenew != nil {
		beforeRenew()
	}
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sent := time.Now()
	epoch := f.Epoch()
	res, err := f.conn.ExecContext(ctx, `UPDATE relay_leases SET lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, sessions = ?
		WHERE job = ? AND owner_epoch = ? AND conn_id = CONNECTION_ID() AND IS_USED_LOCK(?) = CONNECTION_ID()`,
		f.cfg.EffectiveLease().Microseconds(), f.sessions(), f.key, epoch, LockName(f.key))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("fence %s: lease not renewed: lock or epoch %d lost", f.key, epoch)
	}
	f.renewed(sent)
	return nil
}

// renewed extends Deadline from a renewal sent at sent: the server set the lease from its own
// clock when it ran the statement, after sent, so sent + lease lies before the server's expiry
// as long as the two clocks run at the same rate; a fifth of the lease is kept as a margin for
// rates that differ and for the decision's own round trip.
func (f *Fence) renewed(sent time.Time) {
	lease := f.cfg.EffectiveLease()
	f.mu.Lock()
	f.valid = sent.Add(lease - lease/5)
	f.mu.Unlock()
}

// Deadline is when this owner must stop writing decisions unless the lease is renewed by then.
// It is a courtesy to the next owner, not what keeps decisions safe (the epoch is).
func (f *Fence) Deadline() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.valid
}

// Lost is closed when the fence's lock connection died: ownership may have passed to another process.
func (f *Fence) Lost() <-chan struct{} { return f.lost }

// Release gives the lock back (process exit releases it too). It first waits for a renewal in
// flight: one that ran after the statements below would record the sessions again, or fail on the
// discarded connection and report a released fence lost.
func (f *Fence) Release() {
	select {
	case <-f.stop:
		return
	default:
		close(f.stop)
	}
	for _, p := range f.cfg.Pools {
		p.Sessions.OnOpen(nil)
	}
	f.tasks.Wait()
	if f.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		// A clean release leaves no sessions for a later claim to end.
		_, _ = f.conn.ExecContext(ctx, `UPDATE relay_leases SET sessions = '' WHERE job = ? AND owner_epoch = ?`, f.key, f.Epoch())
		_, _ = f.conn.ExecContext(ctx, `DO RELEASE_ALL_LOCKS()`)
		cancel()
		database.Discard(f.conn)
	}
}
