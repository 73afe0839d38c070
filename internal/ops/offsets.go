// Offsets reset: replace where the job resumes, by writing a new commit of the offsets alone.
//
// Invariant: a reset happens only while no instance of the job runs (it takes the job's fence as a
// single instance, which the ledger grants only when no instance of any layout is up) and only
// when no branch of the job is prepared (a prepared branch belongs to the old offsets: its
// verdict must be applied first). The new commit is an ordinary one above every id the ledger
// holds (XA: a decided row with no tags; held: the partitions' offset rows), so recovery and the
// pipeline need nothing special to resume from it.

package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
)

// ResetTarget is where to move the offsets: "earliest", "latest", a time, or explicit offsets.
type ResetTarget struct {
	Spec     string            // as the operator wrote it
	Kind     string            // earliest | latest | time | explicit
	At       time.Time         // Kind time: the first record at or after At
	Explicit partition.Offsets // Kind explicit: the named partitions; the others keep their offsets
}

// ParseResetTarget reads --to: earliest, latest, an RFC 3339 time, or topic:partition=offset,...
func ParseResetTarget(s string) (ResetTarget, error) {
	t := ResetTarget{Spec: s, Kind: s}
	switch s {
	case "earliest", "latest":
		return t, nil
	case "":
		return t, errors.New("--to is required: earliest, latest, an RFC 3339 time, or topic:partition=offset pairs")
	}
	if at, err := time.Parse(time.RFC3339, s); err == nil {
		t.Kind, t.At = "time", at
		return t, nil
	}
	t.Kind, t.Explicit = "explicit", partition.Offsets{}
	for _, item := range strings.Split(s, ",") {
		tp, off, ok := strings.Cut(strings.TrimSpace(item), "=")
		i := strings.LastIndexByte(tp, ':')
		if !ok || i <= 0 {
			return t, fmt.Errorf("--to %q: %q is not topic:partition=offset (nor earliest, latest or an RFC 3339 time)", s, item)
		}
		p, err1 := strconv.ParseInt(tp[i+1:], 10, 32)
		o, err2 := strconv.ParseInt(off, 10, 64)
		if err1 != nil || err2 != nil || p < 0 || o < 0 {
			return t, fmt.Errorf("--to %q: %q needs a partition and an offset that are non-negative integers", s, item)
		}
		if _, dup := t.Explicit.Get(tp[:i], int32(p)); dup {
			return t, fmt.Errorf("--to %q: partition %s named twice", s, tp)
		}
		t.Explicit.Set(tp[:i], int32(p), o)
	}
	return t, nil
}

// ResetReport is the plan and then the outcome of `relay offsets reset`.
type ResetReport struct {
	Job        string           `json:"job"`
	To         string           `json:"to"`
	Applied    bool             `json:"applied"`             // false: a plan, nothing changed yet
	Previous   *int64           `json:"previous_checkpoint"` // null: the job had no checkpoint
	Checkpoint int64            `json:"checkpoint"`          // the new row the job resumes from; 0 in a plan
	ReRead     int64            `json:"reread"`              // the partitions' ReRead, summed
	Skipped    int64            `json:"skipped"`             // the partitions' Skipped, summed
	Partitions []PartitionReset `json:"partitions"`
}

// PartitionReset is one partition's old and new resume offset and what moving it does. ReRead and
// Skipped count offsets, so they bound the records: transaction markers and aborted records among
// them are never counted by relay anyway.
type PartitionReset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Old       *int64 `json:"old"` // null: not in the ledger (start_offset would have applied)
	// Start: Old is the partition's start position (recorded before it was read, no checkpoint
	// decided it): nothing of it was counted, so nothing is read again.
	Start   bool  `json:"start"`
	New     int64 `json:"new"`
	Low     int64 `json:"low_watermark"`
	High    int64 `json:"high_watermark"`
	ReRead  int64 `json:"reread"`  // offsets before Old that the job reads again: counted twice
	Skipped int64 `json:"skipped"` // offsets from where the job would resume up to New: never counted
}

// ResetOffsets moves the job's resume offsets to target once confirm accepts the plan.
func ResetOffsets(ctx context.Context, e *Env, target ResetTarget, confirm Confirm) (*ResetReport, error) {
	led := e.Ledger
	held := e.Config.Mode == commit.ModeHeld
	fence, err := ledger.Acquire(ctx, led, ledger.FenceConfig{Operator: true, Owner: "relay offsets reset by " + e.Operator, Cluster: e.Galera.On})
	if err != nil {
		return nil, fmt.Errorf("offsets reset needs the job stopped: %w", err)
	}
	defer fence.Release()
	branches, err := commit.JobBranches(ctx, e.Sink, led.Job())
	if err != nil {
		return nil, err
	}
	if len(branches) > 0 {
		tags := make([]string, len(branches))
		for i, b := range branches {
			tags[i] = b.Tag
		}
		return nil, fmt.Errorf("offsets reset: %d prepared branches of job %s belong to the current offsets (%s): resolve them first (start relay once, or relay txns resolve)",
			len(branches), led.Job(), strings.Join(tags, ", "))
	}
	old, lastID, err := led.PartitionOffsets(ctx)
	if err != nil {
		return nil, err
	}
	starts, err := led.StartRows(ctx)
	if err != nil {
		return nil, err
	}
	r := &ResetReport{Job: led.Job(), To: target.Spec}
	if lastID > 0 {
		r.Previous = &lastID
	}
	if r.Partitions, err = e.resolveTarget(ctx, target, old, starts); err != nil {
		return nil, err
	}
	next := partition.Offsets{}
	for _, p := range r.Partitions {
		next.Set(p.Topic, p.Partition, p.New)
		r.ReRead += p.ReRead
		r.Skipped += p.Skipped
	}
	// Under the fence, so the plan confirmed is the one applied.
	if err := confirmed(confirm, r); err != nil {
		return r, err
	}
	// A fresh id, above every id any owner of the job may have used.
	if r.Checkpoint, _, err = fence.ReserveIDs(ctx, led, lastID+1); err != nil {
		return nil, err
	}
	if err := writeResume(ctx, led, held, fence.Epoch(), r.Checkpoint, next); err != nil {
		return nil, err
	}
	r.Applied = true
	e.Log.Named("offsets").Info("offsets reset", zap.String("job", led.Job()), zap.Int64("checkpoint", r.Checkpoint),
		zap.String("to", target.Spec), zap.Any("old", old), zap.Any("new", next), zap.Int64("reread", r.ReRead),
		zap.Int64("skipped", r.Skipped), zap.String("origin", metrics.OriginManual), zap.String("operator", e.Operator))
	if err := led.Audit(ctx, "offsets", ledger.AuditOffsetsReset, e.Operator, false, r.detail()); err != nil {
		return r, fmt.Errorf("offsets reset done (checkpoint %d), but not recorded: %w", r.Checkpoint, err)
	}
	return r, nil
}

// writeResume records offs as checkpoint id under the fence's epoch, in the partitions' offset rows
// the pipeline resumes from: in XA mode through a decided row with no branches to wait for (so
// Decide + MarkCommitted), in held mode directly.
func writeResume(ctx context.Context, led *ledger.Ledger, held bool, epoch, id int64, offs partition.Offsets) error {
	if !held {
		if err := led.Decide(ctx, epoch, nil, ledger.Checkpoint{ID: id, Offsets: offs}); err != nil {
			return err
		}
		return led.MarkCommitted(ctx, id)
	}
	tx, err := led.DB().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("offsets reset: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := led.WriteHeldOffsets(ctx, tx, epoch, nil, id, offs); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("offsets reset: commit: %w", err)
	}
	return nil
}

// resolveTarget computes the new offset of every partition of the configured topics, in topic and
// partition order, with what moving there does.
func (e *Env) resolveTarget(ctx context.Context, target ResetTarget, old, starts partition.Offsets) ([]PartitionReset, error) {
	c, parts, err := e.partitions(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for t, ps := range target.Explicit {
		for p := range ps {
			if !hasPartition(parts[t], p) {
				return nil, fmt.Errorf("--to: %s:%d is not a partition of the configured topics (%s)", t, p, strings.Join(e.Config.Kafka.Topics, ","))
			}
		}
	}
	var out []PartitionReset
	for _, t := range sortedTopics(parts) {
		for _, p := range parts[t] {
			lo, hi, err := c.Kafka().QueryWatermarkOffsets(t, p, timeoutMS(ctx))
			if err != nil {
				return nil, fmt.Errorf("watermarks %s/%d: %w", t, p, err)
			}
			pr := PartitionReset{Topic: t, Partition: p, Low: lo, High: hi}
			if o, ok := old.Get(t, p); ok {
				pr.Old = &o
				_, pr.Start = starts.Get(t, p)
			}
			switch target.Kind {
			case "earliest":
				pr.New = lo
			case "latest":
				pr.New = hi
			case "time":
				if pr.New, err = offsetForTime(ctx, c.Kafka(), t, p, target.At, hi); err != nil {
					return nil, err
				}
			case "explicit":
				var ok bool
				if pr.New, ok = target.Explicit.Get(t, p); !ok {
					if pr.Old == nil {
						return nil, fmt.Errorf("--to: %s:%d has no offset in the ledger; name every partition the ledger does not know", t, p)
					}
					pr.New = *pr.Old
				}
				// An offset outside the log would stop relay at start (out of range is never reset silently).
				if pr.New < lo || pr.New > hi {
					return nil, fmt.Errorf("--to: %s:%d=%d is outside the partition's offsets %d..%d", t, p, pr.New, lo, hi)
				}
			}
			// A partition the ledger lacks in a topic it has rows of is new to the job: it starts
			// at its beginning whatever start_offset says (ledger.RecordStarts).
			out = append(out, pr.withEffect(e.Config.Kafka.StartOffset == "latest" && len(old[t]) == 0))
		}
	}
	return out, nil
}

// withEffect fills in ReRead and Skipped against where the job resumes without the reset: its
// ledger offset (records before it were counted, unless it is a start position; those already
// deleted by retention cannot be read again), or, for a partition not in the ledger, its end when latest, else its beginning
// (nothing of it was counted yet, so nothing can be counted twice).
func (pr PartitionReset) withEffect(latest bool) PartitionReset {
	from := pr.Low
	switch {
	case pr.Old != nil:
		from = min(max(*pr.Old, pr.Low), pr.High)
		if !pr.Start {
			pr.ReRead = max(from-pr.New, 0)
		}
	case latest:
		from = pr.High
	}
	pr.Skipped = max(pr.New-from, 0)
	return pr
}

// offsetForTime is the first offset whose record time is at or after at; the end of the log when
// there is none.
func offsetForTime(ctx context.Context, c *kafka.Consumer, t string, p int32, at time.Time, hi int64) (int64, error) {
	topic := t
	res, err := c.OffsetsForTimes([]kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.Offset(at.UnixMilli())}}, timeoutMS(ctx))
	if err != nil {
		return 0, fmt.Errorf("offsets for time %s/%d: %w", t, p, err)
	}
	if len(res) != 1 || res[0].Error != nil {
		return 0, fmt.Errorf("offsets for time %s/%d: %v", t, p, res)
	}
	if res[0].Offset < 0 {
		return hi, nil
	}
	return int64(res[0].Offset), nil
}

func hasPartition(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

func partitionsOf(o partition.Offsets) map[string][]int32 {
	out := map[string][]int32{}
	for t, ps := range o {
		for p := range ps {
			out[t] = append(out[t], p)
		}
		sort.Slice(out[t], func(i, j int) bool { return out[t][i] < out[t][j] })
	}
	return out
}

func (r *ResetReport) detail() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %d, --to %s (%d offsets read again, %d skipped):", r.Checkpoint, r.To, r.ReRead, r.Skipped)
	for _, p := range r.Partitions {
		fmt.Fprintf(&b, " %s:%d %s->%d", p.Topic, p.Partition, p.old(), p.New)
	}
	return b.String()
}

// Done says what the applied reset did.
func (r *ResetReport) Done() string {
	return fmt.Sprintf("job %s: offsets reset to %s; new checkpoint %d (previous %s); relay resumes from these offsets on its next start; recorded in relay_audit",
		r.Job, r.To, r.Checkpoint, r.previous())
}

func (r *ResetReport) previous() string {
	if r.Previous == nil {
		return "none"
	}
	return strconv.FormatInt(*r.Previous, 10)
}

func (p PartitionReset) old() string {
	if p.Old == nil {
		return "-"
	}
	if p.Start {
		return strconv.FormatInt(*p.Old, 10) + " (start)"
	}
	return strconv.FormatInt(*p.Old, 10)
}

// WriteText renders the plan for people.
func (r *ResetReport) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "plan for job %s: reset offsets to %s (last checkpoint %s)\n", r.Job, r.To, r.previous())
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOLD\tNEW\tLOW\tHIGH\tRE-READ\tSKIPPED")
	for _, p := range r.Partitions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\n", p.Topic, p.Partition, p.old(), p.New, p.Low, p.High, p.ReRead, p.Skipped)
	}
	fmt.Fprintf(tw, "re-read: %d offsets the job already counted are read again: their records are counted a second time (totals in MySQL are not changed)\n", r.ReRead)
	fmt.Fprintf(tw, "skipped: %d offsets are never read: their records are never counted\n", r.Skipped)
	fmt.Fprintln(tw, "(offsets bound the records: transaction markers and aborted records among them are never counted)")
	return tw.Flush()
}
