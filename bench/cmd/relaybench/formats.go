// The formats step: the same orders in every input format (json, avro, protobuf, json_schema),
// each read by relay XA from offset 0 to exact totals, alternating, in one sitting.
//
// Invariant: every format's topic holds the same generated orders (one seed; loadgen writes each
// record's registry-format twin), so the runs differ only in how relay decodes; each run is
// verified (SUM(order_count) equals the orders) before it counts, and the order of the formats
// rotates each repetition so that no format always runs on a warmer or a busier box.

package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/harness"
)

// FormatsResult is the formats step's measurements.
type FormatsResult struct {
	Orders     int64                  `json:"orders"`
	Partitions int                    `json:"partitions"`
	Subtasks   int                    `json:"subtasks"`
	Interval   string                 `json:"interval"`
	Loadgen    map[string]string      `json:"loadgen_commands"` // by format
	RelayEnv   string                 `json:"relay_env"`
	Runs       []FormatRun            `json:"runs"`
	Summary    map[string]FormatStats `json:"summary"` // by format
}

// FormatRun is one format's run in one repetition.
type FormatRun struct {
	Format  string  `json:"format"`
	Rep     int     `json:"rep"`
	Seconds float64 `json:"seconds"` // running → totals visible
	Rate    float64 `json:"rate"`
	CPU     float64 `json:"relay_cpu_secs"`
}

// FormatStats are one format's medians, and its rate over JSON's of the same repetition.
type FormatStats struct {
	MedianRate          float64 `json:"median_rate"`
	MedianCPUPerMillion float64 `json:"median_cpu_secs_per_million"`
	MedianRatioToJSON   float64 `json:"median_ratio_to_json"`
}

// benchFormats are the formats measured, JSON first (the others' reference).
var benchFormats = []string{"json", "avro", "protobuf", "json_schema"}

func runFormats(e *kit.Env) (*FormatsResult, error) {
	registry := os.Getenv("RELAY_TEST_REGISTRY")
	if registry == "" {
		return nil, fmt.Errorf("the formats step needs a schema registry: RELAY_TEST_REGISTRY (scripts/bench.sh starts one)")
	}
	r := &FormatsResult{Orders: int64(kit.EnvInt("BENCH_FORMAT_ORDERS", 2000000)), Partitions: 4,
		Subtasks: kit.EnvInt("BENCH_SUBTASKS", 2), Interval: kit.EnvDuration("BENCH_TP_INTERVAL", time.Second).String(),
		Loadgen: map[string]string{}, Summary: map[string]FormatStats{}}
	formats := strings.Split(kit.EnvString("BENCH_FORMATS", strings.Join(benchFormats, ",")), ",")
	for _, f := range formats {
		if !slices.Contains(benchFormats, f) {
			return nil, fmt.Errorf("BENCH_FORMATS: unknown format %q (known: %s)", f, strings.Join(benchFormats, ","))
		}
	}
	tp := &TPResult{Orders: r.Orders, Subtasks: r.Subtasks, Interval: r.Interval}
	topics, ends := map[string]string{}, map[string]map[int32]int64{}
	for _, f := range formats {
		topic, err := e.CreateTopic("bench_fmt_"+f, r.Partitions)
		if err != nil {
			return nil, err
		}
		lg := harness.Loadgen{Topic: topic, Orders: int(r.Orders), SKUs: kit.EnvInt("BENCH_SKUS", 1000), Windows: kit.EnvInt("BENCH_WINDOWS", 10), Seed: 1}
		if f != "json" {
			lg.Format, lg.Registry = f, registry
		}
		r.Loadgen[f] = "bin/relay " + strings.Join(quoteEmpty(lg.Args("…")), " ")
		kit.Logf("producing %d orders into %s (%s)", r.Orders, topic, f)
		// A topic created a moment ago may not have its leaders yet: loadgen's check that no job
		// reads it then fails, and is asked again.
		var end map[int32]int64
		for attempt := 1; ; attempt++ {
			if end, _, err = e.Produce(lg, "fmt-loadgen-"+f+".log"); err == nil || attempt == 5 {
				break
			}
			kit.Logf("loadgen %s (attempt %d): %v", f, attempt, err)
			time.Sleep(2 * time.Second)
		}
		if err != nil {
			return nil, err
		}
		if harness.Total(end) != r.Orders {
			return nil, fmt.Errorf("%s topic holds %d records, want %d", f, harness.Total(end), r.Orders)
		}
		topics[f], ends[f] = topic, end
	}
	reps := kit.EnvInt("BENCH_REPS", 3)
	for rep := 1; rep <= reps; rep++ {
		for i := range formats {
			f := formats[(i+rep-1)%len(formats)]
			var extra []string
			if f != "json" {
				extra = []string{"RELAY_INPUT_FORMAT=" + f, "RELAY_SCHEMA_REGISTRY_URL=" + registry}
			}
			run, vars, err := runRelayThroughput(e, tp, topics[f], ends[f], f, "xa", rep, extra...)
			if err != nil {
				return nil, fmt.Errorf("%s rep %d: %w", f, rep, err)
			}
			r.RelayEnv = strings.ReplaceAll(vars, registry, "…")
			r.Runs = append(r.Runs, FormatRun{Format: f, Rep: rep, Seconds: run.Seconds, Rate: run.Rate, CPU: run.CPU["self"]})
		}
	}
	json := map[int]float64{}
	for _, run := range r.Runs {
		if run.Format == "json" {
			json[run.Rep] = run.Rate
		}
	}
	for _, f := range formats {
		var rates, cpu, ratios []float64
		for _, run := range r.Runs {
			if run.Format != f {
				continue
			}
			rates = append(rates, run.Rate)
			cpu = append(cpu, run.CPU/float64(r.Orders)*1e6)
			if j := json[run.Rep]; j > 0 {
				ratios = append(ratios, run.Rate/j)
			}
		}
		r.Summary[f] = FormatStats{MedianRate: kit.Median(rates), MedianCPUPerMillion: kit.Median(cpu), MedianRatioToJSON: kit.Median(ratios)}
	}
	return r, nil
}

// renderFormats is the formats step's section.
func renderFormats(w func(string, ...any), r *FormatsResult) {
	w("### Input formats: the same orders as JSON, Avro, Protobuf and JSON Schema\n\n")
	w("%d orders in %d partitions per format, one topic per format written by loadgen from the same seed (a registry format's records carry exactly the JSON records' values). Each repetition runs relay XA (%d subtasks, checkpoint interval %s) on each topic from offset 0 on a fresh database, the formats' order rotating each repetition; time is from relay's `running` to the first poll (25 ms) at which every committed offset reached the topic's end, verified by `SUM(order_count)`. CPU is relay's own (utime+stime of the process) per million orders.\n\n",
		r.Orders, r.Partitions, r.Subtasks, r.Interval)
	w("| format | median orders/s | ÷ JSON's (median of per-repetition ratios) | CPU s per million orders (median) | per-repetition orders/s |\n|---|---:|---:|---:|---|\n")
	for _, f := range benchFormats {
		s, ok := r.Summary[f]
		if !ok {
			continue
		}
		var per []string
		for _, run := range r.Runs {
			if run.Format == f {
				per = append(per, kps(run.Rate))
			}
		}
		w("| %s | %s | %.2f | %.2f | %s |\n", f, kps(s.MedianRate), s.MedianRatioToJSON, s.MedianCPUPerMillion, strings.Join(per, ", "))
	}
	w("\n```sh\n")
	for _, f := range benchFormats {
		if c, ok := r.Loadgen[f]; ok {
			w("%s\n", c)
		}
	}
	w("%s [RELAY_INPUT_FORMAT=<format> RELAY_SCHEMA_REGISTRY_URL=…] RELAY_KAFKA_BROKERS=… RELAY_MYSQL_DSN=… bin/relay run\n```\n\n", r.RelayEnv)
}
