package main

import (
	"encoding/json"
	"testing"
)

// The report is re-rendered from last-run.json (BENCH_STEPS=report), so the cross ratio must pair
// the same repetitions after a round trip through the file as when it was measured.
func TestCrossRatioSurvivesTheResultsFile(t *testing.T) {
	r := &TPResult{Runs: []TPRun{
		{Client: "tuned", Kind: "baseline", Rate: 100, Rep: 1},
		{Client: "shipped", Kind: "xa", Rate: 200, Rep: 1},
		{Client: "tuned", Kind: "baseline", Rate: 400, Rep: 2},
		{Client: "shipped", Kind: "xa", Rate: 400, Rep: 2},
		{Client: "tuned", Kind: "baseline", Rate: 300, Rep: 3},
		{Client: "shipped", Kind: "xa", Rate: 450, Rep: 3},
	}}
	want, _ := r.crossRatio("xa") // ratios 2, 1, 1.5: median 1.5
	if want != 1.5 {
		t.Fatalf("cross ratio %.3f, want 1.5", want)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back TPResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got, _ := back.crossRatio("xa"); got != want {
		t.Errorf("cross ratio %.3f after last-run.json, %.3f when measured", got, want)
	}
}
