package crash

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// A job moves from 2 instances to a consumer group of 3 members and back to 3 instances, with
// orders produced in each phase: relay run refuses a process of the other kind until `relay
// membership switch --yes` recorded the switch, the switch is refused while a process of the job
// runs and without --yes changes nothing, and the totals are exactly the oracle's at the end of
// every phase (each partition resumed where its last owner stopped).
func TestMembershipSwitch(t *testing.T) {
	e := newEnv(t, 8)
	ctx := context.Background()
	totals := loadgen.NewTotals()
	group := []string{"RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1"}
	produce := func(seed uint64) {
		t.Helper()
		if err := e.produce(ctx, totals, loadgen.Options{Orders: 600, Batch: 100, SKUs: 20, Windows: 2, Seed: seed}); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp := func(ps []*proc) {
		t.Helper()
		x := e.expected(totals)
		if !testenv.Poll(90*time.Second, func() bool {
			for _, p := range ps {
				p.exited(t)
			}
			return e.diffOracle(x) == ""
		}) {
			t.Fatalf("totals differ from the oracle's:\n%s", e.diffOracle(x))
		}
	}

	produce(61)
	e.finishInstances(totals, 2)

	// A member of a group on a job that ran as instances: refused before it reads anything.
	p := e.start(group...)
	err := p.wait(t, 60*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(tail(p.Log, 3), "relay membership switch") {
		t.Fatalf("a group member on an instance job: %v, want exit 3 naming relay membership switch\n%s", err, tail(p.Log, 5))
	}

	// The switch, refused while an instance runs, a plan only without --yes.
	running := e.startLayout(2)
	stdout, stderr, code := e.cli(group, "membership", "switch", "--yes")
	if code != 3 || !strings.Contains(stdout+stderr, "still up") {
		t.Fatalf("membership switch with instances up: exit %d, want 3\n%s%s", code, stdout, stderr)
	}
	e.stopAll(running)
	stdout, stderr, code = e.cli(group, "membership", "switch")
	if code != 5 || !strings.Contains(stdout, "switch from 2 instances to a consumer group") {
		t.Fatalf("membership switch without --yes: exit %d, want 5 and the plan\n%s%s", code, stdout, stderr)
	}
	if p := e.start(group...); p.wait(t, 60*time.Second) == nil {
		t.Fatal("a group member started after a switch that was not applied")
	}
	if stdout, stderr, code = e.cli(group, "membership", "switch", "--yes"); code != 0 {
		t.Fatalf("membership switch --yes: exit %d\n%s%s", code, stdout, stderr)
	}

	// Three members, orders meanwhile; an instance is now the one refused.
	var members []*proc
	for range 3 {
		members = append(members, e.start(group...))
	}
	produce(62)
	caughtUp(members)
	if p := e.start(); p.wait(t, 60*time.Second) == nil {
		t.Fatal("an instance started while the job is a group")
	}
	e.stopAll(members)

	// And back to three instances.
	if stdout, stderr, code = e.cli([]string{"RELAY_INSTANCE=0/3", "RELAY_SUBTASKS=1"}, "membership", "switch", "--yes"); code != 0 {
		t.Fatalf("membership switch back: exit %d\n%s%s", code, stdout, stderr)
	}
	produce(63)
	e.finishInstances(totals, 3)
}
