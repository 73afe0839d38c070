package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/testenv"
)

// A fence whose lease was lost records nothing any more, so its pools refuse new connections: one
// opened after the loss, or while the renewal that was to record it fails, is closed before its
// first statement and fails with ErrFenceLost, and every session of the pool that the server still
// has is one the lease recorded (issue 34: an unrecorded session outlives a vanished host until
// wait_timeout, and the next owner's takeover cannot end it).
func TestLostFenceRefusesConnections(t *testing.T) {
	for _, c := range []struct {
		name string
		// recording: the renewal that records the new connection is the one that fails; else the
		// lease is lost before the connection opens.
		recording bool
	}{{"after the loss", false}, {"while recording", true}} {
		t.Run(c.name, func(t *testing.T) {
			dsn, pool, ctx := trackedPool(t)
			db, tr := pool.DB, pool.Sessions
			// The server's view, on a pool the fence does not hook.
			direct := testenv.Open(t, dsn)
			l := New(db, "job_"+testenv.Suffix())

			// Armed, a renewal that finds a session the pool did not list before ends the lock
			// session first, so that the renewal recording that session fails.
			var known atomic.Pointer[[]int64]
			var lockID atomic.Int64
			beforeRenew = func() {
				k := known.Load()
				if k == nil || !slices.ContainsFunc(tr.List().IDs, func(id int64) bool { return !slices.Contains(*k, id) }) {
					return
				}
				_, _ = direct.ExecContext(ctx, fmt.Sprintf("KILL %d", lockID.Load()))
			}
			t.Cleanup(func() { beforeRenew = nil })
			f, err := Acquire(ctx, l, FenceConfig{Owner: "a", Lease: 2 * time.Second, Pools: []Pool{pool}, TakeOver: true})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Release()
			lockID.Store(f.connID)
			// Every connection from here is a new one, as a decision's is once its pool closed the
			// idle ones.
			db.SetMaxIdleConns(0)

			if c.recording {
				ids := tr.List().IDs
				known.Store(&ids)
			} else {
				if _, err := direct.ExecContext(ctx, fmt.Sprintf("KILL %d", f.connID)); err != nil {
					t.Fatal(err)
				}
				select {
				case <-f.Lost():
				case <-time.After(5 * time.Second):
					t.Fatal("the fence was not lost after its lock session was ended")
				}
			}
			conn, err := db.Conn(ctx)
			if err == nil {
				conn.Close()
				t.Fatal("a connection opened once the fence could no longer record it was handed out")
			}
			if !errors.Is(err, ErrFenceLost) {
				t.Fatalf("connection on a lost fence: %v, want ErrFenceLost", err)
			}
			select {
			case <-f.Lost():
			default:
				t.Fatal("a connection was refused while the fence was not lost")
			}

			// No session of the pool is alive on the server without being recorded with the lease.
			server := New(direct, l.key)
			h, err := readHolder(ctx, server)
			if err != nil {
				t.Fatal(err)
			}
			recorded := h.sessions.Pools[pool.Name].IDs
			for _, id := range tr.List().IDs {
				if slices.Contains(recorded, id) {
					continue
				}
				testenv.Eventually(t, 5*time.Second, func() bool { return !alive(ctx, t, server, id) },
					fmt.Sprintf("unrecorded session %d of the lost fence's pool to end", id))
			}
		})
	}
}

// The case: the owner's lease renewals fail (its lock session hangs), a decision then
// needs a new connection, and the host vanishes. The next owner ends the sessions the lease
// recorded; a session opened after the loss would hold the job row past every takeover until
// wait_timeout (10 minutes). Refused, it holds nothing: the job is taken over within the lease and
// a few seconds.
func TestLostFenceTakeover(t *testing.T) {
	dsn := testenv.Database(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// Host A reaches the server through the proxy, so that it can vanish.
	px := testenv.NewFaultProxy(t, cfg.Addr)
	cfg.Addr = px.Addr()
	trA := database.NewTracker()
	hostA, err := database.Open(cfg.FormatDSN(), database.Session{Track: trA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostA.Close() })
	ctx := testenv.Context(t, time.Minute)
	if err := EnsureSchema(ctx, hostA); err != nil {
		t.Fatal(err)
	}
	job := "job_" + testenv.Suffix()
	la := New(hostA, job)
	const lease = 2 * time.Second
	a, err := Acquire(ctx, la, FenceConfig{Owner: "host-a pid 1", Lease: lease,
		Pools: []Pool{{Name: "sink", DB: hostA, Sessions: trA}}, TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	// Its renewals fail: the lock session hangs (its link blackholed, the session alive on the
	// server). The idle connections are closed first, so that the decision's is a new one.
	hostA.SetMaxIdleConns(0)
	px.BlackholeAll(testenv.Forever)
	select {
	case <-a.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the fence was not lost with its lock session blackholed")
	}
	// A decision in flight needs a connection now and takes the job row, as Decide does.
	var tx *sql.Tx
	conn, err := hostA.Conn(ctx)
	if err == nil {
		// Ended only after the proxy: a statement on a blackholed link never returns.
		t.Cleanup(func() {
			px.Close()
			if tx != nil {
				_ = tx.Rollback()
			}
			conn.Close()
		})
		tx, err = conn.BeginTx(ctx, nil)
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ? FOR UPDATE`, job)
	}
	if err != nil && !errors.Is(err, ErrFenceLost) {
		t.Fatalf("decision's connection on a lost fence: %v, want ErrFenceLost or none", err)
	}
	// The host vanishes.
	px.BlackholeAll(testenv.Forever)
	vanished := time.Now()

	trB := database.NewTracker()
	hostB, err := database.Open(dsn, database.Session{Track: trB})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostB.Close() })
	bctx, cancel := context.WithTimeout(ctx, lease+15*time.Second)
	defer cancel()
	b, err := Acquire(bctx, New(hostB, job), FenceConfig{Owner: "host-b pid 2", Lease: lease,
		Pools: []Pool{{Name: "sink", DB: hostB, Sessions: trB}}, TakeOver: true})
	if err != nil {
		t.Fatalf("no takeover within lease + 15 s of the host vanishing (a session of the lost fence holds the job row?): %v", err)
	}
	defer b.Release()
	took := time.Since(vanished)
	if b.TookOver == nil || b.Epoch() != a.Epoch()+1 {
		t.Fatalf("takeover %+v at epoch %d, want one of host-a's epoch %d", b.TookOver, b.Epoch(), a.Epoch())
	}
	t.Logf("taken over %s after the host vanished (lease %s)", took.Round(100*time.Millisecond), lease)
}
