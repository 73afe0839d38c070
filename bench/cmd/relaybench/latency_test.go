package main

import (
	"math"
	"testing"
)

// The search's first probe is at half the backlog rate, and it ends within 10 % below the highest
// rate a (simulated) machine sustains, never above it, whether that is above or below the first probe.
func TestBisectLoad(t *testing.T) {
	for _, c := range []struct{ catchUp, limit float64 }{
		{600000, 250000}, // below the first probe
		{600000, 450000}, // above it
		{600000, 100000}, // far below: needs the 0.6 steps
	} {
		var asked []float64
		m, err := bisectLoad(c.catchUp, 6, func(rate float64) (LatencyRun, error) {
			asked = append(asked, rate)
			drain := 0.5
			if rate > c.limit {
				drain = 5
			}
			return LatencyRun{TargetRate: rate, AchievedRate: rate, DrainSecs: drain}, nil
		})
		if err != nil {
			t.Fatalf("limit %.0f: %v (probes %v)", c.limit, err, asked)
		}
		if asked[0] != c.catchUp/2 {
			t.Errorf("limit %.0f: first probe at %.0f, want half of %.0f", c.limit, asked[0], c.catchUp)
		}
		if m.Sustained > c.limit || m.Sustained < c.limit/1.1 {
			t.Errorf("limit %.0f: found %.0f after probes %v", c.limit, m.Sustained, asked)
		}
		if len(m.Probes) != len(asked) || m.Probes[len(m.Probes)-1].TargetRate != asked[len(asked)-1] {
			t.Errorf("limit %.0f: %d probes kept, %d run", c.limit, len(m.Probes), len(asked))
		}
	}
	if _, err := bisectLoad(600000, 3, func(rate float64) (LatencyRun, error) {
		return LatencyRun{TargetRate: rate, AchievedRate: rate, DrainSecs: math.Inf(1)}, nil
	}); err == nil {
		t.Error("no probe sustained, and no error")
	}
	// A producer that falls short of the rate asked: the machine did not carry that load.
	if (LatencyRun{TargetRate: 500000, AchievedRate: 400000, DrainSecs: 0.3}).sustained() {
		t.Error("a probe whose producer made 80 % of the load counts as sustained")
	}
}
