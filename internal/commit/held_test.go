package commit

import (
	"errors"
	"testing"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
)

// A held subtask commits under the owner epoch of the session that made it: once an in-process
// restart took a new one (Fence.NewSession, on the same fence), the old session's COMMIT is
// refused, even though the fence it reads is the live one.
func TestHeldOldSessionRefused(t *testing.T) {
	db, ctx, led, f := decidedJob(t)
	d := Deps{Sink: db, Ledger: led, Metrics: metrics.New("held_test"), Log: zap.NewNop()}
	h := heldProtocol{d}
	env := &Env{Deps: d, Settings: Settings{Job: led.Job()}, Proto: h}
	if _, _, err := h.resume(ctx, f); err != nil {
		t.Fatal(err)
	}
	old := NewSubtask(env, 0, 0, f)
	defer func() {
		if old.txn != nil {
			old.txn.Close()
		}
	}()
	if _, _, err := h.resume(ctx, f); err != nil { // the next session of the same process
		t.Fatal(err)
	}
	offs := partition.Offsets{}
	offs.Set("t", 0, 10)
	var r Reply
	_, err := old.barrier(ctx, Work{Epoch: 5, Offsets: offs}, &r)
	if !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("the old session's held COMMIT after a new session: %v (tag %q); want ErrFenced", err, r.tag)
	}
	t.Logf("old session refused: %v", err)
}
