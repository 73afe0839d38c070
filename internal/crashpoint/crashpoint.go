//go:build crashpoints

// Crash points compiled in (the crashpoints build tag): Hit kills or freezes the process where
// RELAY_CRASH_AT says, as the package doc describes.

package crashpoint

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether crash points are compiled in.
const Enabled = true

var (
	once   sync.Once
	target string
	after  int
	stop   bool
	mu     sync.Mutex
	seen   int
)

func load() {
	spec := os.Getenv("RELAY_CRASH_AT")
	name, n, _ := strings.Cut(spec, ":")
	target, after = name, 1
	stop = os.Getenv("RELAY_CRASH_ACTION") == "stop"
	if v, err := strconv.Atoi(n); err == nil && v > 0 {
		after = v
	}
}

// Hit passes the named point.
func Hit(name string) {
	once.Do(load)
	if target == "" || name != target {
		return
	}
	mu.Lock()
	seen++
	fire := seen == after
	mu.Unlock()
	if fire && stop {
		os.Stderr.WriteString("crashpoint: stopping at " + name + "\n")
		// The signal goes to this thread: it stops before the syscall returns. Sent to the process,
		// the kernel may hand it to another thread, and this one ran on for a moment: long enough
		// to send the COMMIT that follows held-before-commit (seen in node 2's general log of
		// test/galera's TestGroupMembersAcrossNodes: the "frozen" COMMIT reached the server at the
		// freeze, six seconds before SIGCONT).
		runtime.LockOSThread()
		_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
		runtime.UnlockOSThread()
		return
	}
	if fire {
		os.Stderr.WriteString("crashpoint: killing at " + name + "\n")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
