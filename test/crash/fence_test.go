package crash

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/testenv"
)

// A second relay with the same job fails fast (exit 3) with an error naming the running one; the
// running one is unaffected.
func TestDuplicateInstanceFenced(t *testing.T) {
	e := newEnv(t, 1)
	a := e.start()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(logEvents(t, a.Log, "recovered")) > 0 }, "first relay running")
	b := e.start()
	err := b.wait(t, 20*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("second relay: %v, want exit status 3\n%s", err, tail(b.Log, 10))
	}
	out, _ := os.ReadFile(b.Log)
	if !strings.Contains(string(out), "running elsewhere") || !strings.Contains(string(out), fmt.Sprintf("pid %d", a.PID())) {
		t.Fatalf("second relay's error does not name the holder (pid %d):\n%s", a.PID(), tail(b.Log, 5))
	}
	select {
	case <-a.Done():
		err := a.Err()
		t.Fatalf("first relay stopped: %v", err)
	default:
	}
	_ = a.Signal(syscall.SIGTERM)
	if err := a.wait(t, 30*time.Second); err != nil {
		t.Fatalf("first relay did not stop cleanly: %v", err)
	}
}
