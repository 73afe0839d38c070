// Fence: one owner per job.
//
// Invariant: while a Fence is held, its GET_LOCK connection is open, the job row's owner epoch is
// the one this Fence bumped last (at Acquire, and at each held-mode session), and the owner renews
// a lease (server clock) about every second, recording its server sessions (each new one before it
// is used, and only those the server still has); once a renewal failed (Lost), its pools refuse new
// connections until Release, so no session of its pools goes unrecorded. A second process fails fast
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/partition"
)

// Fence is the ownership of one job.
type Fence struct {
	conn   *sql.Conn
	connID int64
	boot   int64   // the ledger server's lifetime the lock session belongs to
	node   string  // the Galera node of the lock session (empty elsewhere)
	clocks *clocks // what this process saw of other processes' leases (clocks.go)
	key    string
	cfg    FenceConfig
	mu     sync.Mutex
	epoch  int64     // the owner epoch; a held-mode session takes a new one (NewSession)
	valid  time.Time // decisions may be written until then (monotonic clock)
	// leaseMu serialises the lease row's writes of this process: a renewal, and NewSession's
	// move of the lease to the new epoch (a renewal between the two would miss it and fail).
	leaseMu sync.Mutex
	lost    chan struct{}
	lostErr error // the renewal that failed; set before lost is closed
	stop    chan struct{}
	kick    chan chan error // a new session to record now: renew, and answer on the channel
	tasks   sync.WaitGroup  // the renewing and pruning goroutines, which Release waits for
	// TookOver is set when Acquire ended an earlier owner's sessions to get the fence.
	TookOver *Takeover
	// claims are the partitions a member of a group holds, at the epochs it took them at in the
	// live session (TakePartitions); nil for an instance, whose partitions are fixed.
	claims atomic.Pointer[partition.Claims]
}

// SetClaims records the partitions a group member took for its new session: every decision of the
// session writes their owner rows, conditional on these epochs. Sessions of one process never
// overlap, so the session that set them is the one deciding under them.
func (f *Fence) SetClaims(e partition.Claims) { f.claims.Store(&e) }

// Claims are the partitions the live session holds (nil: an instance, no per-partition owners).
func (f *Fence) Claims() partition.Claims {
	if c := f.claims.Load(); c != nil {
		return *c
	}
	return nil
}

// FenceConfig says who asks for the fence and what it may do to get it.
type FenceConfig struct {
	Owner string        // this process (host, pid), for the error another process prints
	Lease time.Duration // 0: DefaultLease
	// Pools are this process's connection pools: their sessions are recorded with each renewal,
	// so that a process taking over after this one vanished can end them.
	Pools []Pool
	// End are pools of this process where a stale owner's recorded sessions are ended on a
	// takeover, without recording this fence's own sessions there (the resolver taking over a
	// stalled process on the pools its pipeline's fence records).
	End []Pool
	// Operator marks an operator command's fence: it acts within the job's recorded layout and never
	// moves it (relay membership switch is the operator's way to).
	Operator bool
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
	// recorded on another node is also an owner (see otherNode), judged without that node's
	// clock (clocks.go).
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
	ExpiredFor  time.Duration // how long its lease had run out (server clock; another Galera node's lease: since it stood still for a lease)
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

// Epoch is the owner epoch this fence holds now: every decision is written under it.
func (f *Fence) Epoch() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// Deadline is when this owner must stop writing decisions unless the lease is renewed by then.
// It is a courtesy to the next owner, not what keeps decisions safe (the epoch is).
func (f *Fence) Deadline() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.valid
}

// Lost is closed when the fence's lock connection died: ownership may have passed to another process.
// From then on, until Release, the fence's pools refuse new connections with ErrFenceLost.
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
