package crash

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
)

// Each named crash point leaves a distinct state; the restart must resolve it as stated and end
// with exact totals. The expected outcome of the in-doubt branches is part of each case.
func TestCrashPoints(t *testing.T) {
	cases := []struct {
		point string
		// state right after the crash
		wantBranches  string // "none", "some" (all subtasks), "one"
		wantDecided   bool   // the crashed checkpoint has a ledger row
		wantOutcome   string // what recovery does to the listed branches: commit or rollback
		thenCrashAt   string // a second crash, during the recovery of the first
		afterSecondBr string
	}{
		{point: crashpoint.AfterFlush, wantBranches: "none", wantDecided: false, wantOutcome: "rollback"},
		{point: crashpoint.AfterPrepare, wantBranches: "some", wantDecided: false, wantOutcome: "rollback"},
		{point: crashpoint.AfterDecide, wantBranches: "some", wantDecided: true, wantOutcome: "commit"},
		{point: crashpoint.BetweenCommits, wantBranches: "one", wantDecided: true, wantOutcome: "commit"},
		{point: crashpoint.AfterCommit, wantBranches: "none", wantDecided: true, wantOutcome: "commit"},
		{point: crashpoint.AfterDecide, wantBranches: "some", wantDecided: true, wantOutcome: "commit",
			thenCrashAt: crashpoint.RecoveryBetween, afterSecondBr: "one"},
	}
	for _, tc := range cases {
		name := tc.point
		if tc.thenCrashAt != "" {
			name += "+" + tc.thenCrashAt
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			totals := loadgen.NewTotals()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := e.produce(ctx, totals, loadgen.Options{Orders: 4000, Batch: 100, AbortRate: 0.2, BadRate: 0.01, Seed: 7}); err != nil {
				t.Fatal(err)
			}
			e.crashAt(tc.point)
			// Keep producing while relay is down: the restart must take old and new records alike.
			if err := e.produce(ctx, totals, loadgen.Options{Orders: 1000, Batch: 100, AbortRate: 0.2, Seed: 8}); err != nil {
				t.Fatal(err)
			}
			branches := e.branches()
			checkBranches(t, tc.point, tc.wantBranches, len(branches))
			rows := e.ledgerRows()
			crashed := int64(1) // the first checkpoint is the one that carried data
			if st, ok := rows[crashed]; ok != tc.wantDecided {
				t.Fatalf("after %s: ledger row for checkpoint %d present=%v (%s), want %v", tc.point, crashed, ok, st, tc.wantDecided)
			} else if ok && st != string(ledger.Committing) {
				t.Fatalf("after %s: ledger row %s, want COMMITTING", tc.point, st)
			}
			for _, b := range branches {
				if b.Checkpoint != crashed {
					t.Fatalf("unexpected branch %s", b.Tag)
				}
			}
			if tc.thenCrashAt != "" {
				p := e.crashAt(tc.thenCrashAt)
				resolved := logEvents(t, p.Log, "in-doubt branch resolved")
				if len(resolved) != 1 || resolved[0]["action"] != tc.wantOutcome {
					t.Fatalf("recovery before the second crash resolved %v, want one %s", resolved, tc.wantOutcome)
				}
				left := e.branches()
				checkBranches(t, tc.thenCrashAt, tc.afterSecondBr, len(left))
				branches = left
			}
			e.finish(totals)
			// An id is never handed out twice, even when its first use left no trace in MySQL.
			if _, ok := e.ledgerRows()[crashed]; ok != tc.wantDecided {
				t.Fatalf("checkpoint id %d was used again after the crash", crashed)
			}
			// The restart's recovery resolved exactly the branches listed after the crash, as expected.
			got := map[string]string{}
			for _, ev := range logEvents(t, e.logs[len(e.logs)-1], "in-doubt branch resolved") {
				got[ev["tag"].(string)] = ev["action"].(string)
			}
			if len(got) != len(branches) {
				t.Fatalf("recovery resolved %v, want exactly the %d listed branches %v", got, len(branches), branches)
			}
			for _, b := range branches {
				if got[b.Tag] != tc.wantOutcome {
					t.Fatalf("branch %s: recovery did %q, want %s", b.Tag, got[b.Tag], tc.wantOutcome)
				}
			}
		})
	}
}

func checkBranches(t *testing.T, point, want string, n int) {
	t.Helper()
	ok := map[string]bool{"none": n == 0, "some": n == 2, "one": n == 1}[want]
	if !ok {
		t.Fatalf("after %s: %d prepared branches of the job, want %s", point, n, want)
	}
}

// Held mode has no branch in doubt: each subtask's COMMIT carries its rows and its partitions'
// offsets together. A crash after the commits (the analogue of a COMMIT whose reply was lost) must
// resume exactly at the committed offsets; a crash before a subtask's COMMIT leaves that subtask's
// partitions at their start rows (its rows vanished with the connection) and they are read again.
func TestHeldCrashPoints(t *testing.T) {
	for _, tc := range []struct {
		point string
		// partitions whose offset row moved past its start (0: a new topic) right after the
		// crash: all of them, or fewer (the crashing subtask's did not; the other subtask may or
		// may not have committed first)
		wantAll bool
	}{
		{point: crashpoint.AfterCommit, wantAll: true},
		{point: crashpoint.AfterFlush, wantAll: false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			e := newEnv(t, 2, "RELAY_MODE=held")
			totals := loadgen.NewTotals()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := e.produce(ctx, totals, loadgen.Options{Orders: 4000, Batch: 100, AbortRate: 0.2, BadRate: 0.01, Seed: 17}); err != nil {
				t.Fatal(err)
			}
			// The first checkpoint must hold both partitions' records, all already in Kafka: it is
			// cut only once reading paused for a second (a 200 ms cut could come between the two
			// partitions' first batches).
			e.crashAt(tc.point, "RELAY_CHECKPOINT_INTERVAL=2s", "RELAY_CHECKPOINT_IDLE_AFTER=1s")
			offs, _, err := ledger.New(e.db, e.job).PartitionOffsets(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(offs[e.topic]) != 2 {
				t.Fatalf("after %s: offset rows for %d of 2 partitions (%v): every partition's start is recorded before it is read", tc.point, len(offs[e.topic]), offs)
			}
			n := 0
			for _, off := range offs[e.topic] {
				if off > 0 {
					n++
				}
			}
			if (n == 2) != tc.wantAll {
				t.Fatalf("after %s: offsets of %d of 2 partitions moved past their start (%v), want all: %v", tc.point, n, offs, tc.wantAll)
			}
			if err := e.produce(ctx, totals, loadgen.Options{Orders: 1000, Batch: 100, AbortRate: 0.2, Seed: 18}); err != nil {
				t.Fatal(err)
			}
			e.finish(totals)
			// The restart resumed every partition with a row exactly there.
			rec := logEvents(t, e.logs[1], "recovered")
			if len(rec) == 0 {
				t.Fatalf("the restart logged no recovery\n%s", tail(e.logs[1], 20))
			}
			resumed, _ := rec[0]["offsets"].(map[string]any)[e.topic].(map[string]any)
			for part, off := range offs[e.topic] {
				if got, _ := resumed[fmt.Sprint(part)].(float64); int64(got) != off {
					t.Fatalf("partition %d resumed at %v, the ledger committed %d", part, resumed[fmt.Sprint(part)], off)
				}
			}
		})
	}
}

// crashAt runs relay with the named crash point armed and waits for it to die there.
func (e *env) crashAt(point string, extra ...string) *proc {
	e.t.Helper()
	p := e.start(append([]string{"RELAY_CRASH_AT=" + point}, extra...)...)
	if err := p.wait(e.t, 60*time.Second); !killedBySIGKILL(err) {
		e.t.Fatalf("relay was not killed at %s: %v\n%s", point, err, tail(p.Log, 20))
	}
	return p
}
