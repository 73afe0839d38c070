package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// TestRandomKills SIGKILLs relay at random moments while orders keep arriving (in Kafka
// transactions, some aborted, some records bad), restarts it each time, and finally requires exact
// totals. RELAY_CRASH_KILLS sets the number of kills (default 20); RELAY_CRASH_KILL_DB=1 also
// SIGKILLs MariaDB now and then (only a MariaDB that scripts/services.sh started); RELAY_TEST_SEED
// replays the load and the kill schedule.
func TestRandomKills(t *testing.T) {
	kills := 20
	if v, err := strconv.Atoi(os.Getenv("RELAY_CRASH_KILLS")); err == nil && v > 0 {
		kills = v
	}
	for _, mode := range []struct {
		name  string
		extra []string
	}{
		{"xa", []string{"RELAY_CHECKPOINT_BUFFER_KEYS=200"}},
		{"xa-append", []string{"RELAY_CHECKPOINT_BUFFER_KEYS=200", "RELAY_MYSQL_DETAIL_TABLE=order_details"}},
		{"held-append", []string{"RELAY_MODE=held", "RELAY_MYSQL_DETAIL_TABLE=order_details"}},
	} {
		if only := os.Getenv("RELAY_CRASH_MODE"); only != "" && only != mode.name {
			continue
		}
		t.Run(mode.name, func(t *testing.T) { randomKills(t, kills, mode.extra...) })
	}
}

func randomKills(t *testing.T, kills int, extra ...string) {
	killDB := os.Getenv("RELAY_CRASH_KILL_DB") == "1"
	e := newEnv(t, 3, extra...)
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 0), 1))
	t.Logf("job %s topic %s, %d kills, kill MariaDB: %v", e.job, e.topic, kills, killDB)

	totals := loadgen.NewTotals()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := make(chan error, 1)
	go func() {
		// A steady stream that outlasts the kills; the test stops it once the kills are done.
		produced <- e.produce(ctx, totals, loadgen.Options{Orders: 1 << 30, Rate: 4000, Batch: 40,
			AbortRate: 0.1, BadRate: 0.005, SKUs: 300, Windows: 30, Seed: rng.Uint64()})
	}()

	progressed := 0
	lastMax := int64(0)
	selfExits := map[string]int{} // runs that ended before their kill, by exit status
	points := []string{crashpoint.AfterFlush, crashpoint.AfterPrepare, crashpoint.AfterDecide,
		crashpoint.BetweenCommits, crashpoint.AfterCommit, crashpoint.RecoveryBetween}
	for k := 1; k <= kills; k++ {
		// Every third run also arms a named crash point at a random pass: random timing alone
		// rarely lands in the few milliseconds between prepare and commit.
		var arm []string
		if k%3 == 0 {
			arm = append(arm, fmt.Sprintf("RELAY_CRASH_AT=%s:%d", points[rng.IntN(len(points))], 1+rng.IntN(8)))
		}
		p := e.start(arm...)
		if k%2 == 0 && len(arm) == 0 && !killDB {
			// Half the runs are killed only once they committed something, so kills land in a
			// working relay however slow the machine is; the others may die during start-up.
			deadline := time.Now().Add(60 * time.Second)
			for e.maxCheckpoint() <= lastMax && time.Now().Before(deadline) {
				select {
				case <-p.Done():
					err := p.Err()
					t.Fatalf("run %d exited by itself: %v\n%s\n%s", k, err, tail(p.Log, 30), e.serverState())
				case <-time.After(50 * time.Millisecond):
				}
			}
			if e.maxCheckpoint() <= lastMax {
				t.Fatalf("run %d committed nothing in 60s\n%s\n%s", k, tail(p.Log, 30), e.serverState())
			}
		}
		time.Sleep(time.Duration(300+rng.IntN(2200)) * time.Millisecond) // the scenario: run a random while, then kill
		if killDB && k%10 == 0 {
			restartService(t, "mariadb")
		}
		select {
		case <-p.Done():
			err := p.Err()
			// A run may end by itself only at its crash point, or because MariaDB was killed under it.
			if !killDB && !(len(arm) > 0 && killedBySIGKILL(err)) {
				t.Fatalf("run %d exited by itself: %v\n%s\n%s", k, err, tail(p.Log, 30), e.serverState())
			}
			selfExits[fmt.Sprint(err)]++
		default:
			p.Kill()
		}
		if os.Getenv("RELAY_CRASH_DEBUG") != "" {
			t.Logf("run %d log:\n%s", k, tail(p.Log, 8))
		}
		if max := e.maxCheckpoint(); max > lastMax {
			progressed++
			lastMax = max
		}
	}
	cancel()
	if err := <-produced; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	_, bad, good := totals.Snapshot()
	t.Logf("%d kills; %d runs advanced the ledger (last checkpoint %d); %d good orders, %d bad, %d aborted; runs that ended by themselves: %v",
		kills, progressed, lastMax, good, len(bad), totals.Aborted, selfExits)
	kinds := map[string]bool{}
	for _, b := range bad {
		kinds[b.Reason] = true
	}
	if len(kinds) != len(loadgen.BadReasons()) {
		t.Fatalf("bad records of %d kinds reached Kafka, want all %d: %v", len(kinds), len(loadgen.BadReasons()), kinds)
	}
	if progressed < kills/3 {
		t.Fatalf("only %d of %d killed runs committed anything: the kills did not hit a working relay\nlast run:\n%s\n%s",
			progressed, kills, tail(e.logs[len(e.logs)-1], 30), e.serverState())
	}
	e.finish(totals)
	// Subtasks cannot block each other at READ COMMITTED (no inherited gap locks); a lock wait
	// would end a session with cause lock_conflict, so the count says whether that still holds.
	waits := 0
	for _, l := range e.logs {
		for _, ev := range logEvents(t, l, "session failed; restarting in-process through recovery") {
			if ev["cause"] == "lock_conflict" {
				waits++
			}
		}
	}
	t.Logf("sessions ended by a lock wait timeout or deadlock: %d", waits)
}

func (e *env) maxCheckpoint() int64 {
	_, id, _ := ledger.New(e.db, e.job).PartitionOffsets(context.Background())
	return id
}

// restartService SIGKILLs a server scripts/services.sh started (mariadb or kafka) and starts it
// again.
func restartService(t *testing.T, name string) {
	pid, err := harness.ServicePID("../..", name)
	if err != nil {
		t.Skipf("killing %s needs one started by scripts/services.sh: %v", name, err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	testenv.Poll(10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
	cmd := exec.Command("scripts/services.sh", "up")
	cmd.Dir = "../.."
	// Without the RELAY_TEST_* names the script starts its own MariaDB again instead of trusting them.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAY_TEST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restarting %s: %v\n%s", name, err, out)
	}
}
