package main

// The picture of a run: docs/benchmarks.svg, drawn from the same Results as the report, so the
// chart and the tables cannot disagree. Hand-written SVG: two bar panels need no plotting library.

import (
	"fmt"
	"html"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
)

// chartFile is written next to docs/BENCHMARKS.md, which shows it.
const chartFile = "benchmarks.svg"

const (
	chartW, chartH = 960, 380
	panelTop       = 70
	panelH         = 230
)

// writeChart draws the throughput of the bare consumer and of relay's modes (first client setting)
// and the visibility latency percentiles per checkpoint interval into path.
func writeChart(res *Results, path string) error {
	return os.WriteFile(path, []byte(chart(res)), 0o644)
}

func chart(res *Results) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	// The title has the day only: the panels may come from different runs (BENCH_STEPS runs some
	// steps and keeps the others), so each panel says when its step ran.
	date := ""
	if res.Machine != nil {
		day, _, _ := strings.Cut(res.Machine.Date, " ")
		date = fmt.Sprintf(" — %s, %d cores, %s", day, res.Machine.NProc, res.Machine.MySQL)
	}
	w(`<text x="16" y="24" font-size="15" font-weight="bold">relay benchmarks%s</text>`+"\n", html.EscapeString(date))
	throughputPanel(w, res.Throughput, res.Steps["throughput"].Date, 16, 440)
	visibilityPanel(w, res.Latency, res.Steps["latency"].Date, 500, 440)
	w("</svg>\n")
	return b.String()
}

// bar is one labelled value.
type bar struct {
	label, note string
	value       float64
	color       string
}

func throughputPanel(w func(string, ...any), tp *TPResult, ran string, x, width int) {
	w(`<text x="%d" y="48" font-size="13" font-weight="bold">Throughput, first record to last commit (median orders/s)</text>`+"\n", x)
	if tp == nil || len(tp.Clients) == 0 {
		w(`<text x="%d" y="%d">not measured</text>`+"\n", x, panelTop+20)
		return
	}
	client := tp.Clients[0]
	colors := map[string]string{"baseline": "#888888", "reader": "#bbbbbb", "xa": "#1f77b4", "held": "#2ca02c", "xa+append": "#ff7f0e"}
	var bars []bar
	for _, kind := range []string{"baseline", "reader", "xa", "held", "xa+append"} {
		s, ok := tp.Summary[client+"/"+kind]
		if !ok {
			continue
		}
		note := ""
		if kind != "baseline" {
			note = fmt.Sprintf("%.2f× bare", s.MedianRatio)
		}
		label := map[string]string{"baseline": "bare Poll", "reader": "bare, relay's reader"}[kind]
		if label == "" {
			label = kind
		}
		bars = append(bars, bar{label: label, note: note, value: s.MedianRate, color: colors[kind]})
	}
	drawBars(w, bars, x, width, func(v float64) string { return fmt.Sprintf("%.0f k/s", v/1e3) }, 0)
	w(`<text x="%d" y="%d" fill="#555">%d orders, %d partitions, %d subtasks, %s checkpoints</text>`+"\n",
		x, panelTop+panelH+30, tp.Orders, tp.Partitions, tp.Subtasks, tp.Interval)
	w(`<text x="%d" y="%d" fill="#555">client settings: %s%s</text>`+"\n", x, panelTop+panelH+48, html.EscapeString(client), html.EscapeString(runOn(ran)))
}

func visibilityPanel(w func(string, ...any), lr *LatencyResult, ran string, x, width int) {
	w(`<text x="%d" y="48" font-size="13" font-weight="bold">Produced → visible in MySQL, per record (p50 / p99, s)</text>`+"\n", x)
	if lr == nil || len(lr.Runs) == 0 {
		w(`<text x="%d" y="%d">not measured</text>`+"\n", x, panelTop+20)
		return
	}
	byInterval := map[string][]LatencyRun{}
	var order []string
	for _, r := range lr.Runs {
		if _, ok := byInterval[r.Interval]; !ok {
			order = append(order, r.Interval)
		}
		byInterval[r.Interval] = append(byInterval[r.Interval], r)
	}
	slices.SortFunc(order, func(a, b string) int {
		da, _ := time.ParseDuration(a)
		db, _ := time.ParseDuration(b)
		return int(da - db)
	})
	var bars []bar
	for _, iv := range order {
		var p50, p99 []float64
		for _, r := range byInterval[iv] {
			p50 = append(p50, r.ProduceToVisible.P50)
			p99 = append(p99, r.ProduceToVisible.P99)
		}
		reps := ""
		if n := len(byInterval[iv]); n > 1 {
			reps = fmt.Sprintf("median of %d", n)
		}
		bars = append(bars, bar{label: iv + " p50", value: kit.Median(p50), color: "#9ecae1"},
			bar{label: iv + " p99", note: reps, value: kit.Median(p99), color: "#08519c"})
	}
	drawBars(w, bars, x, width, func(v float64) string { return fmt.Sprintf("%.2f s", v) }, 1)
	w(`<text x="%d" y="%d" fill="#555">at %.0f k orders/s; dashed line: 1 s%s</text>`+"\n", x, panelTop+panelH+30, lr.TargetRate/1e3, html.EscapeString(runOn(ran)))
	w(`<text x="%d" y="%d" fill="#555">(%s)</text>`+"\n", x, panelTop+panelH+48, html.EscapeString(lr.RateSource))
}

// runOn says when a panel's step ran, if the results know.
func runOn(date string) string {
	if date == "" {
		return ""
	}
	return "; run " + date
}

// drawBars draws horizontal bars scaled to the largest value (and to mark, if above 0, drawn as a
// dashed line).
func drawBars(w func(string, ...any), bars []bar, x, width int, format func(float64) string, mark float64) {
	if len(bars) == 0 {
		return
	}
	labelW := 110
	top := math.Max(mark, 0)
	for _, b := range bars {
		top = math.Max(top, b.value)
	}
	if top <= 0 {
		top = 1
	}
	scale := float64(width-labelW-90) / top
	h := math.Min(36, float64(panelH)/float64(len(bars)))
	for i, b := range bars {
		y := float64(panelTop) + float64(i)*h
		bw := math.Max(b.value*scale, 1)
		w(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x+labelW-6, y+h*0.6, html.EscapeString(b.label))
		w(`<rect x="%d" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x+labelW, y+h*0.15, bw, h*0.7, b.color)
		text := format(b.value)
		if b.note != "" {
			text += " (" + b.note + ")"
		}
		w(`<text x="%.1f" y="%.1f">%s</text>`+"\n", float64(x+labelW)+bw+4, y+h*0.6, html.EscapeString(text))
	}
	if mark > 0 {
		mx := float64(x+labelW) + mark*scale
		w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", mx, panelTop, mx, float64(panelTop)+h*float64(len(bars)))
	}
}
