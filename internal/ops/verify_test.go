package ops

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/spec"
)

// verify finds nothing when MySQL holds exactly what the committed Kafka transactions carried (up
// to the checkpoint's offsets, transaction markers and aborted records included), and names each
// key that differs when it does not, both recounting and against a totals file.
func TestVerify(t *testing.T) {
	e, ctx := newEnv(t, 2)
	topic := e.Config.Kafka.Topics[0]
	totals := loadgen.NewTotals()
	o := loadgen.Options{Brokers: e.Config.Kafka.Brokers, Topic: topic, Orders: 600, Batch: 50, AbortRate: 0.3, SKUs: 20,
		Windows: 3, Seed: 7, TxnID: "lg-" + topic}
	// The broker now and then answers an abort with an invalid-state error, fatal to the producer; a
	// new one with the same transactional.id fences it, and totals hold exactly what committed.
	err := loadgen.Run(ctx, o, totals)
	for attempt := 2; err != nil && attempt <= 3; attempt++ {
		t.Logf("producing: %v; again", err)
		err = loadgen.Run(ctx, o, totals)
	}
	if err != nil {
		t.Fatal(err)
	}
	want, _, good := totals.Snapshot()
	if totals.Aborted == 0 {
		t.Fatal("no aborted transaction: the test would not show that verify skips them")
	}
	for k, a := range want {
		if _, err := e.Sink.ExecContext(ctx, `INSERT INTO order_stats_minute VALUES (?, ?, ?, ?)`,
			time.UnixMilli(k.WindowMS).UTC(), k.SKU, a.Count, a.Sum.String()); err != nil {
			t.Fatal(err)
		}
	}
	decide(t, ctx, e, 3, highWatermarks(t, e))
	if err := e.Ledger.MarkCommitted(ctx, 3); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "totals.json")
	if err := totals.WriteFile(file); err != nil {
		t.Fatal(err)
	}

	r, err := Verify(ctx, e, VerifyOptions{From: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean || r.Good != good || r.Records != good || r.KeysExpected != len(want) || r.KeysActual != len(want) || *r.Checkpoint != 3 {
		t.Fatalf("clean recount reported %+v; want clean, %d good records, %d keys", r, good, len(want))
	}
	if r, err = Verify(ctx, e, VerifyOptions{Expected: file}); err != nil || !r.Clean {
		t.Fatalf("clean comparison with the totals file: %+v, %v", r, err)
	}

	// One sum off by the smallest unit, one row gone, one row nothing accounts for.
	var changed, gone loadgen.Key
	for k := range want {
		switch {
		case changed.SKU == "":
			changed = k
		case gone.SKU == "" && k.SKU != changed.SKU: // the differences are told apart by sku
			gone = k
		}
	}
	for _, q := range []string{
		fmt.Sprintf(`UPDATE order_stats_minute SET amount_sum = amount_sum + 0.0001 WHERE window_start = '%s' AND sku = '%s'`, window(changed), changed.SKU),
		fmt.Sprintf(`DELETE FROM order_stats_minute WHERE window_start = '%s' AND sku = '%s'`, window(gone), gone.SKU),
		`INSERT INTO order_stats_minute VALUES ('2030-01-01 00:00:00', 'SKU-extra', 1, 2.5)`,
	} {
		if _, err := e.Sink.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	bumped := want[changed].Sum
	bumped.Add(1)
	wantDiffs := map[string]KeyDiff{
		changed.SKU: {WindowStart: window(changed), SKU: changed.SKU, Kind: DiffDiffers, ExpectedCount: want[changed].Count,
			ExpectedSum: want[changed].Sum.String(), ActualCount: want[changed].Count, ActualSum: bumped.String()},
		gone.SKU: {WindowStart: window(gone), SKU: gone.SKU, Kind: DiffMissing, ExpectedCount: want[gone].Count,
			ExpectedSum: want[gone].Sum.String(), ActualSum: "0.0000"},
		"SKU-extra": {WindowStart: "2030-01-01 00:00:00", SKU: "SKU-extra", Kind: DiffExtra, ExpectedSum: "0.0000", ActualCount: 1, ActualSum: "2.5000"},
	}
	for _, o := range []VerifyOptions{{From: "earliest"}, {Expected: file}} {
		r, err := Verify(ctx, e, o)
		if err != nil {
			t.Fatal(err)
		}
		if r.Clean || r.DiffCount != 3 || len(r.Differences) != 3 {
			t.Fatalf("%+v: %d differences %+v, want exactly the 3 injected", o, r.DiffCount, r.Differences)
		}
		for _, d := range r.Differences {
			if d != wantDiffs[d.SKU] {
				t.Fatalf("%+v: difference %+v, want %+v", o, d, wantDiffs[d.SKU])
			}
		}
	}

	// A dead-letter row no bad record accounts for.
	if _, err := e.Sink.ExecContext(ctx, `INSERT INTO relay_dlq (job, topic, kpartition, koffset, reason, payload, payload_bytes, checkpoint_id)
		VALUES (?, ?, 0, 0, 'not_json', 'x', 1, 3)`, e.Config.Job.Name, topic); err != nil {
		t.Fatal(err)
	}
	if r, err = Verify(ctx, e, VerifyOptions{}); err != nil || r.DeadLetter.ExtraCount != 1 || r.DeadLetter.Extra[0].Reason != "not_json" {
		t.Fatalf("extra dead-letter row: %+v, %v", r.DeadLetter, err)
	}
	if r, err = Verify(ctx, e, VerifyOptions{From: "3"}); err != nil || r.Records != 0 || r.DiffCount != r.KeysActual {
		t.Fatalf("recount from the last checkpoint's own offsets: %+v, %v; want nothing counted, every row extra", r, err)
	}

	// A checkpoint whose branches are not all committed yet: no consistent snapshot to compare.
	defer func(p fault.Policy) { snapshotRetry = p }(snapshotRetry)
	snapshotRetry = fault.Policy{Attempts: 2, Initial: time.Millisecond, Max: time.Millisecond}
	decide(t, ctx, e, 4, highWatermarks(t, e), tag(e, 4, 0))
	if _, err = Verify(ctx, e, VerifyOptions{}); err == nil || !strings.Contains(err.Error(), "COMMITTING") {
		t.Fatalf("verify with checkpoint 4 still COMMITTING: %v, want a refusal", err)
	}
}

func window(k loadgen.Key) string { return time.UnixMilli(k.WindowMS).UTC().Format(windowLayout) }

// A job that never committed anything has nothing to verify.
func TestVerifyNoCheckpoint(t *testing.T) {
	e, ctx := newEnv(t, 1)
	if _, err := Verify(ctx, e, VerifyOptions{}); err == nil || !strings.Contains(err.Error(), "no decided checkpoint") {
		t.Fatalf("got %v", err)
	}
}

// Verify recounts the default spec only, so far: a configuration with a pipeline block is refused
// before anything is read, rather than compared with the wrong shape.
func TestVerifyRefusesPipelineBlock(t *testing.T) {
	e := &Env{Config: config.Default()}
	e.Config.Pipeline = &spec.Spec{}
	if _, err := Verify(context.Background(), e, VerifyOptions{}); !errors.Is(err, errVerifySpec) {
		t.Fatalf("verify with a pipeline block: %v, want %v", err, errVerifySpec)
	}
}
