package ledger

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// A held-mode session starts from offsets read under the fence: a transaction of the previous
// session whose COMMIT is still under way (its client gave up on it, the server goes on) is
// waited for, not read around; and the new session's owner epoch fails whatever the previous
// session of the same process would still try to decide.
func TestNewSessionReadsUnderFence(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	f, err := Acquire(ctx, l, FenceConfig{Owner: "a", Pools: []Pool{pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	old := f.Epoch()
	held := func(epoch, id, next int64) (*sql.Tx, error) {
		tx, err := l.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		offs := partition.Offsets{}
		offs.Set("orders", 0, next)
		return tx, l.WriteHeldOffsets(ctx, tx, epoch, nil, id, offs)
	}
	first, err := held(old, 1, 50)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	// The previous session's last transaction: offsets written, its COMMIT not through yet.
	last, err := held(old, 2, 100)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		offs partition.Offsets
		err  error
	}
	got := make(chan result, 1)
	go func() {
		offs, _, err := f.NewSession(ctx, l)
		got <- result{offs, err}
	}()
	// Commit once the new session runs its locking read of the owner row (which waits for this
	// transaction), or has returned without one. The wait itself is not always in INNODB_LOCK_WAITS:
	// MariaDB takes the lock of a primary-key lookup while it plans the statement ("Statistics").
	var r result
	testenv.Eventually(t, 10*time.Second, func() bool {
		select {
		case r = <-got:
			return true
		default:
			var n int
			if err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
				WHERE DB = DATABASE() AND INFO LIKE 'SELECT owner_epoch%FROM relay_jobs%FOR UPDATE'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
	}, "the new session to return or run its locking read")
	if err := last.Commit(); err != nil {
		t.Fatal(err)
	}
	if r.offs == nil && r.err == nil {
		r = <-got
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if off, _ := r.offs.Get("orders", 0); off != 100 {
		t.Fatalf("new session resumes partition 0 at %d, but the previous session committed up to 100 (it would fold 50..99 again)", off)
	}
	stale, err := held(old, 3, 150)
	if stale != nil {
		_ = stale.Rollback()
	}
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the previous session's epoch %d still decides after the new session started: %v, want ErrFenced", old, err)
	}
}

// Renewals go on across new sessions: none runs with the epoch a new session just left. (A lease
// of a second renews every 200 ms; new sessions follow each other for 3 s, about 15 renewals.)
func TestNewSessionKeepsLease(t *testing.T) {
	l, pool, ctx := trackedLedger(t)
	f, err := Acquire(ctx, l, FenceConfig{Owner: "a", Lease: time.Second, Pools: []Pool{pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	first := f.Epoch()
	n := int64(0)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); n++ {
		if _, _, err := f.NewSession(ctx, l); err != nil {
			t.Fatalf("session %d: %v", n, err)
		}
		select {
		case <-f.Lost():
			t.Fatalf("fence lost after %d new sessions: a renewal ran with a left epoch", n+1)
		default:
		}
	}
	if got := f.Epoch(); got != first+n {
		t.Fatalf("epoch %d after %d sessions from %d", got, n, first)
	}
	t.Logf("%d new sessions", n)
}
