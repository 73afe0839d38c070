// Progress of a long Run, for the operator watching it. Invariant: the producing loop only adds to
// atomic counters; one goroutine reads them every interval and writes a line, so a slow writer
// never slows producing, and no line is written after Run returns.

package loadgen

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// progress counts one Run's records.
type progress struct {
	sent, committed, aborted atomic.Int64
}

// report writes a line to w every interval until stop is closed, then closes done.
func (p *progress) report(w io.Writer, every time.Duration, total int, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	last, lastSent := start, int64(0)
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			sent := p.sent.Load()
			rate := float64(sent-lastSent) / now.Sub(last).Seconds()
			last, lastSent = now, sent
			eta := "unknown"
			if rate > 0 {
				eta = time.Duration(float64(int64(total)-sent) / rate * float64(time.Second)).Round(time.Second).String()
			}
			fmt.Fprintf(w, "loadgen: %s: %d of %d records sent (%.1f%%), %d committed, %d in aborted transactions, %.0f records/s, %s left\n",
				now.Sub(start).Round(time.Second), sent, total, 100*float64(sent)/float64(max(total, 1)),
				p.committed.Load(), p.aborted.Load(), rate, eta)
		}
	}
}
