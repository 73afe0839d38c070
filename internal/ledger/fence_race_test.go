package ledger

import (
	"database/sql/driver"
	"sync"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/testenv"
)

// A renewal in flight when Release starts must not outlive it: Release waits for it, so the lease
// row keeps Release's cleared sessions and the released fence is not reported lost.
func TestReleaseWaitsForRenewal(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	held, proceed, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	beforeRenew = func() {
		once.Do(func() {
			close(held)
			<-proceed
		})
	}
	t.Cleanup(func() { beforeRenew = nil })
	f, err := Acquire(ctx, l, FenceConfig{Owner: "a", Lease: time.Second, Pools: []Pool{pool}})
	if err != nil {
		t.Fatal(err)
	}
	<-held // a renewal is in flight
	go func() {
		f.Release()
		close(returned)
	}()
	// Let the renewal go on once Release returned, or once it has had a second to do so: a Release
	// that waits for the renewal cannot return before it goes on.
	select {
	case <-returned:
	case <-time.After(time.Second):
	}
	close(proceed)
	<-returned
	select {
	case <-f.Lost():
		t.Fatal("the released fence was reported lost: a renewal ran after Release")
	case <-time.After(500 * time.Millisecond): // a renewal left behind would fail at once
	}
	var sessions string
	if err := l.db.QueryRowContext(ctx, `SELECT sessions FROM relay_leases WHERE job = ?`, l.key).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	if sessions != "" {
		t.Fatalf("sessions recorded after Release: %s", sessions)
	}
}

// Two reservations at once (the same owner's, on the job row both read first) never deadlock:
// ReserveIDs takes the job row exclusively from its first read, never a shared lock upgraded.
func TestReserveIDsConcurrent(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	f, err := Acquire(ctx, l, FenceConfig{Owner: "a", Pools: []Pool{pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	const rounds = 30
	deadlocks := 0
	seen := map[int64]bool{}
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs, firsts := make([]error, 2), make([]int64, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				firsts[i], _, errs[i] = f.ReserveIDs(ctx, l, 1)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			switch {
			case fault.IsMySQL(err, fault.ErLockDeadlock):
				deadlocks++
			case err != nil:
				t.Fatalf("round %d: %v", r, err)
			case seen[firsts[i]]:
				t.Fatalf("round %d: block %d handed out twice", r, firsts[i])
			default:
				seen[firsts[i]] = true
			}
		}
	}
	if deadlocks > 0 {
		t.Fatalf("%d of %d concurrent reservations were deadlock victims (Error 1213)", deadlocks, 2*rounds)
	}
}

// Connections the pool closes (idle churn) leave the sessions recorded with the lease once the
// server no longer has them: the recorded list stays the live sessions, however long the job runs.
func TestRecordedSessionsBounded(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	f, err := Acquire(ctx, l, FenceConfig{Owner: "a", Lease: time.Second, Pools: []Pool{pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	const churn = 100
	closed := map[int64]bool{}
	for i := 0; i < churn; i++ {
		c, err := l.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id, err := database.ConnID(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		closed[id] = true
		_ = c.Raw(func(any) error { return driver.ErrBadConn }) // the pool closes it, as an idle one
		_ = c.Close()
	}
	var still []int64
	if !testenv.Poll(10*time.Second, func() bool {
		h, err := readHolder(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		still = still[:0]
		for _, id := range h.sessions.Pools[pool.Name].IDs {
			if closed[id] {
				still = append(still, id)
			}
		}
		return len(still) == 0
	}) {
		t.Fatalf("%d of %d closed sessions still recorded with the lease after 10 s: %v", len(still), churn, still)
	}
}
