package ops

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/partition"
)

func TestParseResetTarget(t *testing.T) {
	for _, s := range []string{"earliest", "latest"} {
		if r, err := ParseResetTarget(s); err != nil || r.Kind != s {
			t.Fatalf("%s: %+v, %v", s, r, err)
		}
	}
	r, err := ParseResetTarget("2025-11-24T16:00:00Z")
	if err != nil || r.Kind != "time" || !r.At.Equal(time.Date(2025, 11, 24, 16, 0, 0, 0, time.UTC)) {
		t.Fatalf("time: %+v, %v", r, err)
	}
	r, err = ParseResetTarget("orders:0=12, orders:3=0,a:b:1=7")
	if err != nil || r.Kind != "explicit" || !r.Explicit.Equal(partition.Offsets{"orders": {0: 12, 3: 0}, "a:b": {1: 7}}) {
		t.Fatalf("explicit: %+v, %v", r, err)
	}
	for _, bad := range []string{"", "middle", "orders=5", "orders:x=5", "orders:0=-1", "orders:0=1,orders:0=2", ":0=1"} {
		if _, err := ParseResetTarget(bad); err == nil {
			t.Fatalf("%q was accepted", bad)
		}
	}
}

// A reset writes a COMMITTED checkpoint row with the new offsets above every id, records it, and
// refuses while the job runs or while a branch of the job is prepared.
func TestResetOffsets(t *testing.T) {
	e, ctx := newEnv(t, 2)
	topic := e.Config.Kafka.Topics[0]
	if err := loadgen.Run(ctx, loadgen.Options{Brokers: e.Config.Kafka.Brokers.String(), Topic: topic, Orders: 40, Batch: 10, Seed: 1}, loadgen.NewTotals()); err != nil {
		t.Fatal(err)
	}
	hi := highWatermarks(t, e)

	r, err := ResetOffsets(ctx, e, mustTarget(t, "latest"), yes)
	if err != nil {
		t.Fatal(err)
	}
	if r.Checkpoint != 1 || r.Previous != nil || len(r.Partitions) != 2 || r.Partitions[0].Old != nil || !r.Applied ||
		r.ReRead != 0 || r.Skipped != hi[topic][0]+hi[topic][1] {
		t.Fatalf("first reset %+v: want checkpoint 1, no previous, two partitions without old offsets, all %v skipped (start_offset earliest)", r, hi)
	}
	last, err := e.Ledger.LastDecided(ctx)
	if err != nil || last == nil || last.ID != 1 || last.State != ledger.Committed || len(last.Tags) != 0 || !last.Offsets.Equal(hi) {
		t.Fatalf("ledger row %+v, %v: want checkpoint 1 COMMITTED, no tags, offsets %v", last, err, hi)
	}

	decide(t, ctx, e, 7, hi) // the job ran on to checkpoint 7
	// The fuller partition: loadgen picks partitions itself.
	p := int32(0)
	if hi[topic][1] > hi[topic][0] {
		p = 1
	}
	if r, err = ResetOffsets(ctx, e, mustTarget(t, fmt.Sprintf("%s:%d=3", topic, p)), yes); err != nil {
		t.Fatal(err)
	}
	want := hi.Clone()
	want.Set(topic, p, 3)
	// Ids come in reserved blocks: the reset's is above 7 and above the first reset's block.
	if last, _ = e.Ledger.LastDecided(ctx); r.Checkpoint <= 7 || last.ID != r.Checkpoint || *r.Previous != 7 || !last.Offsets.Equal(want) {
		t.Fatalf("explicit reset: report %+v, ledger %+v; want a checkpoint above 7 with %v", r, last, want)
	}
	if offs, id, err := e.Ledger.PartitionOffsets(ctx); err != nil || id != r.Checkpoint || !offs.Equal(want) {
		t.Fatalf("partition offsets after the reset: %v at %d (%v); want %v at %d", offs, id, err, want, r.Checkpoint)
	}
	if pr := r.Partitions[p]; pr.Old == nil || *pr.Old != hi[topic][p] || pr.New != 3 {
		t.Fatalf("explicit reset old/new of partition %d: %+v", p, pr)
	}

	if _, err = ResetOffsets(ctx, e, mustTarget(t, "2000-01-01T00:00:00Z"), yes); err != nil {
		t.Fatal(err)
	}
	if last, _ = e.Ledger.LastDecided(ctx); !last.Offsets.Equal(partition.Offsets{topic: {0: 0, 1: 0}}) {
		t.Fatalf("reset to a time before every record: %v, want the beginning", last.Offsets)
	}
	if _, err = ResetOffsets(ctx, e, mustTarget(t, time.Now().Add(time.Hour).Format(time.RFC3339)), yes); err != nil {
		t.Fatal(err)
	}
	if last, _ = e.Ledger.LastDecided(ctx); !last.Offsets.Equal(hi) {
		t.Fatalf("reset to a time after every record: %v, want the end %v", last.Offsets, hi)
	}
	// Not confirmed, a reset to earliest is a plan: every offset read again, nothing written.
	var shown strings.Builder
	r, err = ResetOffsets(ctx, e, mustTarget(t, "earliest"), func(p Plan) (bool, error) { return false, p.WriteText(&shown) })
	if !errors.Is(err, ErrNotConfirmed) || r.Applied || r.Checkpoint != 0 || r.ReRead != hi[topic][0]+hi[topic][1] || r.Skipped != 0 {
		t.Fatalf("unconfirmed reset to earliest: %+v, %v; want a plan re-reading all %v", r, err, hi)
	}
	for _, pr := range r.Partitions {
		if pr.ReRead != hi[topic][pr.Partition] || pr.Low != 0 || pr.High != hi[topic][pr.Partition] {
			t.Fatalf("plan for partition %d: %+v; want %d offsets read again", pr.Partition, pr, hi[topic][pr.Partition])
		}
	}
	if !strings.Contains(shown.String(), fmt.Sprintf("re-read: %d offsets", r.ReRead)) {
		t.Fatalf("plan text lacks the re-read count:\n%s", shown.String())
	}
	if now, _ := e.Ledger.LastDecided(ctx); now.ID != last.ID || !now.Offsets.Equal(hi) {
		t.Fatalf("an unconfirmed reset changed the ledger: %+v, was %+v", now, last)
	}
	if _, err = ResetOffsets(ctx, e, mustTarget(t, topic+":0=100000"), yes); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("offset past the end: %v, want a refusal", err)
	}
	if _, err = ResetOffsets(ctx, e, mustTarget(t, "other:0=1"), yes); err == nil || !strings.Contains(err.Error(), "not a partition") {
		t.Fatalf("unknown topic: %v, want a refusal", err)
	}

	running, err := ledger.Acquire(ctx, e.Ledger, ledger.FenceConfig{Owner: "a running relay"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = ResetOffsets(ctx, e, mustTarget(t, "earliest"), yes); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("reset while the job runs: %v, want ErrFenced", err)
	}
	running.Release()
	prepare(t, ctx, e, tag(e, 20, 1))
	if _, err = ResetOffsets(ctx, e, mustTarget(t, "earliest"), yes); err == nil || !strings.Contains(err.Error(), tag(e, 20, 1)) {
		t.Fatalf("reset with a prepared branch: %v, want a refusal naming it", err)
	}

	log, err := e.Ledger.AuditLog(ctx, 10)
	if err != nil || len(log) != 4 || log[0].Action != ledger.AuditOffsetsReset || !strings.Contains(log[3].Detail, "checkpoint 1") {
		t.Fatalf("audit rows %+v, %v: want the 4 resets", log, err)
	}
}

func mustTarget(t *testing.T, s string) ResetTarget {
	t.Helper()
	r, err := ParseResetTarget(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func highWatermarks(t *testing.T, e *Env) partition.Offsets {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.Config.Kafka.Brokers.String(), "group.id": "hw"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := partition.Offsets{}
	topic := e.Config.Kafka.Topics[0]
	for p := int32(0); p < 2; p++ {
		_, hi, err := c.QueryWatermarkOffsets(topic, p, 10000)
		if err != nil {
			t.Fatal(err)
		}
		out.Set(topic, p, hi)
	}
	return out
}

// In held mode the reset writes every partition's offset row (where held mode resumes from).
func TestResetOffsetsHeld(t *testing.T) {
	e, ctx := newEnv(t, 2, func(c *config.Config) { c.Mode = commit.ModeHeld })
	topic := e.Config.Kafka.Topics[0]
	if err := loadgen.Run(ctx, loadgen.Options{Brokers: e.Config.Kafka.Brokers.String(), Topic: topic, Orders: 30, Batch: 10, Seed: 2}, loadgen.NewTotals()); err != nil {
		t.Fatal(err)
	}
	r, err := ResetOffsets(ctx, e, mustTarget(t, "latest"), yes)
	if err != nil {
		t.Fatal(err)
	}
	offs, id, err := e.Ledger.PartitionOffsets(ctx)
	if err != nil || id != r.Checkpoint || id != 1 || !offs.Equal(highWatermarks(t, e)) {
		t.Fatalf("held offsets %v at checkpoint %d (%v); want the high watermarks at checkpoint 1", offs, id, err)
	}
	if last, err := e.Ledger.LastDecided(ctx); err != nil || last != nil {
		t.Fatalf("a held-mode reset wrote checkpoint row %+v (%v)", last, err)
	}
	if r, err = ResetOffsets(ctx, e, mustTarget(t, "earliest"), yes); err != nil || *r.Previous != 1 || r.Checkpoint <= 1 {
		t.Fatalf("second reset: %+v, %v", r, err)
	}
	if offs, _, _ = e.Ledger.PartitionOffsets(ctx); !offs.Equal(partition.Offsets{topic: {0: 0, 1: 0}}) {
		t.Fatalf("held offsets after reset to earliest: %v", offs)
	}
	st, err := Status(ctx, e, "")
	if err != nil || st.LastCheckpoint == nil || st.LastCheckpoint.ID != r.Checkpoint || st.Partitions[0].Offset == nil || *st.Partitions[0].Offset != 0 {
		t.Fatalf("status in held mode: %+v, %v", st, err)
	}
}

// A start position (recorded before the partition was read, no checkpoint decided it) counted
// nothing: moving it back re-reads nothing, moving it on skips what lies between.
func TestResetFromStartPositions(t *testing.T) {
	e, ctx := newEnv(t, 2)
	topic := e.Config.Kafka.Topics[0]
	if err := loadgen.Run(ctx, loadgen.Options{Brokers: e.Config.Kafka.Brokers.String(), Topic: topic, Orders: 40, Batch: 10, Seed: 1}, loadgen.NewTotals()); err != nil {
		t.Fatal(err)
	}
	hi := highWatermarks(t, e)
	f, err := ledger.Acquire(ctx, e.Ledger, ledger.FenceConfig{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	marks := partition.Marks{}
	for p, h := range hi[topic] {
		marks.Set(topic, p, 0, h)
	}
	if _, err := e.Ledger.RecordStarts(ctx, f.Epoch(), marks, true); err != nil {
		t.Fatal(err)
	}
	f.Release()
	r, err := ResetOffsets(ctx, e, mustTarget(t, "earliest"), func(Plan) (bool, error) { return false, nil })
	if !errors.Is(err, ErrNotConfirmed) {
		t.Fatal(err)
	}
	for _, pr := range r.Partitions {
		if !pr.Start || pr.Old == nil || *pr.Old != hi[topic][pr.Partition] || pr.ReRead != 0 || pr.Skipped != 0 {
			t.Fatalf("partition %d from its start position %v to earliest: %+v; want a start, nothing re-read or skipped", pr.Partition, hi[topic][pr.Partition], pr)
		}
	}
}
