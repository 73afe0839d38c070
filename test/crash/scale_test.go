package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// Three instances of one job, each SIGKILLed on its own at random moments (RELAY_TEST_SEED
// replays them) while orders keep arriving; at the end, exact totals and no branch left in doubt.
func TestThreeInstancesRandomKills(t *testing.T) {
	kills := 10
	if v, err := strconv.Atoi(os.Getenv("RELAY_CRASH_INSTANCE_KILLS")); err == nil && v > 0 {
		kills = v
	}
	e := newEnv(t, 6, "RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s")
	totals := loadgen.NewTotals()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := make(chan error, 1)
	go func() {
		produced <- e.produce(ctx, totals, loadgen.Options{Orders: 1 << 30, Rate: 3000, Batch: 40,
			AbortRate: 0.1, BadRate: 0.005, SKUs: 50, Windows: 5, Seed: 51})
	}()
	seed := testenv.Seed(t, "RELAY_TEST_SEED", 0) // instance i draws its kill times from stream i
	var wg sync.WaitGroup
	var mu sync.Mutex
	exits := map[string]int{}
	killed := make([]int, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			// Runs that stop by themselves do not count: each instance gets its number of real
			// SIGKILLs (within a bound on the runs). The layout comes from the --instance flag,
			// against a variable that names instance 0 for all three: a flag that did not override
			// it would leave two thirds of the partitions unread, and the totals wrong.
			for run := 0; killed[i] < kills && run < 3*kills; run++ {
				p := e.start("RELAY_INSTANCE=0/3", fmt.Sprintf("--instance=%d/3", i), "RELAY_SUBTASKS=1")
				select {
				case <-p.Done():
					err := p.Err()
					// An instance may stop by itself only when another one's resolver took its
					// fence over for a moment; it must say so.
					mu.Lock()
					exits[fmt.Sprint(err)]++
					mu.Unlock()
				case <-time.After(time.Duration(400+rng.IntN(2000)) * time.Millisecond):
					p.Kill()
					killed[i]++
				}
			}
		}(i)
	}
	wg.Wait()
	cancel()
	if err := <-produced; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	for reason, n := range exits {
		if !strings.Contains(reason, "exit status 3") {
			t.Fatalf("%d runs ended by themselves with %q, want only fenced exits (status 3)", n, reason)
		}
	}
	for i, n := range killed {
		if n < kills {
			t.Fatalf("instance %d was SIGKILLed %d times, want %d", i, n, kills)
		}
	}
	_, bad, good := totals.Snapshot()
	t.Logf("3 instances, SIGKILLs %v; %d good orders, %d bad, %d aborted; self-ended runs: %v", killed, good, len(bad), totals.Aborted, exits)
	e.finishInstances(totals, 3)
}

// Changing the number of instances with the job stopped keeps exactly-once: each partition resumes
// where its last owner stopped. An instance of a new layout refuses to start while one of the old
// layout runs.
func TestRescale(t *testing.T) {
	e := newEnv(t, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	for phase, m := range []int{2, 3, 1} {
		if err := e.produce(ctx, totals, loadgen.Options{Orders: 3000, Batch: 100, AbortRate: 0.1, SKUs: 40, Windows: 4,
			Seed: uint64(60 + phase), TxnID: fmt.Sprintf("rescale-%d-%s", phase, e.topic)}); err != nil {
			t.Fatal(err)
		}
		ps := e.startLayout(m)
		if phase == 0 {
			intruder := e.start("RELAY_INSTANCE=2/3", "RELAY_SUBTASKS=1")
			if err := intruder.wait(t, 30*time.Second); err == nil || !strings.Contains(tail(intruder.Log, 3), "stop them all") {
				t.Fatalf("an instance of another layout started next to a running one: %v\n%s", err, tail(intruder.Log, 3))
			}
		}
		time.Sleep(3 * time.Second) // the scenario: the layout runs a while, then stops wherever it got to
		e.stopAll(ps)
		if bs := e.branches(); len(bs) != 0 {
			t.Fatalf("layout %d left branches: %v", m, bs)
		}
	}
	e.finishInstances(totals, 1)
}

// An instance dies holding prepared, decided branches whose row locks another instance needs; the
// survivor's resolver takes the dead instance's fence and commits them as soon as its lease ran
// out (not a resolve interval later: the interval is the default 30s here), and the survivor goes on.
func TestSurvivorResolvesBlockingBranch(t *testing.T) {
	e := newEnv(t, 2, "RELAY_MYSQL_LOCK_WAIT_TIMEOUT=5s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	// Few keys: both partitions, hence both instances, write the same rows.
	few := loadgen.Options{Orders: 2000, Batch: 100, SKUs: 3, Windows: 1, Seed: 71}
	if err := e.produce(ctx, totals, few); err != nil {
		t.Fatal(err)
	}
	e.crashAt(crashpoint.AfterDecide, "RELAY_INSTANCE=0/2", "RELAY_SUBTASKS=1")
	blocking := e.branches()
	if len(blocking) == 0 {
		t.Fatal("instance 0 left no prepared branch")
	}
	survivor := e.startLayoutInstance(1, 2)
	start := time.Now()
	// The bound: recovery, then the dead instance's lease (10s); 25s, below the 30s resolve
	// interval, leaves room for a loaded machine.
	testenv.Eventually(t, 25*time.Second, func() bool { return len(e.branches()) == 0 }, "the survivor to resolve the dead instance's branches")
	took := time.Since(start)
	if ev := logEvents(t, survivor.Log, "resolving a stopped instance's branches"); len(ev) != 1 || ev[0]["instance"] != e.job+"/0" {
		t.Fatalf("survivor log: %v, want one take-over of %s/0", ev, e.job)
	}
	// Each resolution is logged just after its XA COMMIT returns: wait for the lines too.
	testenv.Eventually(t, 10*time.Second, func() bool { return len(logEvents(t, survivor.Log, "in-doubt branch resolved")) >= len(blocking) }, "one resolution logged per branch")
	for _, ev := range logEvents(t, survivor.Log, "in-doubt branch resolved") {
		if ev["action"] != "commit" || ev["origin"] != "resolver" {
			t.Fatalf("resolution %v, want a commit by the resolver (the branches were decided)", ev)
		}
	}
	t.Logf("%d blocking branches resolved by the survivor in %s", len(blocking), took.Round(time.Millisecond))
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 1000, Batch: 100, SKUs: 3, Windows: 1, Seed: 72, TxnID: "more-" + e.topic}); err != nil {
		t.Fatal(err)
	}
	e.stopAll([]*proc{survivor})
	e.finishInstances(totals, 2)
}

// startLayoutInstance starts instance i of m and waits for its recovery.
func (e *env) startLayoutInstance(i, m int) *proc {
	p := e.start(fmt.Sprintf("RELAY_INSTANCE=%d/%d", i, m), "RELAY_SUBTASKS=1")
	testenv.Eventually(e.t, 60*time.Second, func() bool { return len(logEvents(e.t, p.Log, "recovered")) > 0 }, "recovery")
	return p
}

// An instance frozen (SIGSTOP) while the job runs keeps its lock and its sessions, and with them
// the row locks of whatever it had open; instances share rows, so the other one's checkpoints
// would wait on them for as long as it stays frozen. Once its lease ran out, the other's resolver
// takes it over (its recorded sessions ended, its undecided branches rolled back) and the other
// instance commits again; the frozen one, woken, finds its fence gone, recovers, and the totals
// are exact.
func TestStalledInstanceTakenOver(t *testing.T) {
	t.Parallel() // bound by waits, not work: see TestMain
	for _, mode := range []string{"xa", "held"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, 2, "RELAY_MODE="+mode, "RELAY_MYSQL_LOCK_WAIT_TIMEOUT=5s", "RELAY_JOB_LEASE=4s")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			totals := loadgen.NewTotals()
			// Few keys: both partitions, hence both instances, write the same rows.
			few := func(seed uint64) loadgen.Options {
				return loadgen.Options{Orders: 1500, Batch: 50, SKUs: 3, Windows: 1, Seed: seed, TxnID: fmt.Sprintf("st-%s-%d", e.topic, seed)}
			}
			ps := e.startLayout(2)
			if err := e.produce(ctx, totals, few(81)); err != nil {
				t.Fatal(err)
			}
			frozen, other := ps[0], ps[1]
			if err := frozen.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, frozen.Stopped, "the SIGSTOP to land")
			stoppedAt := time.Now()
			if err := e.produce(ctx, totals, few(82)); err != nil {
				t.Fatal(err)
			}
			// The resolve interval is the default 30s: the takeover follows the lease, not the interval.
			testenv.Eventually(t, 25*time.Second, func() bool {
				return len(logEvents(t, other.Log, "ended a stalled instance's sessions: it holds its lock but stopped renewing its lease")) > 0
			}, "the other instance to take the frozen one over")
			ev := logEvents(t, other.Log, "ended a stalled instance's sessions: it holds its lock but stopped renewing its lease")[0]
			if ev["instance"] != e.job+"/0" {
				t.Fatalf("took over %v, want %s/0", ev["instance"], e.job)
			}
			t.Logf("frozen instance taken over %s after the SIGSTOP (lease 4s)", time.Since(stoppedAt).Round(time.Millisecond))
			if err := frozen.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			// Woken, it finds its fence gone and takes it again (a second "job fenced") before going on.
			testenv.Eventually(t, 30*time.Second, func() bool { return len(logEvents(t, frozen.Log, "job fenced")) >= 2 },
				"the woken instance to take its fence again")
			e.stopAll(ps)
			e.finishInstances(totals, 2)
		})
	}
}
