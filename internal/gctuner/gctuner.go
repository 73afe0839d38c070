// Package gctuner keeps the Go heap from being collected while it is small.
//
// Why: the Kafka client allocates a few hundred bytes of garbage per record, so at hundreds of
// thousands of records per second a process with a small live heap (relay's usual state: the
// epoch's keys and some buffers) runs the collector many times a second, and the collector's CPU is
// taken from the poll loop. Invariant: the heap goal is max(2 x live heap, floor): below the floor
// GOGC is raised so the goal reaches the floor; above it the Go default (GOGC=100) applies
// unchanged, so a large epoch costs no more memory than without the tuner. A GOGC set in the
// environment is the operator's choice and turns the tuner off; GOMEMLIMIT still caps the heap.
package gctuner

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Percent is the GOGC value that puts the next heap goal at floor for a live heap of live bytes,
// never below 100 (the default) nor above max.
func Percent(live, floor uint64, max int) int {
	if live == 0 {
		return max
	}
	p := int(floor * 100 / live)
	if p < 100 {
		return 100
	}
	if p > max {
		return max
	}
	return p
}

// maxPercent bounds GOGC when the live heap is tiny (at start-up).
const maxPercent = 5000

// Run retunes GOGC every interval until ctx ends. It returns at once, doing nothing, when floor
// is 0 or GOGC is set in the environment.
func Run(ctx context.Context, floor uint64, interval time.Duration) {
	if floor == 0 || os.Getenv("GOGC") != "" {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := 100
	t := time.NewTicker(interval)
	defer t.Stop()
	defer debug.SetGCPercent(100)
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			// Hysteresis: small moves of the live heap do not retune.
			if p := Percent(sample[0].Value.Uint64(), floor, maxPercent); p*10 < current*9 || p*10 > current*11 {
				debug.SetGCPercent(p)
				current = p
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
