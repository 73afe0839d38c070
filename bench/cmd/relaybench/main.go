// Command relaybench measures relay end to end against the local Kafka and MySQL/MariaDB and
// writes the results into docs/BENCHMARKS.md (between the generated-results markers), the chart
// docs/benchmarks.svg and bench/results/last-run.json. `make bench` (scripts/bench.sh) builds and runs it.
//
// Steps (BENCH_STEPS, comma-separated; default all): micro, throughput, latency, recovery, rss,
// profile; and, only when named, flink (relay against Apache Flink's XA JDBC sink; needs Maven and
// Java 17) and group (one instance against one and two members of a consumer group, issue 26). A
// step that is not run keeps its previous results from last-run.json, so one step can be
// re-measured alone. Every topic, database and job is created with a random suffix and removed at
// the end.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
)

// Results is everything one run measured; steps not run keep their previous values.
type Results struct {
	Machine    *Machine          `json:"machine,omitempty"`
	Steps      map[string]Step   `json:"steps,omitempty"` // when and how each step's numbers were taken
	Command    string            `json:"command,omitempty"`
	Settings   map[string]string `json:"settings,omitempty"`
	Micro      *MicroResult      `json:"micro,omitempty"`
	Throughput *TPResult         `json:"throughput,omitempty"`
	Latency    *LatencyResult    `json:"latency,omitempty"`
	Recovery   *RecoveryResult   `json:"recovery,omitempty"`
	RSS        *RSSResult        `json:"rss,omitempty"`
	Profile    *ProfileResult    `json:"profile,omitempty"`
	Flink      *FlinkResult      `json:"flink,omitempty"`
	// FlinkScale is the flink step at each of several sizes (BENCH_FLINK_SIZES), Flink the first.
	FlinkScale []*FlinkResult `json:"flink_scale,omitempty"`
	Group      *GroupResult   `json:"group,omitempty"`
	Formats    *FormatsResult `json:"formats,omitempty"`
}

// Step records the provenance of one step's results.
type Step struct {
	Date     string  `json:"date"`
	LoadAvg  string  `json:"loadavg_at_start"`
	Command  string  `json:"command"`
	Seconds  float64 `json:"seconds"`
	Failed   string  `json:"failed,omitempty"`
	RelayRev string  `json:"relay_commit"`
}

var allSteps = []string{"micro", "throughput", "latency", "recovery", "rss", "profile"}

// extraSteps run only when BENCH_STEPS names them (flink needs Maven and ≈85 MB of jars; group
// produces a topic of its own and runs nine configurations per mode; formats produces a topic per
// input format and needs the schema registry).
var extraSteps = []string{"flink", "group", "formats"}

// reportOnly re-renders docs/BENCHMARKS.md from last-run.json (BENCH_STEPS=report).
const reportOnly = "report"

func main() {
	if err := run(); err != nil {
		kit.Logf("FAILED: %v", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	// A private build: bin/relay is rebuilt by whoever runs `make build` while the benchmark runs.
	binDir := kit.EnvString("BENCH_BIN", filepath.Join(root, ".cache/bench/bin"))
	e := &kit.Env{
		BinDir:   binDir,
		Brokers:  kit.EnvString("RELAY_TEST_KAFKA", "127.0.0.1:19092"),
		AdminDSN: kit.EnvString("RELAY_TEST_MYSQL_DSN", "relay:relay@tcp(127.0.0.1:13306)/relay"),
		RelayBin: filepath.Join(binDir, "relay"),
		OutDir:   kit.EnvString("BENCH_OUT", filepath.Join(os.TempDir(), "relay-bench-"+time.Now().Format("20060102-150405"))),
		Root:     root,
	}
	// Remove what we created on Ctrl-C too.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		kit.Logf("interrupted: cleaning up")
		e.Cleanup()
		os.Exit(130)
	}()
	defer e.Cleanup()

	resultsPath := filepath.Join(root, "bench/results/last-run.json")
	res := &Results{}
	if b, err := os.ReadFile(resultsPath); err == nil {
		_ = json.Unmarshal(b, res)
	}
	if kit.EnvString("BENCH_STEPS", "") == reportOnly {
		return writeReport(res, filepath.Join(root, "docs/BENCHMARKS.md"))
	}
	if err := os.MkdirAll(e.OutDir, 0o755); err != nil {
		return err
	}
	kit.Logf("output (logs, profiles) in %s", e.OutDir)
	steps := strings.Split(kit.EnvString("BENCH_STEPS", strings.Join(allSteps, ",")), ",")
	want := map[string]bool{}
	for _, s := range steps {
		s = strings.TrimSpace(s)
		if !contains(allSteps, s) && !contains(extraSteps, s) {
			return fmt.Errorf("BENCH_STEPS: unknown step %q (steps: %s)", s, strings.Join(append(allSteps, extraSteps...), ","))
		}
		want[s] = true
	}
	res.Machine, err = machineFacts(e)
	if err != nil {
		return err
	}
	res.Command = kit.EnvString("BENCH_COMMAND", "make bench")
	res.Settings = settings()

	var errs []error
	step := func(name string, fn func() error) {
		if !want[name] {
			return
		}
		kit.Logf("=== %s", name)
		start := time.Now()
		st := Step{Date: start.UTC().Format("2006-01-02 15:04 UTC"), LoadAvg: loadAvg(), Command: res.Command, RelayRev: res.Machine.RelayCommit}
		if err := fn(); err != nil {
			kit.Logf("step %s failed: %v", name, err)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			st.Failed = err.Error()
		}
		st.Seconds = time.Since(start).Seconds()
		if res.Steps == nil {
			res.Steps = map[string]Step{}
		}
		res.Steps[name] = st
		kit.Logf("=== %s done in %s", name, time.Since(start).Round(time.Second))
		// Results and report are rewritten after every step: an interrupted run keeps what it measured.
		if err := save(res, resultsPath, filepath.Join(root, "docs/BENCHMARKS.md")); err != nil {
			errs = append(errs, err)
		}
	}
	step("micro", func() (err error) { res.Micro, err = runMicro(e); return })
	// Throughput also produces the topic that profile reuses.
	var tpTopic string
	var tpEnd map[int32]int64
	step("throughput", func() (err error) { res.Throughput, tpTopic, tpEnd, err = runThroughput(e); return })
	step("latency", func() (err error) { res.Latency, err = runLatency(e, res.Throughput); return })
	step("recovery", func() (err error) { res.Recovery, err = runRecovery(e); return })
	step("rss", func() (err error) { res.RSS, err = runRSS(e); return })
	step("profile", func() (err error) { res.Profile, err = runProfile(e, tpTopic, tpEnd); return })
	step("flink", func() error {
		sizes, err := runFlink(e)
		if len(sizes) > 0 {
			res.Flink, res.FlinkScale = sizes[0], nil
			if len(sizes) > 1 {
				res.FlinkScale = sizes
			}
		}
		return err
	})
	step("group", func() (err error) {
		if res.Group, err = runGroup(e); res.Group != nil {
			m := res.Machine
			res.Group.Host = fmt.Sprintf("%s, %d cores, kernel %s, %s, librdkafka %s", m.CPUModel, m.NProc, m.Kernel, m.MySQL, m.Librdkafka)
		}
		return
	})
	step("formats", func() (err error) { res.Formats, err = runFormats(e); return })
	if len(errs) == 0 && len(want) == 0 {
		return errors.New("no step ran")
	}
	return errors.Join(errs...)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func save(res *Results, jsonPath, mdPath string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(jsonPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return writeReport(res, mdPath)
}

// settings are the scale knobs in force (for the report).
func settings() map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BENCH_") && !strings.HasPrefix(kv, "BENCH_OUT=") && !strings.HasPrefix(kv, "BENCH_COMMAND=") &&
			!strings.HasPrefix(kv, "BENCH_BIN=") {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
	}
	return out
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}
