package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

func newLedger(t *testing.T) (*Ledger, context.Context) {
	db := testenv.Open(t, testenv.Database(t))
	ctx := testenv.Context(t, time.Minute)
	if err := EnsureSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	return New(db, "job_"+testenv.Suffix()), ctx
}

// A second owner fails fast naming the holder; a stale owner (its lock connection died and a new
// owner took over) can no longer write a decision, and learns it has lost the fence.
func TestFencing(t *testing.T) {
	l, ctx := newLedger(t)
	f1, err := Acquire(ctx, l, FenceConfig{Owner: "host-a pid 1"})
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Release()
	if _, err := Acquire(ctx, l, FenceConfig{Owner: "host-b pid 2"}); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "host-a pid 1") {
		t.Fatalf("second owner: got %v, want ErrFenced naming host-a pid 1", err)
	}
	if err := l.Decide(ctx, f1.Epoch(), nil, Checkpoint{ID: 1, Tags: []string{"x-1-0"}, Offsets: partition.Offsets{"t": {0: 5}}}); err != nil {
		t.Fatalf("owner's decision: %v", err)
	}
	// The owner's lock connection dies (as in a network partition); a new owner takes over.
	var id int64
	if err := f1.conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := l.db.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
		t.Fatal(err)
	}
	// The lock is free once the server ended the killed session.
	var f2 *Fence
	if !testenv.Poll(5*time.Second, func() bool {
		f2, err = Acquire(ctx, l, FenceConfig{Owner: "host-b pid 2"})
		return err == nil
	}) {
		t.Fatalf("takeover after the owner's lock connection died: %v", err)
	}
	defer f2.Release()
	if f2.Epoch() != f1.Epoch()+1 {
		t.Fatalf("new epoch %d, want %d", f2.Epoch(), f1.Epoch()+1)
	}
	err = l.Decide(ctx, f1.Epoch(), nil, Checkpoint{ID: 2, Offsets: partition.Offsets{}})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("stale owner's decision: got %v, want ErrFenced", err)
	}
	if ok, _ := l.Verdict(ctx, 2); ok {
		t.Fatal("stale owner's decision row exists")
	}
	select {
	case <-f1.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("stale owner was not told it lost the fence")
	}
	if err := l.Decide(ctx, f2.Epoch(), nil, Checkpoint{ID: 2, Offsets: partition.Offsets{}}); err != nil {
		t.Fatalf("new owner's decision: %v", err)
	}
}

// Verdicts, the last decision and the COMMITTING → COMMITTED move.
func TestCheckpointRows(t *testing.T) {
	l, ctx := newLedger(t)
	f, err := Acquire(ctx, l, FenceConfig{Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	if last, err := l.LastDecided(ctx); err != nil || last != nil {
		t.Fatalf("new job: last=%v err=%v", last, err)
	}
	offs := partition.Offsets{"orders": {0: 10, 3: 99}}
	for id := int64(1); id <= 3; id++ {
		if err := l.Decide(ctx, f.Epoch(), nil, Checkpoint{ID: id, Tags: []string{"a-1-0", "a-1-1"}, Offsets: offs, Records: 7}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Decide(ctx, f.Epoch(), nil, Checkpoint{ID: 3, Offsets: offs}); err == nil {
		t.Fatal("a second decision for the same checkpoint was accepted")
	}
	if err := l.MarkCommitted(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c, err := l.Committing(ctx)
	if err != nil || len(c) != 2 || c[0].ID != 2 {
		t.Fatalf("committing = %v, %v", c, err)
	}
	last, err := l.LastDecided(ctx)
	if err != nil || last.ID != 3 || !last.Offsets.Equal(offs) || len(last.Tags) != 2 || last.Records != 7 {
		t.Fatalf("last = %+v, %v", last, err)
	}
	for id, want := range map[int64]bool{1: true, 3: true, 4: false} {
		if got, err := l.Verdict(ctx, id); err != nil || got != want {
			t.Fatalf("verdict(%d) = %v, %v; want %v", id, got, err, want)
		}
	}
}

// A ledger written by a newer relay is refused.
func TestNewerSchemaRefused(t *testing.T) {
	l, ctx := newLedger(t)
	if _, err := l.db.ExecContext(ctx, `UPDATE relay_ledger_meta SET value = '99' WHERE name = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	if err := EnsureSchema(ctx, l.db); !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("got %v, want ErrNewerSchema", err)
	}
}

// A version-3 ledger (without relay_claims) is upgraded in place, keeping its rows, and a claim on
// it counts in the new table; EnsureSchema run again (another process starting) is a no-op.
func TestSchemaUpgradeFrom3(t *testing.T) {
	l, ctx := newLedger(t)
	f, err := Acquire(ctx, l, FenceConfig{Owner: "before the upgrade"})
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
	for _, q := range []string{`DROP TABLE relay_claims`, `UPDATE relay_ledger_meta SET value = '3' WHERE name = 'schema_version'`} {
		if _, err := l.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := EnsureSchema(ctx, l.db); err != nil {
			t.Fatal(err)
		}
	}
	var v string
	if err := l.db.QueryRowContext(ctx, `SELECT value FROM relay_ledger_meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != strconv.Itoa(SchemaVersion) {
		t.Fatalf("schema version %q (%v), want %d", v, err, SchemaVersion)
	}
	f, err = Acquire(ctx, l, FenceConfig{Owner: "after the upgrade"})
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
	var epoch, claims int64
	if err := l.db.QueryRowContext(ctx, `SELECT j.owner_epoch, c.claims FROM relay_jobs j JOIN relay_claims c ON c.job = j.job WHERE j.job = ?`,
		l.job).Scan(&epoch, &claims); err != nil {
		t.Fatal(err)
	}
	if epoch != 2 || claims != 1 {
		t.Fatalf("after the upgrade: epoch %d, claims %d; want epoch 2 (kept) and 1 claim counted", epoch, claims)
	}
}

// A sink table has one owner job: a second job's claim is refused naming the first and changes
// nothing; the owner claims again freely; the same table name in another sink database is free.
func TestTableClaims(t *testing.T) {
	a, ctx := newLedger(t)
	b := New(a.DB(), "other_"+testenv.Suffix())
	if err := a.ClaimTables(ctx, "sinkdb", "order_stats_minute", "order_details"); err != nil {
		t.Fatal(err)
	}
	if err := a.ClaimTables(ctx, "sinkdb", "order_stats_minute"); err != nil {
		t.Fatalf("the owner's second claim: %v", err)
	}
	err := b.ClaimTables(ctx, "sinkdb", "order_stats_b", "order_stats_minute")
	if !errors.Is(err, ErrTableOwned) || !strings.Contains(err.Error(), "sinkdb.order_stats_minute is written by job "+a.Job()) {
		t.Fatalf("second job's claim: %v, want ErrTableOwned naming job %s", err, a.Job())
	}
	if free, err := b.CheckTables(ctx, "sinkdb", "order_stats_b"); err != nil || len(free) != 1 {
		t.Fatalf("a refused claim must claim nothing: unclaimed %v, %v", free, err)
	}
	if _, err := b.CheckTables(ctx, "sinkdb", "order_details"); !errors.Is(err, ErrTableOwned) {
		t.Fatalf("check of another job's table: %v, want ErrTableOwned", err)
	}
	if err := b.ClaimTables(ctx, "otherdb", "order_stats_minute"); err != nil {
		t.Fatalf("the same name in another sink database: %v", err)
	}
}

// A recorded meaning stays unless replaced: recording another one is ErrMeaningChanged naming
// both, and changes nothing; replace overwrites it, drop forgets it; another job sees none of them.
func TestTableMeanings(t *testing.T) {
	a, ctx := newLedger(t)
	b := New(a.DB(), "other_"+testenv.Suffix())
	if err := a.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":300}`, "t2": `{"w":60}`}, nil, false); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":300}`}, nil, false); err != nil {
		t.Fatalf("recording the same meaning again: %v", err)
	}
	err := a.RecordMeanings(ctx, "sinkdb", map[string]string{"t2": `{"w":60}`, "t1": `{"w":90}`}, []string{"t2"}, false)
	if !errors.Is(err, ErrMeaningChanged) || !strings.Contains(err.Error(), `sinkdb.t1 was recorded for job `+a.Job()+` as {"w":300}`) {
		t.Fatalf("another meaning: %v, want ErrMeaningChanged naming the recorded one", err)
	}
	if got, err := a.Meanings(ctx, "sinkdb"); err != nil || len(got) != 2 || got["t1"] != `{"w":300}` {
		t.Fatalf("a refused record changed the meanings: %v, %v", got, err)
	}
	if got, err := b.Meanings(ctx, "sinkdb"); err != nil || len(got) != 0 {
		t.Fatalf("another job sees %v, %v", got, err)
	}
	if err := a.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":90}`}, []string{"t2"}, true); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Meanings(ctx, "sinkdb"); err != nil || len(got) != 1 || got["t1"] != `{"w":90}` {
		t.Fatalf("after replace and drop: %v, %v", got, err)
	}
}

// A first-use record replaces a recorded meaning only while nothing of the job can be in the table:
// once the job committed (read under lock, not from an earlier comparison), or while another
// instance of it holds its fence, another meaning is ErrMeaningChanged and changes nothing, and a
// forgotten table stays recorded.
func TestTableMeaningsFirstUse(t *testing.T) {
	a, ctx := newLedger(t)
	fa, err := Acquire(ctx, a, FenceConfig{Owner: "spec A"})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Release()
	if err := a.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":300}`}, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":60}`}, nil, true); err != nil {
		t.Fatalf("nothing committed, no other instance: the meaning is replaced: %v", err)
	}
	offs := partition.Offsets{}
	offs.Set("topic", 0, 5)
	if err := a.writeOffsets(ctx, a.DB(), 1, offs); err != nil {
		t.Fatal(err)
	}
	err = a.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":300}`}, []string{"t2"}, true)
	if !errors.Is(err, ErrMeaningChanged) {
		t.Fatalf("first use after the job committed: %v, want ErrMeaningChanged", err)
	}
	if got, err := a.Meanings(ctx, "sinkdb"); err != nil || got["t1"] != `{"w":60}` {
		t.Fatalf("a refused first use changed the meaning: %v, %v", got, err)
	}

	db := a.DB()
	job := "inst_" + testenv.Suffix()
	i0, i1 := NewInstance(db, job, 0, 2), NewInstance(db, job, 1, 2)
	f0, err := Acquire(ctx, i0, FenceConfig{Owner: "instance 0, spec A"})
	if err != nil {
		t.Fatal(err)
	}
	if err := i0.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":300}`, "t2": `{"w":60}`}, nil, true); err != nil {
		t.Fatal(err)
	}
	f1, err := Acquire(ctx, i1, FenceConfig{Owner: "instance 1, spec B"})
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Release()
	err = i1.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":90}`}, []string{"t2"}, true)
	if !errors.Is(err, ErrMeaningChanged) {
		t.Fatalf("first use while another instance runs another meaning: %v, want ErrMeaningChanged", err)
	}
	if err := i1.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":300}`}, []string{"t2"}, true); err != nil {
		t.Fatalf("the same meaning as the running instance: %v", err)
	}
	if got, err := i1.Meanings(ctx, "sinkdb"); err != nil || len(got) != 2 || got["t1"] != `{"w":300}` {
		t.Fatalf("while instance 0 runs, its meanings stay (t2 too): %v, %v", got, err)
	}
	f0.Release()
	if err := i1.RecordMeanings(ctx, "sinkdb", map[string]string{"t1": `{"w":90}`}, []string{"t2"}, true); err != nil {
		t.Fatalf("instance 0 stopped, nothing committed: the meaning is replaced: %v", err)
	}
	if got, err := i1.Meanings(ctx, "sinkdb"); err != nil || len(got) != 1 || got["t1"] != `{"w":90}` {
		t.Fatalf("after the replace and the drop: %v, %v", got, err)
	}
}

// Instances of one job start together and claim the same tables at once: every claim succeeds
// (none deadlocks on another's lock).
func TestTableClaimsConcurrent(t *testing.T) {
	l, ctx := newLedger(t)
	for round := 0; round < 10; round++ {
		tables := []string{fmt.Sprintf("stats_%d", round), fmt.Sprintf("details_%d", round)}
		errs := make(chan error, 4)
		for i := 0; i < cap(errs); i++ {
			go func() { errs <- l.ClaimTables(ctx, "sinkdb", tables...) }()
		}
		for i := 0; i < cap(errs); i++ {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: concurrent claim by the same job: %v", round, err)
			}
		}
	}
}

// A resume offset may sit anywhere from the low to the high watermark, both included; outside,
// the refusal says which side, what it means and the reset that resumes at the partition's start.
func TestInRange(t *testing.T) {
	for _, off := range []int64{10, 15, 20} {
		if err := InRange("orders", 3, off, 10, 20); err != nil {
			t.Fatalf("offset %d within [10, 20]: %v", off, err)
		}
	}
	for off, want := range map[int64]string{
		21: "resumes at offset 21, beyond the high watermark 20",
		9:  "resumes at offset 9, below the low watermark 10 (the partition holds offsets [10, 20)): records 9 to 9 were deleted",
	} {
		err := InRange("orders", 3, off, 10, 20)
		if !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), "topic orders partition 3: the ledger "+want) ||
			!strings.Contains(err.Error(), "relay offsets reset --to orders:3=10") {
			t.Fatalf("offset %d: %v, want ErrOutOfRange saying %q and the reset", off, err, want)
		}
	}
}

// XA_RBROLLBACK on the commit of a decided branch is lost data exactly when the decision lists the
// branch (relay lists only branches that wrote rows).
func TestRolledBackClassification(t *testing.T) {
	c := Checkpoint{ID: 7, Tags: []string{"j-7-0", "j-7-1"}, Records: 12}
	if err := c.RolledBack("j-7-1"); !errors.Is(err, ErrBranchLost) || !strings.Contains(err.Error(), "j-7-1") {
		t.Fatalf("listed branch rolled back: %v, want ErrBranchLost naming j-7-1", err)
	}
	if err := c.RolledBack("j-7-2"); err != nil {
		t.Fatalf("unlisted (empty) branch rolled back: %v, want nil", err)
	}
}

// The queries tests and benchmarks read the ledger through (harness/committed): every row's state,
// the rows after an id, the COMMITTED rows oldest first, the newest of them, and the first with
// records after an id.
func TestCommittedQueries(t *testing.T) {
	l, ctx := newLedger(t)
	if last, err := l.LastCommitted(ctx); err != nil || last != nil {
		t.Fatalf("new job: last committed %v, %v: want none", last, err)
	}
	f, err := Acquire(ctx, l, FenceConfig{Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	records := map[int64]int64{1: 5, 2: 0, 3: 7, 4: 9}
	for id := int64(1); id <= 4; id++ {
		offs := partition.Offsets{"orders": {0: 10 * id}}
		if err := l.Decide(ctx, f.Epoch(), nil, Checkpoint{ID: id, Tags: []string{"a-1-0"}, Offsets: offs, Records: records[id]}); err != nil {
			t.Fatal(err)
		}
		if id < 4 {
			if err := l.MarkCommitted(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	states, err := l.States(ctx)
	if err != nil || len(states) != 4 || states[1] != Committed || states[3] != Committed || states[4] != Committing {
		t.Fatalf("states = %v, %v", states, err)
	}
	cs, err := l.CommittedCheckpoints(ctx)
	if err != nil || len(cs) != 3 || cs[0].ID != 1 || cs[2].ID != 3 || cs[2].CommittedAt == nil || cs[2].Records != 7 {
		t.Fatalf("committed = %+v, %v: want 1..3 oldest first", cs, err)
	}
	last, err := l.LastCommitted(ctx)
	if err != nil || last == nil || last.ID != 3 || last.Offsets["orders"][0] != 30 {
		t.Fatalf("last committed = %+v, %v: want checkpoint 3 at offset 30", last, err)
	}
	if since, err := l.Since(ctx, 2); err != nil || len(since) != 2 || since[0].ID != 3 || since[1].State != Committing {
		t.Fatalf("since 2 = %+v, %v: want 3 and the COMMITTING 4", since, err)
	}
	for after, want := range map[int64]int64{0: 1, 1: 3, 3: 0} { // 2 has no records, 4 is not committed
		first, err := l.FirstCommittedAfter(ctx, after)
		if err != nil || (want == 0) != (first == nil) || (first != nil && first.ID != want) {
			t.Fatalf("first committed after %d = %+v, %v: want %d (0: none)", after, first, err, want)
		}
	}
}
