package ops

import (
	"bytes"
	"strings"
	"testing"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// txns list (and status) tells apart who settles each prepared branch: the checkpoint the live
// owner is deciding now is in flight, not something to roll back; a decided one awaits its
// commit; an undecided one of an earlier session is the live owner's resolver's; with no owner
// alive, recovery's at the next run.
func TestTxnStates(t *testing.T) {
	e, ctx := newEnv(t, 1)
	f, err := ledger.Acquire(ctx, e.Ledger, ledger.FenceConfig{Owner: "host-a pid 7"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	old, _, err := f.ReserveIDs(ctx, e.Ledger, 1) // an earlier session's block
	if err != nil {
		t.Fatal(err)
	}
	cur, _, err := f.ReserveIDs(ctx, e.Ledger, 1) // the running session's
	if err != nil {
		t.Fatal(err)
	}
	inFlight, decided, leftBehind, unknown := tag(e, cur, 0), tag(e, cur+1, 1), tag(e, old+3, 0), "gone"+testenv.Suffix()+"-3-0"
	for _, tg := range []string{inFlight, decided, leftBehind, unknown} {
		prepare(t, ctx, e, tg)
	}
	if err := e.Ledger.Decide(ctx, f.Epoch(), nil, ledger.Checkpoint{ID: cur + 1, Tags: []string{decided}, Offsets: partition.Offsets{}}); err != nil {
		t.Fatal(err)
	}
	check := func(want map[string]string, text ...string) {
		t.Helper()
		l, err := ListTxns(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		got := byTag(l.Branches)
		for tg, st := range want {
			if got[tg].State != st {
				t.Errorf("%s: state %q (%s), want %q", tg, got[tg].State, got[tg].StateText(), st)
			}
		}
		var b bytes.Buffer
		if err := l.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		for _, s := range text {
			if !strings.Contains(b.String(), s) {
				t.Errorf("txns list lacks %q:\n%s", s, b.String())
			}
		}
		r, err := Status(ctx, e, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, br := range r.Branches {
			if br.State != want[br.Tag] {
				t.Errorf("status: %s: state %q, want %q", br.Tag, br.State, want[br.Tag])
			}
		}
	}
	check(map[string]string{inFlight: StateInFlight, decided: StateAwaitingCommit, leftBehind: StateLeftBehind, unknown: StateUnknown},
		"in flight (live owner host-a pid 7, epoch", "decided, awaiting commit (live owner", "undecided, left by an earlier session")
	f.Release()
	check(map[string]string{inFlight: StateOrphaned, decided: StateAwaitingCommit, leftBehind: StateOrphaned, unknown: StateUnknown},
		"undecided, no owner alive: recovery rolls it back", "decided, awaiting commit (no owner alive")
}

// A branch's age is never negative, even for a decision the server's clock puts after the list
// was made (a clock stepped back, or a decision that landed meanwhile).
func TestTxnAgeNeverNegative(t *testing.T) {
	e, ctx := newEnv(t, 1)
	tg := tag(e, 5, 0)
	prepare(t, ctx, e, tg)
	decide(t, ctx, e, 5, partition.Offsets{}, tg)
	if _, err := e.Sink.ExecContext(ctx, `UPDATE relay_checkpoints SET decided_at = UTC_TIMESTAMP(6) + INTERVAL 5 SECOND
		WHERE job = ? AND checkpoint_id = 5`, e.Config.Job.Name); err != nil {
		t.Fatal(err)
	}
	l, err := ListTxns(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if got := byTag(l.Branches)[tg]; got.AgeSeconds == nil || *got.AgeSeconds != 0 {
		t.Fatalf("%s decided 5 s ahead of the server's clock: age %v, want 0", tg, got.Age())
	}
}
