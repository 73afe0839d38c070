package crash

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/internal/xa"
)

// A decided branch the server rolled back stops relay once with the lost rows, and every start
// after it too (the branch is gone from XA RECOVER, the ledger's LOST row remembers), until an
// operator acknowledges the loss: status names it, the acknowledgement prints its plan and acts
// only with --yes, and relay then starts.
func TestLostBranchRefusedUntilAcknowledged(t *testing.T) {
	e := ranJob(t, 1, 13)
	last := e.lastCheckpoint()
	lost := commit.Tag(e.job, last.ID, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := xa.NewBranch(ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(ctx); err != nil { // empty: the server answers its commit with XA_RBROLLBACK
		t.Fatal(err)
	}
	b.Close()
	// The decision lists it, as if it had written rows.
	if _, err := e.db.ExecContext(ctx, `UPDATE relay_checkpoints SET tags = CONCAT_WS(',', NULLIF(tags, ''), ?), state = 'COMMITTING',
		committed_at = NULL WHERE job = ? AND checkpoint_id = ?`, lost, e.job, last.ID); err != nil {
		t.Fatal(err)
	}
	for run, want := range []string{"its rows are lost", "no operator has acknowledged the loss"} {
		p := e.start()
		err := p.wait(t, 90*time.Second)
		var ee *exec.ExitError
		out := tail(p.Log, 5)
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, want) || !strings.Contains(out, lost) {
			t.Fatalf("start %d with a lost branch: %v, want exit 1 saying %q and naming %s\n%s", run, err, want, lost, out)
		}
		if run == 1 && !strings.Contains(out, "--acknowledge-lost") {
			t.Fatalf("the refusal does not say how to acknowledge:\n%s", out)
		}
	}
	if stdout, stderr, code := e.cli(nil, "status"); code != 0 || !lineHas(stdout, lost) || !strings.Contains(stdout, "LOST CHECKPOINT") {
		t.Fatalf("status with a lost checkpoint: exit %d, want it listed with %s\n%s%s", code, lost, stdout, stderr)
	}
	stdout, stderr, code := e.cli(nil, "txns", "resolve", lost, "--acknowledge-lost")
	if code != 5 || !strings.Contains(stdout, "plan: acknowledge") {
		t.Fatalf("acknowledge without --yes: exit %d, want 5 and the plan\n%s%s", code, stdout, stderr)
	}
	if stdout, stderr, code = e.cli(nil, "txns", "resolve", lost, "--acknowledge-lost", "--yes"); code != 0 {
		t.Fatalf("acknowledge --yes: exit %d\n%s%s", code, stdout, stderr)
	}
	p := e.start()
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, p.Log, "recovered")) > 0 }, "relay to start after the acknowledgement")
	p.exited(t)
	p.Kill()
}
