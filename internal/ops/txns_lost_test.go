package ops

import (
	"errors"
	"strings"
	"testing"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// A manual commit the server answers with XA_RBROLLBACK is told apart as recovery tells it: a
// branch the decision does not list was empty (success, audited); one it lists lost its rows (fails
// with ErrBranchLost, the checkpoint is LOST, audited, shown by txns list and status), until an
// operator acknowledges it with a plan and --yes.
func TestResolveServerRolledBack(t *testing.T) {
	e, ctx := newEnv(t, 1)
	unlisted, lost := tag(e, 1, 1), tag(e, 2, 0)
	prepareWriting(t, ctx, e, unlisted, "").Close()
	prepareWriting(t, ctx, e, lost, "").Close()
	offs := partition.Offsets{}
	offs.Set("orders", 0, 7)
	decide(t, ctx, e, 1, offs, tag(e, 1, 0))
	offs = partition.Offsets{}
	offs.Set("orders", 0, 12)
	decide(t, ctx, e, 2, offs, lost)

	r, err := Resolve(ctx, e, unlisted, true, false, yes)
	if err != nil || !r.ServerRolledBack {
		t.Fatalf("commit of an unlisted empty branch: %+v, %v; want success, rolled back by the server", r, err)
	}
	_, err = Resolve(ctx, e, lost, true, false, yes)
	if !errors.Is(err, ledger.ErrBranchLost) {
		t.Fatalf("commit of a listed branch the server rolled back: %v; want ErrBranchLost", err)
	}
	for _, tg := range []string{unlisted, lost} {
		if listed(t, ctx, e, tg) {
			t.Fatalf("%s is still prepared after the server rolled it back", tg)
		}
	}
	audit, err := e.Ledger.AuditLog(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range audit {
		got[a.Target] = a.Action
	}
	if got[unlisted] != ledger.AuditRollback || got[lost] != ledger.AuditBranchLost {
		t.Fatalf("audit rows %v; want %s: %s and %s: %s", got, unlisted, ledger.AuditRollback, lost, ledger.AuditBranchLost)
	}
	l, err := ListTxns(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := l.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if len(l.Lost) != 1 || l.Lost[0].ID != 2 || !strings.Contains(out.String(), "orders[0] 7-11") {
		t.Fatalf("txns list after the loss: %+v\n%s\nwant checkpoint 2 LOST with offsets orders[0] 7-11", l.Lost, out.String())
	}
	s, err := Status(ctx, e, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Lost) != 1 || s.Lost[0].LostTags[0] != lost {
		t.Fatalf("status lost: %+v; want checkpoint 2 naming %s", s.Lost, lost)
	}
	no := func(Plan) (bool, error) { return false, nil }
	if _, err := AcknowledgeLost(ctx, e, lost, no); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("acknowledge without --yes: %v; want ErrNotConfirmed", err)
	}
	if _, err := AcknowledgeLost(ctx, e, lost, yes); err != nil {
		t.Fatal(err)
	}
	if left, err := e.Ledger.Lost(ctx); err != nil || len(left) != 0 {
		t.Fatalf("lost after the acknowledgement: %+v, %v; want none", left, err)
	}
	t.Logf("txns list while lost:\n%s", out.String())
}
