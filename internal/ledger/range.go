// Resume offsets against the source: where the ledger resumes a partition must lie within what
// the partition holds.
//
// Invariant: relay never resumes a partition from an offset outside [low watermark, high
// watermark]. Above it, the topic was deleted and recreated (or truncated) after the offset was
// committed, so the offsets no longer name the records the ledger counted; below it, records relay
// never read are gone. Either way exactly-once cannot go on by itself: the operator decides
// (relay offsets reset), relay never resets silently.

package ledger

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/partition"
)

// ErrOutOfRange means a resume offset lies outside the partition's offsets: a condition no restart
// cures, the operator decides.
var ErrOutOfRange = fault.Permanent(errors.New("resume offset outside the partition"))

// Watermarks reads a partition's low and high watermark, as kafka.Consumer.QueryWatermarkOffsets.
type Watermarks func(topic string, partition int32, timeoutMs int) (low, high int64, err error)

// InRange is nil when off lies within [low, high]; otherwise it says what happened and what to do.
func InRange(topic string, p int32, off, low, high int64) error {
	reset := fmt.Sprintf("stop relay, run `relay offsets reset --to %s:%d=%d` (it prints its plan; run it again with --yes to apply), start relay (docs/RUNBOOK.md, \"Resume offset outside the topic\")", topic, p, low)
	switch {
	case off > high:
		return fmt.Errorf("%w: topic %s partition %d: the ledger resumes at offset %d, beyond the high watermark %d (the partition holds offsets [%d, %d)): "+
			"the topic was deleted and recreated, or truncated, after relay committed that offset, so its offsets no longer name the records relay counted; "+
			"to count the partition's records from its start: %s", ErrOutOfRange, topic, p, off, high, low, high, reset)
	case off < low:
		return fmt.Errorf("%w: topic %s partition %d: the ledger resumes at offset %d, below the low watermark %d (the partition holds offsets [%d, %d)): "+
			"records %d to %d were deleted (retention) before relay read them and can never be counted; to go on without them: %s",
			ErrOutOfRange, topic, p, off, low, low, high, off, low-1, reset)
	}
	return nil
}

// CheckRange holds every partition of offs to its watermarks. It returns all the partitions out of
// range in one error, or the first failed watermark query (which fault classifies: a broker that
// is away is worth retrying, a resume offset out of range is not).
func CheckRange(ctx context.Context, offs partition.Offsets, q Watermarks) error {
	topics := make([]string, 0, len(offs))
	for t := range offs {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	var errs []error
	for _, t := range topics {
		parts := make([]int32, 0, len(offs[t]))
		for p := range offs[t] {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		for _, p := range parts {
			d := 10 * time.Second
			if dl, ok := ctx.Deadline(); ok {
				d = max(min(d, time.Until(dl)), time.Millisecond)
			}
			low, high, err := q(t, p, int(d/time.Millisecond))
			if err != nil {
				return fmt.Errorf("watermarks %s/%d: %w", t, p, err)
			}
			errs = append(errs, InRange(t, p, offs[t][p], low, high))
		}
	}
	return errors.Join(errs...)
}
