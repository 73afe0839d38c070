package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// trackedLedger is a ledger on a pool whose sessions are tracked, as relay run opens it.
func trackedLedger(t *testing.T) (*Ledger, Pool, context.Context) {
	t.Helper()
	_, pool, ctx := trackedPool(t)
	return New(pool.DB, "job_"+testenv.Suffix()), pool, ctx
}

// trackedPool is a fresh database with the ledger's schema (its DSN), and a pool on it whose
// sessions are tracked.
func trackedPool(t *testing.T) (string, Pool, context.Context) {
	t.Helper()
	dsn := testenv.Database(t)
	tr := database.NewTracker()
	db, err := database.Open(dsn, database.Session{Track: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := testenv.Context(t, time.Minute)
	if err := EnsureSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	return dsn, Pool{Name: "sink", DB: db, Sessions: tr}, ctx
}

// silence stops a fence's renewals while its lock session stays open on the server: what a
// vanished host (or a SIGSTOPped process) looks like to MySQL.
func silence(f *Fence) { close(f.stop) }

func alive(ctx context.Context, t *testing.T, l *Ledger, id int64) bool {
	t.Helper()
	var n int
	if err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// waitRecorded waits for the owner's renewals to record session id of pool with the lease.
func waitRecorded(ctx context.Context, t *testing.T, l *Ledger, pool Pool, id int64) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool {
		h, err := readHolder(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(h.sessions.Pools[pool.Name].IDs, id)
	}, fmt.Sprintf("the lease to record session %d of pool %s", id, pool.Name))
}

// An owner that stops renewing is taken over once its lease ran out: its recorded sessions (the
// lock session and a session holding the job row's lock in an open transaction) are ended, the
// epoch goes up, and the old owner's decisions fail.
func TestLeaseTakeover(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	lease := 2 * time.Second
	old, err := Acquire(ctx, l, FenceConfig{Owner: "host-a pid 1", Lease: lease, Pools: []Pool{pool}, TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Release()
	// A session of the old owner in the middle of a decision: it holds the job row.
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var stuck int64
	if err := tx.QueryRowContext(ctx, `SELECT CONNECTION_ID() FROM relay_jobs WHERE job = ? FOR UPDATE`, l.key).Scan(&stuck); err != nil {
		t.Fatal(err)
	}
	waitRecorded(ctx, t, l, pool, stuck)
	silence(old)
	silencedAt := time.Now()
	if d := old.Deadline(); !d.Before(silencedAt.Add(lease)) {
		t.Fatalf("old owner's decision deadline %s is not before its lease can run out (%s)", d, silencedAt.Add(lease))
	}

	newer, err := Acquire(ctx, l, FenceConfig{Owner: "host-b pid 2", Lease: lease, Pools: []Pool{pool}, TakeOver: true})
	if err != nil {
		t.Fatalf("takeover after the lease ran out: %v", err)
	}
	defer newer.Release()
	took := time.Since(silencedAt)
	tk := newer.TookOver
	if tk == nil || tk.Own || tk.Owner != "host-a pid 1" || tk.Epoch != old.Epoch() {
		t.Fatalf("takeover record %+v, want one from host-a pid 1 at epoch %d", tk, old.Epoch())
	}
	if took < lease-500*time.Millisecond || took > lease+5*time.Second {
		t.Fatalf("took over %s after the last renewal, want about the lease (%s)", took, lease)
	}
	for _, id := range []int64{old.connID, stuck} {
		if !slices.Contains(tk.Killed, id) {
			t.Fatalf("sessions ended %v do not include %d (lock %d, stuck %d)", tk.Killed, id, old.connID, stuck)
		}
		if alive(ctx, t, l, id) {
			t.Fatalf("session %d of the old owner is still alive", id)
		}
	}
	if newer.Epoch() != old.Epoch()+1 {
		t.Fatalf("epoch %d after takeover, want %d", newer.Epoch(), old.Epoch()+1)
	}
	if err := l.Decide(ctx, old.Epoch(), nil, Checkpoint{ID: 1, Offsets: partition.Offsets{}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("old owner's decision after the takeover: %v, want ErrFenced", err)
	}
	if err := l.Decide(ctx, newer.Epoch(), nil, Checkpoint{ID: 1, Offsets: partition.Offsets{}}); err != nil {
		t.Fatalf("new owner's decision: %v", err)
	}
}

// An owner that keeps renewing is never taken over: the newcomer fails fast, naming it.
func TestLiveOwnerKeepsLease(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	owner, err := Acquire(ctx, l, FenceConfig{Owner: "host-a pid 1", Lease: 20 * time.Second, Pools: []Pool{pool}, TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Release()
	start := time.Now()
	_, err = Acquire(ctx, l, FenceConfig{Owner: "host-b pid 2", Lease: 20 * time.Second, Pools: []Pool{pool}, TakeOver: true})
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "host-a pid 1") {
		t.Fatalf("newcomer against a live owner: %v, want ErrFenced naming host-a pid 1", err)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("newcomer took %s to give up on a live owner", d)
	}
	if !alive(ctx, t, l, owner.connID) {
		t.Fatal("the live owner's lock session was ended")
	}
	if err := l.Decide(ctx, owner.Epoch(), nil, Checkpoint{ID: 1, Offsets: partition.Offsets{}}); err != nil {
		t.Fatalf("live owner's decision: %v", err)
	}
}

// A process whose own lock session was cut off (alive on the server, lost to the process) takes
// the fence back at once, without waiting out its lease; without TakeOver (operator commands)
// an expired lease is reported, not acted on.
func TestOwnZombieRetaken(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	first, err := Acquire(ctx, l, FenceConfig{Owner: "me", Lease: time.Minute, Pools: []Pool{pool}, TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	// An idle pool connection, recorded with the lease: the re-take may get it as its own lock
	// connection, and must not end it.
	var idle int64
	if err := l.db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&idle); err != nil {
		t.Fatal(err)
	}
	waitRecorded(ctx, t, l, pool, idle)
	silence(first)
	if _, err := Acquire(ctx, l, FenceConfig{Owner: "operator"}); !errors.Is(err, ErrFenced) {
		t.Fatalf("operator command against a silent owner: %v, want ErrFenced", err)
	}
	start := time.Now()
	again, err := Acquire(ctx, l, FenceConfig{Owner: "me", Lease: time.Minute, Pools: []Pool{pool}, TakeOver: true, Prev: first})
	if err != nil {
		t.Fatalf("re-taking own fence: %v", err)
	}
	defer again.Release()
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("re-taking own fence took %s (waited for the lease?)", d)
	}
	if again.TookOver == nil || !again.TookOver.Own || again.Epoch() != first.Epoch()+1 {
		t.Fatalf("re-take %+v epoch %d, want own takeover at epoch %d", again.TookOver, again.Epoch(), first.Epoch()+1)
	}
	if !slices.Equal(again.TookOver.Killed, []int64{first.connID}) {
		t.Fatalf("re-take ended %v, want only the old lock session %d", again.TookOver.Killed, first.connID)
	}
	if !alive(ctx, t, l, again.connID) {
		t.Fatal("the re-take ended its own new lock session")
	}
}

// Guard runs recovery's XA actions only under the epoch that owns the job, and a takeover's claim
// waits for a guarded action in flight instead of overtaking it.
func TestGuard(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	first, err := Acquire(ctx, l, FenceConfig{Owner: "a", Pools: []Pool{pool}, TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var fnDone time.Time
	guarded := make(chan error, 1)
	started := make(chan struct{}) // fn runs once the guard holds its lock
	go func() {
		guarded <- l.Guard(ctx, first.Epoch(), func() error { close(started); <-release; fnDone = time.Now(); return nil })
	}()
	select {
	case <-started:
	case err := <-guarded:
		t.Fatalf("guarded action of the owner did not run: %v", err)
	}
	first.Release()
	time.AfterFunc(time.Second, func() { close(release) })
	second, err := Acquire(ctx, l, FenceConfig{Owner: "b", Pools: []Pool{pool}, TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release()
	claimed := time.Now()
	if err := <-guarded; err != nil {
		t.Fatalf("guarded action of the owner: %v", err)
	}
	if claimed.Before(fnDone) {
		t.Fatalf("the new owner claimed the job (%s) while the old owner's guarded action ran (until %s)", claimed, fnDone)
	}
	ran := false
	if err := l.Guard(ctx, first.Epoch(), func() error { ran = true; return nil }); !errors.Is(err, ErrFenced) || ran {
		t.Fatalf("old owner's guarded action after the takeover: %v (ran %v), want ErrFenced without running", err, ran)
	}
	if err := l.Guard(ctx, second.Epoch(), func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("new owner's guarded action: %v (ran %v)", err, ran)
	}
}

// Ids already covered by a recorded block are never handed out again, even after the job row
// was deleted by hand.
func TestReserveIDsAboveRecordedBlocks(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	f, err := Acquire(ctx, l, FenceConfig{Owner: "a", Pools: []Pool{pool}})
	if err != nil {
		t.Fatal(err)
	}
	_, last, err := f.ReserveIDs(ctx, l, 1)
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
	if _, err := l.db.ExecContext(ctx, `DELETE FROM relay_jobs WHERE job = ?`, l.job); err != nil {
		t.Fatal(err)
	}
	g, err := Acquire(ctx, l, FenceConfig{Owner: "b", Pools: []Pool{pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	first, _, err := g.ReserveIDs(ctx, l, 1)
	if err != nil {
		t.Fatalf("reserving after the job row was deleted: %v", err)
	}
	if first <= last {
		t.Fatalf("new block starts at %d, inside the recorded one ending at %d", first, last)
	}
}

// The lease row says who holds the current owner epoch, until when (server clock) and where it
// answers /readyz; a takeover replaces all three, so relay status never asks the old owner.
func TestLeaseRecordsTheOwnersReadyz(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	if got, err := l.Lease(ctx); err != nil || got != nil {
		t.Fatalf("a job that never ran has lease %+v, %v; want none", got, err)
	}
	lease := 2 * time.Second
	old, err := Acquire(ctx, l, FenceConfig{Owner: "host-a pid 1", Lease: lease, Pools: []Pool{pool}, TakeOver: true, Readyz: "http://host-a:8080/readyz"})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Release()
	got, err := l.Lease(ctx)
	if err != nil || got == nil {
		t.Fatalf("lease of a held fence: %+v, %v", got, err)
	}
	if got.Owner != "host-a pid 1" || got.Epoch != old.Epoch() || got.Readyz != "http://host-a:8080/readyz" ||
		got.Remaining <= 0 || got.Remaining > lease {
		t.Fatalf("lease %+v; want host-a's, epoch %d, its /readyz, 0 < remaining <= %s", got, old.Epoch(), lease)
	}
	silence(old)
	if !testenv.Poll(10*time.Second, func() bool {
		if got, err = l.Lease(ctx); err != nil {
			t.Fatal(err)
		}
		return got.Remaining <= 0
	}) {
		t.Fatalf("lease not expired 10s after the renewals stopped: %+v", got)
	}
	if got.Readyz != "http://host-a:8080/readyz" {
		t.Fatalf("expired lease: %+v, want host-a's /readyz still recorded", got)
	}
	next, err := Acquire(ctx, l, FenceConfig{Owner: "host-b pid 2", Lease: lease, Pools: []Pool{pool}, TakeOver: true, Readyz: "http://host-b:9090/readyz"})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release()
	if got, err = l.Lease(ctx); err != nil {
		t.Fatal(err)
	}
	if got.Owner != "host-b pid 2" || got.Epoch != next.Epoch() || got.Epoch <= old.Epoch() || got.Readyz != "http://host-b:9090/readyz" || got.Remaining <= 0 {
		t.Fatalf("after the takeover the lease is %+v; want host-b's, epoch %d, its /readyz, not expired", got, next.Epoch())
	}
}
