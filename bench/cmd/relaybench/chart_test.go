package main

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// The chart is well-formed SVG with one bar per configuration and per percentile, each as wide as
// its value says.
func TestChart(t *testing.T) {
	res := &Results{
		Machine: &Machine{Date: "2026-12-03 11:14 UTC", NProc: 2, MySQL: "10.11"},
		Steps:   map[string]Step{"throughput": {Date: "2026-12-03 08:35 UTC"}, "latency": {Date: "2026-12-03 11:14 UTC"}},
		Throughput: &TPResult{Clients: []string{"shipped"}, Summary: map[string]TPStats{
			"shipped/baseline": {MedianRate: 400e3}, "shipped/xa": {MedianRate: 200e3, MedianRatio: 0.5}}},
		Latency: &LatencyResult{TargetRate: 100e3, Runs: []LatencyRun{
			{Interval: "1s", ProduceToVisible: Q{P50: 0.6, P99: 1.2}},
			{Interval: "200ms", ProduceToVisible: Q{P50: 0.3, P99: 0.7}},
			{Interval: "200ms", ProduceToVisible: Q{P50: 0.4, P99: 0.9}}}},
	}
	svg := chart(res)
	widths := map[string]string{} // fill colour -> width of its bar
	var order []string
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			var fill, width string
			for _, a := range se.Attr {
				switch a.Name.Local {
				case "fill":
					fill = a.Value
				case "width":
					width = a.Value
				}
			}
			if fill != "white" {
				widths[fill] = width
				order = append(order, fill)
			}
		}
	}
	if len(order) != 2+4 {
		t.Fatalf("%d bars, want 2 throughput bars and p50/p99 for two intervals: %v", len(order), order)
	}
	// Throughput: 400 k/s fills the panel's bar width (440-110-90 = 240), 200 k/s half of it.
	if widths["#888888"] != "240.0" || widths["#1f77b4"] != "120.0" {
		t.Errorf("throughput bars %s and %s wide, want 240.0 and 120.0", widths["#888888"], widths["#1f77b4"])
	}
	// Each panel says when its own step ran; the title gives the day only.
	for _, want := range []string{"0.35 s", "0.80 s (median of 2)", "1.20 s", "0.50× bare", "200 k/s",
		"relay benchmarks — 2026-12-03, 2 cores", "client settings: shipped; run 2026-12-03 08:35 UTC", "dashed line: 1 s; run 2026-12-03 11:14 UTC"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if i, j := strings.Index(svg, "200ms p50"), strings.Index(svg, "1s p50"); i < 0 || j < i {
		t.Error("intervals not in increasing order")
	}
	if empty := chart(&Results{}); strings.Count(empty, "not measured") != 2 {
		t.Error("an empty result does not say so in both panels")
	}
}
