// Kafka helpers every ops command shares. Invariant: topics are walked in sorted order, so every
// report lists partitions the same way, and one Kafka round trip is bounded by its context and by 10 s.

package ops

import (
	"context"
	"sort"
	"time"
)

func sortedTopics(parts map[string][]int32) []string {
	ts := make([]string, 0, len(parts))
	for t := range parts {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// timeoutMS bounds one Kafka round trip by ctx, and by 10s.
func timeoutMS(ctx context.Context) int {
	d := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return int(max(d, time.Millisecond) / time.Millisecond)
}
