package commit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
)

// fakePart is a participant whose commit answers with err, or never when hang is set; commits
// counts the orders it got, answers the answers it sent.
type fakePart struct {
	mu      sync.Mutex
	commits int
	answers int
	err     error
	hang    bool
	// gate, when set, holds the reply until every participant sharing it got its order.
	gate *sync.WaitGroup
}

func (f *fakePart) commit(_ time.Time, done chan<- error) {
	f.mu.Lock()
	f.commits++
	f.mu.Unlock()
	if f.hang {
		return
	}
	go func() {
		if f.gate != nil {
			f.gate.Done()
			f.gate.Wait()
		}
		f.mu.Lock()
		f.answers++
		f.mu.Unlock()
		done <- f.err
	}()
}

func (f *fakePart) committed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.commits
}

// fakeDecider records the decisions written.
type fakeDecider struct {
	deadline  time.Time
	decideErr error
	markErr   error
	decided   []ledger.Checkpoint
	marked    []int64
	pruned    []int64
	onMark    func() // called as MarkCommitted starts
}

func (d *fakeDecider) Deadline() time.Time { return d.deadline }
func (d *fakeDecider) Decide(_ context.Context, c ledger.Checkpoint) error {
	if d.decideErr != nil {
		return d.decideErr
	}
	d.decided = append(d.decided, c)
	return nil
}
func (d *fakeDecider) MarkCommitted(_ context.Context, id int64) error {
	if d.onMark != nil {
		d.onMark()
	}
	if d.markErr != nil {
		return d.markErr
	}
	d.marked = append(d.marked, id)
	return nil
}
func (d *fakeDecider) Prune(_ context.Context, newest int64) error {
	d.pruned = append(d.pruned, newest)
	return nil
}

var testMetrics = metrics.New("coordinator_test")

// checkpointCase is one run of the coordinator over n participants.
type checkpointCase struct {
	name    string
	id      int64
	replies []Reply // sent before the coordinator runs; fewer than the participants: a timeout
	parts   func([]*fakePart)
	decider func(*fakeDecider)
	stagger bool
	held    bool // onePhase instead of twoPhase
	// want
	err        func(t *testing.T, err error)
	decisions  int // Decide calls that wrote
	commits    []int
	marked     bool
	committed  bool
	wantTags   []string
	wantPruned bool
}

func wantCheckpointError(cause string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var ce *CheckpointError
		if !errors.As(err, &ce) {
			t.Fatalf("error %v is not a checkpoint error", err)
		}
		if got := fault.Cause(err); got != cause {
			t.Fatalf("fault.Cause(%v) = %s, want %s", err, got, cause)
		}
		if fault.IsFatal(err) {
			t.Fatalf("error %v is fatal", err)
		}
	}
}

func noError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("checkpoint failed: %v", err)
	}
}

func TestCoordinator(t *testing.T) {
	ok := func(i int, tag string) Reply { return Reply{subtask: i, tag: tag} }
	connLost := fmt.Errorf("xa prepare: %w", mysql.ErrInvalidConn)
	for _, c := range []checkpointCase{{
		name:    "all prepared: decide, commit all, mark",
		replies: []Reply{ok(1, "b"), ok(0, "a"), ok(2, "c")},
		err:     noError, decisions: 1, commits: []int{1, 1, 1}, marked: true, committed: true,
		wantTags: []string{"b", "a", "c"},
	}, {
		name:    "a participant with nothing to write is not committed",
		replies: []Reply{ok(0, "a"), ok(1, ""), ok(2, "c")},
		err:     noError, decisions: 1, commits: []int{1, 0, 1}, marked: true, committed: true,
		wantTags: []string{"a", "c"},
	}, {
		name:    "nothing written: the offsets are still decided",
		replies: []Reply{ok(0, ""), ok(1, ""), ok(2, "")},
		err:     noError, decisions: 1, commits: []int{0, 0, 0}, marked: true, committed: true,
	}, {
		name:    "prepare error: no decision",
		replies: []Reply{ok(0, "a"), {subtask: 1, err: connLost}, ok(2, "c")},
		err:     wantCheckpointError("mysql_connection"), commits: []int{0, 0, 0},
	}, {
		name:    "prepare times out: no decision",
		replies: []Reply{ok(0, "a"), ok(2, "c")},
		err:     wantCheckpointError("timeout"), commits: []int{0, 0, 0},
	}, {
		name:    "lease deadline passed: no decision",
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		decider: func(d *fakeDecider) { d.deadline = time.Now().Add(-time.Millisecond) },
		err:     wantCheckpointError("fence_lost"), commits: []int{0, 0, 0},
	}, {
		name:    "fenced at the decision: returned as it is, fatal",
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		decider: func(d *fakeDecider) { d.decideErr = fmt.Errorf("decide 7: %w: owner epoch is 3", ledger.ErrFenced) },
		err: func(t *testing.T, err error) {
			var ce *CheckpointError
			if !errors.Is(err, ledger.ErrFenced) || !fault.IsFatal(err) || errors.As(err, &ce) {
				t.Fatalf("error %v: want ledger.ErrFenced, fatal, not a checkpoint error", err)
			}
		},
		commits: []int{0, 0, 0},
	}, {
		name:    "decision fails: checkpoint error, nothing committed",
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		decider: func(d *fakeDecider) { d.decideErr = fmt.Errorf("decide 7: commit: %w", mysql.ErrInvalidConn) },
		err:     wantCheckpointError("mysql_connection"), commits: []int{0, 0, 0},
	}, {
		name:    "commit fails after the decision: checkpoint error, the decision stands",
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		parts:   func(ps []*fakePart) { ps[1].err = fmt.Errorf("xa commit: %w", mysql.ErrInvalidConn) },
		err:     wantCheckpointError("mysql_connection"), decisions: 1, commits: []int{1, 1, 1},
		wantTags: []string{"a", "b", "c"},
	}, {
		name:    "commit hangs: the commit phase's deadline fails it",
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		parts:   func(ps []*fakePart) { ps[2].hang = true },
		err:     wantCheckpointError("timeout"), decisions: 1, commits: []int{1, 1, 1},
		wantTags: []string{"a", "b", "c"},
	}, {
		name:    "marking committed fails: checkpoint error",
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		decider: func(d *fakeDecider) { d.markErr = fmt.Errorf("mark 7 committed: %w", mysql.ErrInvalidConn) },
		err:     wantCheckpointError("mysql_connection"), decisions: 1, commits: []int{1, 1, 1},
		wantTags: []string{"a", "b", "c"},
	}, {
		name:    "production commits every branch at once",
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		parts:   gateAll,
		err:     noError, decisions: 1, commits: []int{1, 1, 1}, marked: true, committed: true,
		wantTags: []string{"a", "b", "c"},
	}, {
		name:    "crash-point builds commit the first branch alone",
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		parts:   gateAll, stagger: true,
		err: wantCheckpointError("timeout"), decisions: 1, commits: []int{1, 0, 0},
		wantTags: []string{"a", "b", "c"},
	}, {
		name:    "every hundredth checkpoint prunes the ledger",
		id:      300,
		replies: []Reply{ok(0, "a"), ok(1, "b"), ok(2, "c")},
		err:     noError, decisions: 1, commits: []int{1, 1, 1}, marked: true, committed: true,
		wantTags: []string{"a", "b", "c"}, wantPruned: true,
	}, {
		name:    "held: the barrier replies were the commits, no decision",
		replies: []Reply{ok(0, "a"), ok(1, ""), ok(2, "c")}, held: true,
		err: noError, commits: []int{0, 0, 0}, committed: true, wantTags: []string{"a", "c"},
	}, {
		name:    "held: a failed COMMIT fails the checkpoint",
		replies: []Reply{ok(0, "a"), {subtask: 1, err: connLost}, ok(2, "c")}, held: true,
		err: wantCheckpointError("mysql_connection"), commits: []int{0, 0, 0},
	}} {
		t.Run(c.name, func(t *testing.T) { runCheckpointCase(t, c) })
	}
}

// gateAll makes every participant's commit wait until all of them were ordered to commit.
func gateAll(ps []*fakePart) {
	gate := &sync.WaitGroup{}
	gate.Add(len(ps))
	for _, p := range ps {
		p.gate = gate
	}
}

func runCheckpointCase(t *testing.T, c checkpointCase) {
	fakes := []*fakePart{{}, {}, {}}
	if c.parts != nil {
		c.parts(fakes)
	}
	d := &fakeDecider{deadline: time.Now().Add(time.Hour)}
	if c.decider != nil {
		c.decider(d)
	}
	// A reader takes a snapshot without a COMMITTING row for a checkpoint boundary (docs/PIPELINES.md,
	// "What a reader sees"): the row may become COMMITTED only once every branch committed.
	var answeredAtMark []int // at the first MarkCommitted
	d.onMark = func() {
		if answeredAtMark == nil {
			for _, f := range fakes {
				f.mu.Lock()
				answeredAtMark = append(answeredAtMark, f.answers)
				f.mu.Unlock()
			}
		}
	}
	parts := make([]voter, len(fakes))
	for i, f := range fakes {
		parts[i] = f
	}
	var gotTags []string
	committed := false
	co := &Coordinator{parts: parts, decider: d, timeout: 200 * time.Millisecond, stagger: c.stagger,
		m: testMetrics, log: zap.NewNop()}
	id := c.id
	if id == 0 {
		id = 7
	}
	cp := &Pending{ID: id, Records: 42, Offsets: partition.Offsets{"orders": {0: 10}}, Replies: make(chan Reply, len(fakes)),
		Committed: func(tags []string, _ *zap.Logger) {
			committed, gotTags = true, tags
		}}
	for _, r := range c.replies {
		cp.Replies <- r
	}
	var err error
	if c.held {
		err = co.onePhase(context.Background(), cp)
	} else {
		err = co.twoPhase(context.Background(), cp)
	}
	c.err(t, err)
	if len(d.decided) != c.decisions {
		t.Errorf("%d decisions written, want %d", len(d.decided), c.decisions)
	}
	if len(d.decided) == 1 {
		dc := d.decided[0]
		if dc.ID != id || dc.Records != 42 || fmt.Sprint(dc.Tags) != fmt.Sprint(c.wantTags) || fmt.Sprint(dc.Offsets) != fmt.Sprint(cp.Offsets) {
			t.Errorf("decision %+v, want id %d, 42 records, tags %v, offsets %v", dc, id, c.wantTags, cp.Offsets)
		}
	}
	for i, f := range fakes {
		if got := f.committed(); got != c.commits[i] {
			t.Errorf("participant %d told to commit %d times, want %d", i, got, c.commits[i])
		}
	}
	for i, f := range fakes {
		if answeredAtMark != nil && answeredAtMark[i] != f.committed() {
			t.Errorf("the ledger row was marked COMMITTED when participant %d had answered %d of the %d commits it was told",
				i, answeredAtMark[i], f.committed())
		}
	}
	if marked := len(d.marked) == 1; marked != c.marked {
		t.Errorf("marked committed: %v, want %v", marked, c.marked)
	}
	if committed != c.committed {
		t.Errorf("recorded as committed: %v, want %v", committed, c.committed)
	}
	if committed && fmt.Sprint(gotTags) != fmt.Sprint(c.wantTags) {
		t.Errorf("committed tags %v, want %v", gotTags, c.wantTags)
	}
	if pruned := len(d.pruned) == 1; pruned != c.wantPruned {
		t.Errorf("pruned: %v, want %v", pruned, c.wantPruned)
	}
}

// The held barrier commits the offsets of the subtask's own partitions that moved since the last
// decision, and only those; XA's barrier commits none (its decision carries them all).
func TestBarrierOffsets(t *testing.T) {
	decided := partition.Offsets{"orders": {0: 5, 1: 7, 2: 9, 3: 11}}
	cut := partition.Offsets{"orders": {0: 5, 1: 8, 2: 10, 3: 11, 5: 3}, "refunds": {1: 1}}
	for i, want := range []string{
		"map[orders:map[2:10]]",
		"map[orders:map[1:8 5:3] refunds:map[1:1]]",
	} {
		if got := fmt.Sprint(heldProtocol{}.BarrierOffsets(decided, cut, i, 2)); got != want {
			t.Errorf("held subtask %d of 2 writes %s, want %s", i, got, want)
		}
	}
	if got := (xaProtocol{}).BarrierOffsets(decided, cut, 0, 2); got != nil {
		t.Errorf("xa subtask writes offsets %v at the barrier, want none", got)
	}
}
