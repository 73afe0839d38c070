package commit

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// decidedJob is a new job's ledger with its fence held, on a fresh database.
func decidedJob(t *testing.T) (*sql.DB, context.Context, *ledger.Ledger, *ledger.Fence) {
	t.Helper()
	db := testenv.Open(t, testenv.Database(t))
	ctx := testenv.Context(t, time.Minute)
	if err := ledger.EnsureSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	led := ledger.New(db, "job_"+testenv.Suffix())
	f, err := ledger.Acquire(ctx, led, ledger.FenceConfig{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Release)
	return db, ctx, led, f
}

// emptyBranch prepares a branch with no write, as its session leaves it, and decides checkpoint
// id listing tags.
func emptyBranch(t *testing.T, ctx context.Context, db *sql.DB, led *ledger.Ledger, f *ledger.Fence, tag string, id int64, tags ...string) {
	t.Helper()
	emptyDecided(t, ctx, db, led, f, tag, ledger.Checkpoint{ID: id, Tags: tags, Offsets: partition.Offsets{}})
}

// emptyDecided is emptyBranch deciding c.
func emptyDecided(t *testing.T, ctx context.Context, db *sql.DB, led *ledger.Ledger, f *ledger.Fence, tag string, c ledger.Checkpoint) {
	t.Helper()
	// The branch is prepared as a subtask prepares it (xa.go's participant), and its connection
	// discarded, as when the process died.
	b, err := xaProtocol{}.newParticipant(ctx, db)
	if err == nil {
		err = b.Begin(ctx, tag)
	}
	if err == nil {
		_, err = b.Vote(ctx, Ballot{})
	}
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := led.Decide(ctx, f.Epoch(), nil, c); err != nil {
		t.Fatal(err)
	}
}

// MariaDB answers XA_RBROLLBACK (1402) to the commit of a prepared branch that ran no write. Relay
// prepares only branches that wrote (an epoch with nothing to write opens none), and the decision
// lists exactly those: a listed branch answering 1402 lost its rows, and recovery stops naming it;
// a branch of a decided checkpoint that the decision does not list lost nothing.
func TestRecoverBranchRolledBackByServer(t *testing.T) {
	db, ctx, led, f := decidedJob(t)
	job := led.Job()
	m := metrics.New("recovery_test")
	// Checkpoint 1's decision lists subtask 0 only; subtask 1's branch is not one relay prepared.
	emptyBranch(t, ctx, db, led, f, Tag(job, 1, 1), 1, Tag(job, 1, 0))
	r, err := SettleBranches(ctx, led, f.Epoch(), db, zap.NewNop(), m, metrics.OriginRecovery)
	if err != nil || r.Committed != 1 {
		t.Fatalf("recovering an unlisted empty branch of a decided checkpoint: %+v, %v; want it committed (nothing lost)", r, err)
	}
	// Checkpoint 2's decision lists its branch: relay prepared it after writing rows.
	lost := Tag(job, 2, 0)
	emptyBranch(t, ctx, db, led, f, lost, 2, lost)
	r, err = SettleBranches(ctx, led, f.Epoch(), db, zap.NewNop(), m, metrics.OriginRecovery)
	if !errors.Is(err, ledger.ErrBranchLost) || !strings.Contains(err.Error(), lost) {
		t.Fatalf("recovering a listed branch the server rolled back: %+v, %v; want ErrBranchLost naming %s", r, err, lost)
	}
	t.Logf("recovery stops with: %v", err)
}

// The resolver stops the process on a decided branch the server rolled back: it is gone from XA
// RECOVER after that one answer, so logging it and going on would leave no trace but a log line.
func TestResolverStopsOnLostBranch(t *testing.T) {
	db, ctx, led, f := decidedJob(t)
	lost := Tag(led.Job(), 2, 0)
	emptyBranch(t, ctx, db, led, f, lost, 2, lost)
	d := Deps{Sink: db, Ledger: led, Metrics: metrics.New("resolver_test"), Log: zap.NewNop()}
	r := &Resolver{Deps: d, Protocol: New(ModeXA, d),
		Settings:  Settings{Job: led.Job(), ResolveInterval: 100 * time.Millisecond, InDoubtAlertAge: time.Hour},
		Recovered: func() bool { return true }, FirstID: func() int64 { return 1000 }, Fence: func() *ledger.Fence { return f }}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := r.Loop(rctx); !errors.Is(err, ledger.ErrBranchLost) || !strings.Contains(err.Error(), lost) {
		t.Fatalf("resolver on a lost branch returned %v, want ErrBranchLost naming %s", err, lost)
	}
}

// A decided branch the server rolled back is gone from XA RECOVER after that one answer: the
// checkpoint must stay LOST across restarts (never marked COMMITTED), and the next start refuses,
// naming the checkpoint, the tag and the offsets it covered, until an operator acknowledges it.
func TestLostCheckpointSurvivesRestart(t *testing.T) {
	db, ctx, led, f := decidedJob(t)
	job := led.Job()
	m := metrics.New("lost_test")
	before := partition.Offsets{}
	before.Set("orders", 0, 40)
	if err := led.Decide(ctx, f.Epoch(), nil, ledger.Checkpoint{ID: 1, Offsets: before}); err != nil {
		t.Fatal(err)
	}
	lost := Tag(job, 2, 0)
	after := partition.Offsets{}
	after.Set("orders", 0, 50)
	emptyDecided(t, ctx, db, led, f, lost, ledger.Checkpoint{ID: 2, Tags: []string{lost}, Offsets: after, Records: 10})
	if _, err := SettleBranches(ctx, led, f.Epoch(), db, zap.NewNop(), m, metrics.OriginRecovery); !errors.Is(err, ledger.ErrBranchLost) {
		t.Fatalf("first recovery: %v, want ErrBranchLost", err)
	}
	// The restart: nothing is pending any more.
	if _, err := SettleBranches(ctx, led, f.Epoch(), db, zap.NewNop(), m, metrics.OriginRecovery); err != nil {
		t.Fatalf("second recovery: %v", err)
	}
	cs, err := led.Lookup(ctx, []int64{2})
	if err != nil {
		t.Fatal(err)
	}
	if st := cs[2].State; st != ledger.Lost {
		t.Fatalf("after a restart the lost checkpoint is %s, want %s", st, ledger.Lost)
	}
	p := New(ModeXA, Deps{Sink: db, Ledger: led, Metrics: m, Log: zap.NewNop()})
	_, _, err = p.Recover(ctx, f)
	if !errors.Is(err, ledger.ErrLossUnacknowledged) || !strings.Contains(err.Error(), lost) || !strings.Contains(err.Error(), "orders[0] 40-49") ||
		!strings.Contains(err.Error(), "--acknowledge-lost") {
		t.Fatalf("start with a lost checkpoint: %v; want ErrLossUnacknowledged naming %s, orders[0] 40-49 and --acknowledge-lost", err, lost)
	}
	t.Logf("start refused: %v", err)
	if err := led.AcknowledgeLost(ctx, 2, lost, "test"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Recover(ctx, f); err != nil {
		t.Fatalf("start after the loss was acknowledged: %v", err)
	}
}

// A held-mode job leaves nothing prepared: its resolver's pass asks the server no XA RECOVER (an
// XA-mode pass does, on the same connection: the test can tell).
func TestHeldResolverAsksNoXARecover(t *testing.T) {
	_, ctx, led, f := decidedJob(t)
	sink := testenv.Open(t, testenv.Database(t))
	sink.SetMaxOpenConns(1) // one connection: its session counters are the resolver's
	recovers := func() int64 {
		var name string
		var n int64
		if err := sink.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_xa_recover'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, mode := range []Mode{ModeHeld, ModeXA} {
		d := Deps{Sink: sink, Ledger: led, Metrics: metrics.New("resolver_held_test"), Log: zap.NewNop()}
		r := &Resolver{Deps: d, Protocol: New(mode, d), Settings: Settings{Job: led.Job(), ResolveInterval: time.Hour, InDoubtAlertAge: time.Hour},
			Recovered: func() bool { return true }, FirstID: func() int64 { return 1000 }, Fence: func() *ledger.Fence { return f }}
		before := recovers()
		if _, err := r.resolvePass(ctx, zap.NewNop(), true); err != nil {
			t.Fatal(err)
		}
		asked := recovers() - before
		if want := map[Mode]bool{ModeHeld: false, ModeXA: true}[mode]; (asked > 0) != want {
			t.Errorf("mode %s: the resolver's pass asked XA RECOVER %d times", mode, asked)
		}
	}
}
