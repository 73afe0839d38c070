package gctuner

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/testenv"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{4 * mib, 64 * mib, 1600}, // small heap: goal raised to the floor
		{32 * mib, 64 * mib, 200},
		{64 * mib, 64 * mib, 100}, // at the floor: the default
		{512 * mib, 64 * mib, 100},
		{1, 64 * mib, 5000}, // bounded
		{0, 64 * mib, 5000},
	} {
		if got := Percent(c.live, c.floor, 5000); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.live, c.floor, got, c.want)
		}
	}
}

// Run raises GOGC for this process's small heap, and restores the default when it stops.
func TestRunRaisesAndRestores(t *testing.T) {
	t.Setenv("GOGC", "")
	runtime.GC()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, 256<<20); close(done) }()
	var got int
	testenv.Poll(5*time.Second, func() bool {
		runtime.GC() // each collection retunes
		got = gcPercent()
		return got > 100
	})
	cancel()
	<-done
	if got <= 100 {
		t.Fatalf("GOGC stayed %d with a heap far below a 256 MiB floor", got)
	}
	runtime.GC()
	if after := gcPercent(); after != 100 {
		t.Fatalf("GOGC %d after Run returned, want the default 100", after)
	}
}

// A heap that grows past the floor brings GOGC back to the default at the next collection, so a
// large live heap is not multiplied by a percent chosen for a small one.
func TestGrowingHeapGetsTheDefault(t *testing.T) {
	t.Setenv("GOGC", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, 16<<20); close(done) }()
	defer func() { cancel(); <-done }()
	waitPercent(t, func(p int, _ int64) bool { return p > 100 }, "GOGC raised for a small heap")
	big := make([][]byte, 0, 64)
	for i := 0; i < 64; i++ {
		big = append(big, make([]byte, 1<<20)) // 64 MiB live, four times the floor
	}
	waitPercent(t, func(p int, _ int64) bool { return p == 100 }, "GOGC back to 100 with a live heap above the floor")
	runtime.KeepAlive(big)
}

// waitPercent collects until ok holds for GOGC and the memory limit, read together.
func waitPercent(t *testing.T, ok func(percent int, limit int64) bool, what string) {
	t.Helper()
	var p int
	var limit int64
	if testenv.Poll(5*time.Second, func() bool {
		runtime.GC()
		p, limit = gcSettings()
		return ok(p, limit)
	}) {
		return
	}
	t.Fatalf("timed out waiting for %s (GOGC %d, memory limit %d)", what, p, limit)
}

// gcSettings reads GOGC and the memory limit without writing them: a read through
// debug.SetGCPercent writes, and could put back a value the tuner replaced in between. The
// percent is read first (metrics.Read reads in order): the tuner caps the limit before it raises
// the percent, so a raised percent is never read with the limit from before.
func gcSettings() (percent int, limit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

func gcPercent() int {
	p, _ := gcSettings()
	return p
}

// While GOGC is raised a memory limit caps the heap at a few floors, so a percent that was right
// for a small heap cannot be applied to a large one; with the default percent back, the limit the
// process had before (GOMEMLIMIT, or none) is back too.
func TestRaisedPercentIsCapped(t *testing.T) {
	t.Setenv("GOGC", "")
	const floor = 16 << 20
	before := debug.SetMemoryLimit(-1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, floor); close(done) }()
	// The tuner lowers the limit before it raises the percent, so a raised percent comes with
	// the cap in every read.
	waitPercent(t, func(p int, limit int64) bool {
		if p > 100 && limit != capFloors*floor {
			t.Fatalf("memory limit %d with GOGC %d, want %d", limit, p, capFloors*floor)
		}
		return p > 100
	}, "GOGC raised for a small heap")
	big := make([][]byte, 0, 64)
	for i := 0; i < 64; i++ {
		big = append(big, make([]byte, 1<<20))
	}
	// It lowers the percent before it restores the limit: wait for both.
	waitPercent(t, func(p int, limit int64) bool { return p == 100 && limit == before }, "GOGC back to 100 and the original memory limit, above the floor")
	runtime.KeepAlive(big)
	cancel()
	<-done
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("memory limit %d after Run returned, want the original %d", got, before)
	}
}
