// Package gctuner keeps the Go heap from being collected while it is small.
//
// Why: a process with a small live heap (relay's usual state: the epoch's keys and some buffers)
// collects whenever it allocated as much again, and the collector's CPU is taken from the fold.
// (Until relay read Kafka in batches the client's few hundred bytes of garbage per record made that
// many times a second; relay's own garbage, each epoch's new keys and its SQL, is far less.) Invariant: after every collection the heap goal is set to about
// max(2 x live heap, live heap + floor): below the floor GOGC is raised, above it the Go default
// (GOGC=100) applies unchanged, so a large epoch costs no more memory than without the tuner.
// The percent is retuned after every collection, but it is applied by the runtime at the end of
// the collection, before the tuner sees the new live heap: a GOGC raised for a small heap is
// applied once to whatever the heap has grown to (a burst at start-up that grows the live heap
// twentyfold between two collections would get a goal twenty floors high). So while GOGC is
// raised a memory limit of capFloors x floor holds as well: a stale percent can make a collection
// come early, never late. A GOGC set in the environment is the operator's choice and turns the
// tuner off; a GOMEMLIMIT lower than the cap is kept.
package gctuner

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Percent is the GOGC value that puts the next heap goal at floor for a live heap of live bytes,
// never below 100 (the default) nor above max.
func Percent(live, floor uint64, max int) int {
	if live == 0 {
		return max
	}
	p := floor * 100 / live
	if p < 100 {
		return 100
	}
	if p > uint64(max) {
		return max
	}
	return int(p)
}

// maxPercent bounds GOGC when the live heap is tiny (at start-up).
const maxPercent = 5000

// capFloors is the memory limit, in floors, while GOGC is raised: the goal is at most twice the
// floor then, and the rest is room for stacks and the runtime's own memory.
const capFloors = 3

// Run retunes GOGC after every collection until ctx ends, then restores the default. It returns at
// once, doing nothing, when floor is 0 or GOGC is set in the environment.
func Run(ctx context.Context, floor uint64) {
	if floor == 0 || os.Getenv("GOGC") != "" {
		return
	}
	t := &tuner{floor: floor, current: 100, limit: debug.SetMemoryLimit(-1),
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.mu.Lock()
	t.tune()
	t.arm()
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	t.stopped = true
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(t.limit)
	t.mu.Unlock()
}

type tuner struct {
	mu      sync.Mutex // the cleanup goroutine against Run's stop
	stopped bool
	floor   uint64
	current int
	limit   int64 // the memory limit before the tuner (GOMEMLIMIT, or none)
	sample  []metrics.Sample
}

// sentinel is garbage whose cleanup marks the end of a collection. It has a pointer and some size
// so that it is not merged into another allocation by the tiny allocator (which delays cleanups).
type sentinel struct {
	_ *int
	_ [16]byte
}

// arm leaves a sentinel behind: the collection that frees it runs the cleanup, which retunes and
// arms the next one. Cleanups run one at a time on the runtime's cleanup goroutine.
func (t *tuner) arm() {
	runtime.AddCleanup(&sentinel{}, func(t *tuner) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.stopped {
			t.tune()
			t.arm()
		}
	}, t)
}

func (t *tuner) tune() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	// Hysteresis: small moves of the live heap do not retune.
	if p := Percent(t.sample[0].Value.Uint64(), t.floor, maxPercent); p*10 < t.current*9 || p*10 > t.current*11 {
		limit := t.limit
		if p > 100 {
			limit = min(limit, int64(capFloors*t.floor))
		}
		// Lower the limit before raising the percent, and raise it after lowering: the
		// percent is never raised without the cap in force.
		if limit < debug.SetMemoryLimit(-1) {
			debug.SetMemoryLimit(limit)
			debug.SetGCPercent(p)
		} else {
			debug.SetGCPercent(p)
			debug.SetMemoryLimit(limit)
		}
		t.current = p
	}
}
