package galera

// relay behind a real HAProxy in front of the three nodes, set up as deploy/haproxy and
// docs/RUNBOOK.md recommend for a Galera cluster: one active node, the others backups, a health check that passes only a
// node whose wsrep_local_state is 4 (Synced), sessions of a node marked down shut at once, and
// the backups' sessions shut when the active node is back (so relay's sessions never sit on two
// nodes at once). The active node is SIGKILLed under load and brought back while relay is
// SIGKILLed too: every move is the proxy's, relay only ever knows the proxy's address.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// startHAProxy runs HAProxy with deploy/haproxy's configuration and health check, their addresses
// and paths replaced by the test's (node 1 active, the others backups), and returns the DSN of the
// job's database through it.
func (e *env) startHAProxy() string {
	t := e.t
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("haproxy is not installed (scripts/galera.sh up installs Debian's haproxy): %v", err)
	}
	deploy := filepath.Join("..", "..", "deploy", "haproxy")
	cfgText, err := os.ReadFile(filepath.Join(deploy, "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	checkText, err := os.ReadFile(filepath.Join(deploy, "galera-check.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	check, cnf := filepath.Join(dir, "galera-check.sh"), filepath.Join(dir, "galera-check.cnf")
	if err := os.WriteFile(check, []byte(replaceAll(t, string(checkText), "/etc/haproxy/galera-check.cnf", cnf)), 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	text := replaceAll(t, string(cfgText), "bind :3306", fmt.Sprintf("bind 127.0.0.1:%d", port))
	text = replaceAll(t, text, "/etc/haproxy/galera-check.sh", check)
	for i, dsn := range e.dsns {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cnf, []byte(fmt.Sprintf("[client]\nuser=%s\npassword=%s\n", cfg.User, cfg.Passwd)), 0o600); err != nil {
			t.Fatal(err)
		}
		text = replaceAll(t, text, fmt.Sprintf("galera%d:3306", i+1), cfg.Addr)
	}
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", cfgPath)
	out, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); out.Close() })
	cfg, err := mysql.ParseDSN(e.dsns[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	dsn := cfg.FormatDSN()
	testenv.Eventually(t, 20*time.Second, func() bool { return nodeOf(t, dsn) == 1 }, "HAProxy to pass a connection to node 1")
	return dsn
}

// replaceAll replaces old in s, which must hold it.
func replaceAll(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("deploy/haproxy no longer holds %q: update the test with it", old)
	}
	return strings.ReplaceAll(s, old, new)
}

// freePort is a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// nodeOf is the Galera node (1-based) a new connection through dsn reaches now.
func nodeOf(t *testing.T, dsn string) int {
	db, err := harness.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name string
	if err := db.QueryRow("SELECT @@wsrep_node_name").Scan(&name); err != nil {
		return 0
	}
	var n int
	fmt.Sscanf(name, "node%d", &n)
	return n
}

// TestBehindHAProxy: held mode through HAProxy while orders stream in; relay is SIGKILLed every
// 1-3 s; node 1 (the active backend) is SIGKILLed, so HAProxy fails over to node 2, and restarted,
// so HAProxy moves every session back. relay must go on through each move and the totals must be
// exact; it may exit only when killed.
func TestBehindHAProxy(t *testing.T) {
	e := newEnv(t, 4)
	dsn := e.startHAProxy()
	const viaProxy = 4 // e.start's node index for the proxy's DSN
	e.dsns = append(e.dsns, dsn)
	totals := loadgen.NewTotals()
	sd := testenv.Seed(t, "RELAY_TEST_SEED", 0)
	stop := e.streamOrders(totals, 1500, sd)
	s := e.supervise(viaProxy, "RELAY_JOB_LEASE=3s")
	kill := func(i int) {
		runFor(time.Duration(1000+int((sd>>uint(i%40))%2000))*time.Millisecond, s)
		if s.r.Alive() {
			s.r.Kill()
		}
	}
	for i := 0; i < scaled(3, 5); i++ {
		kill(i)
	}
	e.waitCheckpointAbove(nil, 0, 60*time.Second)
	testenv.GaleraKill(t, 1)
	failedOver := time.Now()
	testenv.Eventually(t, 20*time.Second, func() bool { s.tick(); return nodeOf(t, dsn) == 2 }, "HAProxy to send new sessions to node 2")
	before := e.lastCheckpoint()
	testenv.Eventually(t, 60*time.Second, func() bool { s.tick(); return e.lastCheckpoint() > before }, "a checkpoint through node 2")
	resumed := time.Since(failedOver)
	for i := 0; i < scaled(2, 5); i++ {
		kill(i + 10)
	}
	testenv.GaleraScript(t, "start", "1")
	testenv.Eventually(t, 30*time.Second, func() bool { s.tick(); return nodeOf(t, dsn) == 1 }, "HAProxy to send new sessions back to node 1")
	before = e.lastCheckpoint()
	testenv.Eventually(t, 60*time.Second, func() bool { s.tick(); return e.lastCheckpoint() > before }, "a checkpoint through node 1 again")
	for i := 0; i < scaled(2, 5); i++ {
		kill(i + 20)
	}
	runFor(time.Second, s) // restarted after the last kill
	e.waitCheckpointAbove(s.r, e.lastCheckpoint(), 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.r.Stop(60 * time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, harness.Tail(s.r.Log, 30))
	}
	self := 0
	for code, n := range s.exits {
		if code != -1 {
			self += n
		}
	}
	t.Logf("behind HAProxy: %d starts, exits by status %v; first checkpoint through node 2 %s after node 1 was killed; %d good orders",
		s.starts, s.exits, resumed.Round(time.Millisecond), totals.Good)
	if self != 0 {
		t.Fatalf("relay exited by itself %d times behind HAProxy (exits by status %v); it should ride through a failover in-process", self, s.exits)
	}
	e.finish(totals)
}
