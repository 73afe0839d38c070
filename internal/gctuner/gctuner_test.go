package gctuner

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
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
	go func() { Run(ctx, 256<<20, 10*time.Millisecond); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	var got int
	for time.Now().Before(deadline) {
		got = debug.SetGCPercent(100)
		debug.SetGCPercent(got)
		if got > 100 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got <= 100 {
		t.Fatalf("GOGC stayed %d with a heap far below a 256 MiB floor", got)
	}
	if after := debug.SetGCPercent(100); after != 100 {
		t.Fatalf("GOGC %d after Run returned, want the default 100", after)
	}
}
