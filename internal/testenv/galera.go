// Galera: the 3-node MariaDB Galera cluster on loopback that scripts/galera.sh runs, for the tests
// of relay on a cluster (test/galera).
//
// Invariant: a test gets the cluster with every node synced, started by the script when it is not
// running (never by the hot path of other tests: only tests that ask for it start it, and none
// under -short); without it a test skips, unless RELAY_TEST_REQUIRE=1, where it fails. Node faults
// go through the script, which acts only on the nodes it started.

package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// GaleraNodes is how many nodes scripts/galera.sh runs.
const GaleraNodes = 3

var galeraOnce struct {
	sync.Once
	dsns []string
	err  error
}

// Galera returns the admin DSN of each node (index 0 is node 1), starting the cluster when needed.
func Galera(t testing.TB) []string {
	t.Helper()
	serverTest(t, "the Galera test cluster") // before the script would start it
	galeraOnce.Do(func() { galeraOnce.dsns, galeraOnce.err = galeraUp() })
	if err := galeraOnce.err; err != nil {
		if os.Getenv("RELAY_TEST_REQUIRE") == "1" {
			t.Fatalf("the Galera test cluster did not start: %v", err)
		}
		t.Skipf("the Galera test cluster did not start (scripts/galera.sh up): %v", err)
	}
	return galeraOnce.dsns
}

// GaleraScript runs scripts/galera.sh with args (start N, kill N, up) and fails the test on error.
func GaleraScript(t testing.TB, args ...string) {
	t.Helper()
	if out, err := galeraRun(args...); err != nil {
		t.Fatalf("scripts/galera.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func galeraUp() ([]string, error) {
	out, err := galeraRun("up")
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	dsns := make([]string, GaleraNodes)
	for _, line := range strings.Split(out, "\n") {
		var n int
		var dsn string
		if _, err := fmt.Sscanf(line, "RELAY_TEST_GALERA_DSN%d=%s", &n, &dsn); err == nil && n >= 1 && n <= GaleraNodes {
			dsns[n-1] = strings.ReplaceAll(dsn, `\`, "") // the script prints shell-quoted values
		}
	}
	for i, d := range dsns {
		if d == "" {
			return nil, fmt.Errorf("scripts/galera.sh up printed no DSN for node %d:\n%s", i+1, out)
		}
	}
	return dsns, nil
}

func galeraRun(args ...string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "galera.sh"), args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// repoRoot is the directory holding go.mod, above the test's working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// GaleraKill SIGKILLs node n (1-based) at once, from this process (the script would start a shell
// first: milliseconds a test racing a COMMIT cannot spare); `GaleraScript(t, "start", n)` brings it
// back.
func GaleraKill(t testing.TB, n int) {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, ".cache", "galera", fmt.Sprintf("node%d.pid", n)))
	if err != nil {
		t.Fatalf("node %d pid: %v", n, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("node %d pid: %v", n, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill node %d (pid %d): %v", n, pid, err)
	}
}
