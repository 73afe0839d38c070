package ledger

import (
	"errors"
	"sync"
	"testing"

	"github.com/relay-sh/relay/internal/partition"
)

// marks builds partition.Marks of topic: partition p has watermarks lo[p], hi[p].
func marks(topic string, lo, hi []int64) partition.Marks {
	m := partition.Marks{}
	for p := range lo {
		m.Set(topic, int32(p), lo[p], hi[p])
	}
	return m
}

// The first record of a topic with latest starts every partition at its high watermark, and no
// later record moves a row: a later "latest" (higher watermarks) gets the recorded starts back. A
// partition added to a topic the job has rows of starts at its low watermark, whatever latest
// says; a decided offset is returned as it is. A fenced owner records nothing.
func TestRecordStarts(t *testing.T) {
	a, ctx := newLedger(t)
	fa, err := Acquire(ctx, a, FenceConfig{Owner: "host-a pid 1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.RecordStarts(ctx, fa.Epoch(), marks("t", []int64{0, 5}, []int64{100, 200}), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (partition.Offsets{"t": {0: 100, 1: 200}}); !got.Equal(want) {
		t.Fatalf("first record with latest: %v, want the high watermarks %v", got, want)
	}
	got, err = a.RecordStarts(ctx, fa.Epoch(), marks("t", []int64{0, 5}, []int64{150, 250}), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (partition.Offsets{"t": {0: 100, 1: 200}}); !got.Equal(want) {
		t.Fatalf("second record with latest: %v, want the first's %v", got, want)
	}
	if err := a.Decide(ctx, fa.Epoch(), nil, Checkpoint{ID: 7, Offsets: partition.Offsets{"t": {0: 120}}}); err != nil {
		t.Fatal(err)
	}
	got, err = a.RecordStarts(ctx, fa.Epoch(), marks("t", []int64{0, 5, 7}, []int64{150, 250, 300}), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (partition.Offsets{"t": {0: 120, 1: 200, 2: 7}}); !got.Equal(want) {
		t.Fatalf("an added partition: %v, want decided 120, recorded 200 and the new one at its low watermark 7: %v", got, want)
	}
	if _, id, _ := a.PartitionOffsets(ctx); id != 7 {
		t.Fatalf("highest checkpoint id among the offsets is %d, want 7: a start row is checkpoint 0", id)
	}
	// A topic a relay from before start positions read: rows, but no recorded starts. Its missing
	// partition gets the position latest says (that relay's), then the topic counts as recorded.
	if err := a.Decide(ctx, fa.Epoch(), nil, Checkpoint{ID: 8, Offsets: partition.Offsets{"old": {0: 40}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.db.ExecContext(ctx, `DELETE FROM relay_start_topics WHERE job = ? AND topic = 'old'`, a.job); err != nil {
		t.Fatal(err)
	}
	got, err = a.RecordStarts(ctx, fa.Epoch(), marks("old", []int64{0, 3}, []int64{50, 60}), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (partition.Offsets{"old": {0: 40, 1: 60}}); !got.Equal(want) {
		t.Fatalf("a partition the older relay never decided: %v, want latest as that relay resolved it: %v", got, want)
	}
	got, err = a.RecordStarts(ctx, fa.Epoch(), marks("old", []int64{0, 3, 5}, []int64{50, 60, 70}), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (partition.Offsets{"old": {0: 40, 1: 60, 2: 5}}); !got.Equal(want) {
		t.Fatalf("a partition added once the topic is recorded: %v, want its low watermark: %v", got, want)
	}
	// Another owner takes a's key; a's record is refused and writes nothing.
	fa.Release()
	fa2, err := Acquire(ctx, a, FenceConfig{Owner: "host-b pid 2"})
	if err != nil {
		t.Fatal(err)
	}
	defer fa2.Release()
	if _, err := a.RecordStarts(ctx, fa.Epoch(), marks("u", []int64{0}, []int64{9}), true); !errors.Is(err, ErrFenced) {
		t.Fatalf("record under a stale epoch: %v, want ErrFenced", err)
	}
	if offs := offsetsOf(ctx, t, a); len(offs["u"]) != 0 {
		t.Fatalf("a fenced record wrote %v", offs["u"])
	}
}

// Processes recording the same topic at once, with different watermarks, all get the same starts.
func TestRecordStartsRace(t *testing.T) {
	a, b, fa, fb, ctx := twoMembers(t)
	var wg sync.WaitGroup
	res := make([]partition.Offsets, 2)
	errs := make([]error, 2)
	for i, r := range []struct {
		l *Ledger
		f *Fence
	}{{a, fa}, {b, fb}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hi := int64(100 * (i + 1))
			res[i], errs[i] = r.l.RecordStarts(ctx, r.f.Epoch(), marks("t", []int64{0, 0, 0, 0}, []int64{hi, hi + 1, hi + 2, hi + 3}), true)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	if !res[0].Equal(res[1]) || !res[0].Equal(offsetsOf(ctx, t, a)) {
		t.Fatalf("racing records disagree: %v and %v, ledger %v", res[0], res[1], offsetsOf(ctx, t, a))
	}
}
