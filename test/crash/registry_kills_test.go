// Registry formats under kills and registry faults (issue 36), against real Kafka, MariaDB and an
// Apicurio Registry of the test's own (it is SIGKILLed and restarted, which the shared one must not
// be while other packages' tests use it).
//
// Invariant: whatever the kills, the registry restart and the registry's blackhole, MySQL ends
// equal to the oracle's fold of what Kafka committed (read through the registry by the oracle's own
// decoder), and only the records loadgen made bad are dead-lettered: nothing good ever is because
// the registry was away.

package crash

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"context"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

// ownRegistry is an Apicurio Registry this test started (scripts/registry.sh with its own port and
// state directory: its H2 file keeps every schema id through a restart).
type ownRegistry struct {
	url   string
	state string
	env   []string
	// mu makes one restart at a time (Lock): the CI tier's runs share the registry, and two
	// restarts at once would kill each other's new process or find its port taken. A run's end,
	// whose oracle reads the registry and does not wait out a restart, holds it for reading.
	mu sync.RWMutex
}

// startOwnRegistry starts a registry of the test's own, stopped when the test ends.
func startOwnRegistry(t *testing.T) *ownRegistry {
	t.Helper()
	_, port, err := net.SplitHostPort(testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	r := &ownRegistry{state: t.TempDir()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAY_TEST_REGISTRY=") {
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "RELAY_SVC_REGISTRY_PORT="+port, "RELAY_SVC_REGISTRY_STATE="+r.state)
	r.url = fmt.Sprintf("http://127.0.0.1:%s/apis/ccompat/v7", port)
	r.run(t, "start")
	t.Cleanup(func() { r.run(t, "stop") })
	return r
}

func (r *ownRegistry) run(t *testing.T, verb string) {
	t.Helper()
	cmd := exec.Command("scripts/registry.sh", verb)
	cmd.Dir, cmd.Env = "../..", r.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("registry.sh %s: %v\n%s", verb, err, out)
	}
}

// restart SIGKILLs the registry and starts it again; it says how long it was away.
func (r *ownRegistry) restart(t *testing.T) time.Duration {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := os.ReadFile(r.state + "/registry.pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	testenv.Poll(30*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
	r.run(t, "start")
	return time.Since(start)
}

// TestRegistryKills SIGKILLs relay at random moments (a named crash point armed every third run)
// while orders keep arriving in a registry format (Avro, Protobuf, JSON Schema); the writer schema
// changes early in the run (a second version, old writers still writing); every third run, in
// turn, the registry is SIGKILLed and restarted, or blackholed for 4 s as a vanished host (connects
// succeed, nothing answers), as the run starts: a restarted relay has no writer schema yet and must
// ask for each, so every fault lands on one that needs the registry. Exact totals, only loadgen's
// bad records dead-lettered, and relay never exits by itself for the registry.
//
// Two specs: the default one, and the sales spec (three aggregates, a filter, five fields of the
// record: testenv.SalesSpec) naming its format in its own input block.
//
// By default each format runs once, with 5 kills, the three at once: the CI tier (Avro in XA with
// the sales spec, Protobuf held with the append sink, JSON Schema in XA).
// RELAY_CRASH_KILLS=N (make crashtest) runs every format in XA with each spec and held with the
// append sink, N/4 kills each, and RELAY_CRASH_KILL_DB=1 also SIGKILLs MariaDB every fifth run.
func TestRegistryKills(t *testing.T) {
	kills, long := 5, false
	if v, err := strconv.Atoi(os.Getenv("RELAY_CRASH_KILLS")); err == nil && v > 0 {
		kills, long = max(v/4, 5), true
	}
	reg := startOwnRegistry(t)
	runs := []struct {
		name  string
		sales bool
		extra []string
	}{
		{"xa", false, []string{"RELAY_CHECKPOINT_BUFFER_KEYS=200"}},
		{"held-append", false, []string{"RELAY_MODE=held", "RELAY_MYSQL_DETAIL_TABLE=order_details"}},
		{"xa-sales", true, []string{"RELAY_CHECKPOINT_BUFFER_KEYS=200"}},
	}
	ci := map[string]string{"avro": "xa-sales", "protobuf": "held-append", "json_schema": "xa"}
	for _, format := range []string{"avro", "protobuf", "json_schema"} {
		for _, run := range runs {
			if !long && ci[format] != run.name {
				continue
			}
			t.Run(format+"-"+run.name, func(t *testing.T) {
				if !long {
					t.Parallel() // the CI tier's three runs at once: each has its own job and topic
				}
				registryKills(t, reg, format, run.sales, kills, run.extra...)
			})
		}
	}
}

// salesSpecIn is the sales spec's configuration file with its input in format: its path, its text
// and its plan.
func salesSpecIn(t *testing.T, format string) (string, string, *spec.Plan) {
	t.Helper()
	text := strings.Replace(testenv.SalesSpec, "  input:\n", "  input:\n    format: "+format+"\n", 1)
	if text == testenv.SalesSpec {
		t.Fatal("the sales spec has no input block")
	}
	path, plan := specConfig(t, text)
	return path, text, plan
}

// hasExited says whether p ended.
func hasExited(p *proc) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

func registryKills(t *testing.T, reg *ownRegistry, format string, sales bool, kills int, extra ...string) {
	killDB := os.Getenv("RELAY_CRASH_KILL_DB") == "1"
	u, err := url.Parse(reg.url)
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr := testenv.FreeAddr(t)
	proxy := testenv.NewFaultProxyAt(t, proxyAddr, u.Host)
	relayURL := "http://" + proxyAddr + u.Path
	var e *env
	load := loadgen.Options{Orders: 1 << 30, Rate: 3000, Batch: 40, AbortRate: 0.1, BadRate: 0.005, SKUs: 300, Windows: 30, EvolveAfter: 500}
	if sales {
		// The spec names its format itself (RELAY_INPUT_FORMAT is the default spec's).
		e = newEnv(t, 3, append([]string{"RELAY_SCHEMA_REGISTRY_URL=" + relayURL}, extra...)...)
		path, text, plan := salesSpecIn(t, format)
		e.format, e.flags = format, []string{"--config=" + path}
		if e.oracle, err = oracleSpec(text); err != nil {
			t.Fatal(err)
		}
		load.Plan, load.Distinct = plan, map[string]int{"shop": 6, "region": 3}
	} else {
		e = formatEnv(t, format, 3, relayURL, extra...)
	}
	e.registry = reg.url // loadgen and the oracle go straight to it
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 0), 36))
	t.Logf("job %s topic %s, %d kills, kill MariaDB: %v", e.job, e.topic, kills, killDB)

	totals := loadgen.NewTotals()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := make(chan error, 1)
	load.Seed = rng.Uint64()
	go func() { produced <- e.produce(ctx, totals, load) }()
	points := []string{crashpoint.AfterFlush, crashpoint.AfterPrepare, crashpoint.AfterDecide,
		crashpoint.BetweenCommits, crashpoint.AfterCommit, crashpoint.RecoveryBetween}
	progressed, lastMax := 0, int64(0)
	for k := 1; k <= kills; k++ {
		var arm []string
		if k%3 == 0 {
			arm = append(arm, fmt.Sprintf("RELAY_CRASH_AT=%s:%d", points[rng.IntN(len(points))], 1+rng.IntN(8)))
		}
		select {
		case err := <-produced:
			// loadgen registers its second schema in the first run, before any registry fault.
			t.Fatalf("loadgen stopped before run %d: %v", k, err)
		default:
		}
		p := e.start(arm...)
		// The faults land as the run starts: it has no writer schema yet and must ask for each.
		switch {
		case k%6 == 2:
			t.Logf("run %d: the registry restarted in %v", k, reg.restart(t).Round(time.Millisecond))
		case k%6 == 5:
			proxy.BlackholeHost(4 * time.Second)
			t.Logf("run %d: the registry is blackholed for 4 s", k)
		}
		// Every run commits something before it is killed (or dies at its crash point), so kills
		// land in a working relay however long the registry kept it waiting.
		deadline := time.Now().Add(90 * time.Second)
		for e.maxCheckpoint() <= lastMax && time.Now().Before(deadline) && !hasExited(p) {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Duration(300+rng.IntN(2000)) * time.Millisecond)
		if killDB && k%5 == 0 {
			restartService(t, "mariadb")
		}
		select {
		case <-p.Done():
			err := p.Err()
			if !killDB && !(len(arm) > 0 && killedBySIGKILL(err)) {
				t.Fatalf("run %d exited by itself: %v\n%s\n%s", k, err, tail(p.Log, 30), e.serverState())
			}
		default:
			p.Kill()
		}
		if m := e.maxCheckpoint(); m > lastMax {
			progressed, lastMax = progressed+1, m
		}
	}
	cancel()
	if err := <-produced; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	_, bad, good := totals.Snapshot()
	t.Logf("%d kills; %d runs advanced the ledger; %d good orders, %d bad, %d aborted", kills, progressed, good, len(bad), totals.Aborted)
	if progressed < kills/2 {
		t.Fatalf("only %d of %d killed runs committed anything\n%s", progressed, kills, tail(e.logs[len(e.logs)-1], 30))
	}
	func() {
		reg.mu.RLock()
		defer reg.mu.RUnlock() // a failed finish ends the goroutine: the others' restarts must not wait for ever
		e.finish(totals)
	}()
	waited := 0
	for _, l := range e.logs {
		waited += len(logEvents(t, l, "waiting for the schema registry (the record is not bad input: it is decoded again)"))
		waited += len(logEvents(t, l, "waiting for schema_registry"))
	}
	t.Logf("registry waits logged across the runs: %d", waited)
	if waited == 0 {
		t.Errorf("no run waited for the registry: the faults did not land on a relay that needed it")
	}
}
