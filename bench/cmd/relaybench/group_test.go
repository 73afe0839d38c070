package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/ledger"
)

// A member may run before the single instance of its repetition (BENCH_GROUP_KINDS=member,single):
// its ratio must still be to that repetition's instance, not to another's or to nothing.
func TestGroupRatiosPairTheSameRepetition(t *testing.T) {
	r := &GroupResult{Runs: []GroupRun{
		{Mode: "xa", Kind: "member", Rep: 1, Rate: 90, SteadyRate: 90},
		{Mode: "xa", Kind: "single", Rep: 1, Rate: 100, SteadyRate: 100},
		{Mode: "held", Kind: "single", Rep: 1, Rate: 300, SteadyRate: 300},
		{Mode: "xa", Kind: "member", Rep: 2, Rate: 240, SteadyRate: 240},
		{Mode: "xa", Kind: "single", Rep: 2, Rate: 200, SteadyRate: 200},
	}}
	r.pairRatios()
	for i, want := range []float64{0.9, 1, 1, 1.2, 1} {
		if got := r.Runs[i].Ratio; got != want || r.Runs[i].SteadyRatio != want {
			t.Errorf("run %d (%s/%s rep %d): ratio %.3f, steady %.3f, want %.3f", i, r.Runs[i].Mode, r.Runs[i].Kind, r.Runs[i].Rep,
				got, r.Runs[i].SteadyRatio, want)
		}
	}
}

// The distance from each decision to the other member's nearest one, ignoring empty checkpoints
// (an idle member's decision says nothing about when the two flush).
func TestDecisionPhase(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cps := []ledger.Checkpoint{
		{Instance: "j/g/a", Records: 10, DecidedAt: at(0)},
		{Instance: "j/g/a", Records: 10, DecidedAt: at(1000)},
		{Instance: "j/g/a", Records: 10, DecidedAt: at(2000)},
		{Instance: "j/g/b", Records: 10, DecidedAt: at(300)},
		{Instance: "j/g/b", Records: 10, DecidedAt: at(1300)},
		{Instance: "j/g/b", Records: 10, DecidedAt: at(2300)},
		// b's empty checkpoints, in step with a's
		{Instance: "j/g/b", Records: 0, DecidedAt: at(0)},
		{Instance: "j/g/b", Records: 0, DecidedAt: at(1000)},
		{Instance: "j/g/b", Records: 0, DecidedAt: at(2000)},
	}
	if got := decisionPhase(cps); got != 300 {
		t.Errorf("decisions %.0f ms apart, want 300", got)
	}
}

// Every row of the group section's tables has as many cells as its header, whatever the run
// recorded (waits or none, one process or two).
func TestGroupSectionTablesAreRectangular(t *testing.T) {
	g := &GroupResult{Orders: 1000, Partitions: 16, Modes: []string{"xa"}, Kinds: groupKinds,
		Commands: map[string]string{"xa/single": "RELAY_MODE=xa", "xa/two": "RELAY_MODE=xa RELAY_MEMBERSHIP=group"},
		Summary:  map[string]GroupSum{"xa/single": {Rate: 1}, "xa/member": {Rate: 1}, "xa/two": {Rate: 1}},
		Runs: []GroupRun{
			{Mode: "xa", Kind: "single", Rep: 1, RelayCPU: []float64{1}, RelayWait: []float64{1}, Parts: []int{16},
				Checkpoints: []int{3}, FlushMs: []float64{100}},
			{Mode: "xa", Kind: "two", Rep: 1, RelayCPU: []float64{1, 1}, RelayWait: []float64{1, 2}, Parts: []int{8, 8},
				Checkpoints: []int{3, 3}, FlushMs: []float64{100, 200}, PhaseMs: 150,
				Waits: map[string]int{"`relay_bench_x`.`order_stats_minute`": 2, "`relay_bench_x`.`relay_offsets`": 1}, WaitMs: 40},
		}}
	var b strings.Builder
	renderGroup(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, g)
	cells := -1
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "|") {
			cells = -1
			continue
		}
		n := strings.Count(line, "|")
		if cells < 0 {
			cells = n
		} else if n != cells {
			t.Errorf("%d cells in a table of %d:\n%s", n-1, cells-1, line)
		}
	}
	if !strings.Contains(b.String(), "order_stats_minute 2, relay_offsets 1") {
		t.Errorf("waits not listed by table:\n%s", b.String())
	}
}

// The rate between checkpoints counts whole checkpoint intervals after every process read: not the
// polls before `from`, and not the final checkpoint, however long it waited after the reading.
func TestStepRate(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	var tl []polled
	add := func(ms int, total int64) {
		tl = append(tl, polled{at: t0.Add(time.Duration(ms) * time.Millisecond), total: total})
	}
	add(0, 0)
	add(500, 100)   // before from: left out
	add(1000, 300)  // first checkpoint after from
	add(1025, 300)  // a poll that saw nothing new
	add(2000, 1300) // 1000 orders a second
	add(3000, 2300) // last before the final one
	add(5000, 2400) // the final checkpoint, 2 s later for 100 orders: left out
	if got := stepRate(tl, t0.Add(600*time.Millisecond)); got != 1000 {
		t.Errorf("step rate %.1f, want 1000", got)
	}
	if got := stepRate(tl[:5], t0.Add(600*time.Millisecond)); got != 0 {
		t.Errorf("step rate %.1f with two checkpoints after from, want 0 (too few)", got)
	}
}
