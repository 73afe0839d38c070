package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
)

// TPResult is the throughput comparison: bare consumer vs relay in three configurations.
type TPResult struct {
	Orders      int64              `json:"orders"`
	Partitions  int                `json:"partitions"`
	SKUs        int                `json:"skus"`
	Windows     int                `json:"windows"`
	Subtasks    int                `json:"subtasks"`
	Interval    string             `json:"interval"`
	ProduceSecs float64            `json:"produce_secs"`
	Loadgen     string             `json:"loadgen_command"`
	RelayEnv    map[string]string  `json:"relay_env"`
	Clients     []string           `json:"clients"`
	Kinds       []string           `json:"kinds,omitempty"` // relay configurations run (BENCH_TP_KINDS)
	ClientProps map[string]string  `json:"client_props"`
	Runs        []TPRun            `json:"runs"`
	Summary     map[string]TPStats `json:"summary"` // by "client/kind"
	// Sweep is the bare consumer under each candidate librdkafka setting, before the repetitions;
	// the fastest by median is the "tuned" client setting.
	Sweep []SweepRow `json:"sweep,omitempty"`
}

// SweepRow is one candidate setting of the sweep.
type SweepRow struct {
	Name   string    `json:"name"`
	Props  string    `json:"props"`
	Rates  []float64 `json:"rates"`
	Median float64   `json:"median"`
}

// sweepCandidates are librdkafka consumer settings the sweep tries on the bare consumer, each on
// top of relay's own (consumer.ConfigMap): relay's settings before 2 Dec, and one step away from
// the shipped point in each of the fetch size, the fetch wait and the local queue.
var sweepCandidates = []SweepRow{
	{Name: "shipped", Props: ""},
	{Name: "before-2-dec", Props: "fetch.queue.backoff.ms=10,max.partition.fetch.bytes=1048576,fetch.wait.max.ms=500,queued.min.messages=100000"},
	{Name: "fetch-1m", Props: "max.partition.fetch.bytes=1048576"},
	{Name: "wait-500ms", Props: "fetch.wait.max.ms=500"},
	{Name: "queue-100k", Props: "queued.min.messages=100000"},
}

// sweep runs the bare consumer under every candidate, alternating, reps times each, and makes the
// fastest by median the "tuned" client setting.
func sweep(e *kit.Env, r *TPResult, topic string, reps int) error {
	rows := slices.Clone(sweepCandidates)
	for rep := 1; rep <= reps; rep++ {
		for i := range rows {
			clientProps["sweep"] = rows[i].Props
			run, err := runBaseline(e, topic, "sweep", "baseline", rep)
			if err != nil {
				return fmt.Errorf("sweep %s: %w", rows[i].Name, err)
			}
			rows[i].Rates = append(rows[i].Rates, run.Rate)
		}
	}
	delete(clientProps, "sweep")
	best := 0
	for i := range rows {
		rows[i].Median = kit.Median(rows[i].Rates)
		if rows[i].Median > rows[best].Median {
			best = i
		}
	}
	r.Sweep = rows
	clientProps["tuned"] = rows[best].Props
	kit.Logf("sweep: fastest bare consumer setting %s (%.0f/s median)", rows[best].Name, rows[best].Median)
	return nil
}

// tuned is the sweep's fastest row.
func (r *TPResult) tuned() (SweepRow, bool) {
	var best SweepRow
	for _, row := range r.Sweep {
		if row.Median > best.Median {
			best = row
		}
	}
	return best, len(r.Sweep) > 0
}

// clientName describes a client setting in the report.
func (r *TPResult) clientName(client string) string {
	if best, ok := r.tuned(); ok && client == "tuned" {
		props := "`" + best.Props + "`"
		if best.Props == "" {
			props = "relay's shipped settings"
		}
		return fmt.Sprintf("tuned: the sweep's fastest for the bare consumer, %s (%s), on both sides", best.Name, props)
	}
	if n, ok := clientNames[client]; ok {
		return n
	}
	return client + " (`" + r.ClientProps[client] + "`)"
}

// crossRatio is the median over repetitions of relay's rate in kind with its shipped settings
// over the tuned bare consumer's rate of the same repetition: how close relay as shipped comes
// to the fastest bare consumer found.
func (r *TPResult) crossRatio(kind string) (float64, bool) {
	base := map[int]float64{}
	for _, run := range r.Runs {
		if run.Client == "tuned" && run.Kind == "baseline" {
			base[run.Rep] = run.Rate
		}
	}
	var ratios []float64
	for _, run := range r.Runs {
		if run.Client == "shipped" && run.Kind == kind && base[run.Rep] > 0 {
			ratios = append(ratios, run.Rate/base[run.Rep])
		}
	}
	return kit.Median(ratios), len(ratios) > 0
}

// Client settings compared, on both sides (relay: RELAY_KAFKA_PROPERTIES, baseline: -X): relay's
// librdkafka configuration as shipped (internal/consumer.ConfigMap, fetch.queue.backoff.ms=1), and
// the same with librdkafka's own default of 1000 ms back, as relay ran before 45921ea: a consumer
// with more than queued.min.messages buffered then waits up to a second before its next fetch.
var clientProps = map[string]string{"shipped": "", "backoff-1s": "fetch.queue.backoff.ms=1000"}

// clientNames describe the client settings in the report.
var clientNames = map[string]string{
	"shipped":    "shipped (relay's `consumer.ConfigMap`)",
	"backoff-1s": "`fetch.queue.backoff.ms=1000` (librdkafka's default; relay before 45921ea)",
}

// TPRun is one measured run. Only what the report shows of it is kept in last-run.json (client,
// kind, rate, rep); the rest feeds the summary's medians and the log.
type TPRun struct {
	Client      string             `json:"client"` // shipped | backoff-1s (librdkafka properties, both sides)
	Kind        string             `json:"kind"`   // baseline | reader | creader | creader-defaults | franz | xa | held | xa+append
	Rate        float64            `json:"rate"`   // records/s over Seconds
	Rep         int                `json:"rep"`    // the repetition, which crossRatio pairs runs by
	Records     int64              `json:"-"`
	Seconds     float64            `json:"-"` // first record (relay: "running") to last commit (baseline: last record)
	ProcessSecs float64            `json:"-"` // process start to the same end
	Ratio       float64            `json:"-"` // Rate / the same repetition's baseline Rate
	ReaderRatio float64            `json:"-"` // relay: Rate / the same repetition's reader Rate
	CRatio      float64            `json:"-"` // relay: Records/ProcessSecs over the repetition's faster C reader's
	CPU         map[string]float64 `json:"-"` // CPU seconds: the measured process, kafka, mysql
	Checkpoints int                `json:"-"`
	// XA only: records of the checkpoints after the first, over the time between the first and the
	// last decision — the rate without start-up and without the last interval's wait.
	SteadyRate float64 `json:"-"`
	Verified   string  `json:"-"`
}

// TPStats are the medians of one kind.
type TPStats struct {
	MedianRate  float64 `json:"median_rate"`
	MedianRatio float64 `json:"median_ratio"`
	// MedianReaderRatio is relay's rate over the bare consumer on relay's own reader (relay kinds).
	MedianReaderRatio float64 `json:"median_reader_ratio,omitempty"`
	// MedianCRatio is relay's rate from process start to exact totals over librdkafka's C batch
	// read's from process start to its last record, the faster of its two settings (relay kinds).
	MedianCRatio   float64 `json:"median_c_ratio,omitempty"`
	MedianSeconds  float64 `json:"median_seconds"`
	CPUPerMillion  float64 `json:"cpu_secs_per_million"`
	RdkPerMillion  float64 `json:"librdkafka_cpu_secs_per_million,omitempty"` // relay: the part of it librdkafka's threads ran
	KafkaCPU       float64 `json:"kafka_cpu_secs"`
	MySQLCPU       float64 `json:"mysql_cpu_secs"`
	MedianProcSecs float64 `json:"median_process_secs"`
	MedianSteady   float64 `json:"median_steady_rate,omitempty"`
}

// defaultOrders is the size of the throughput topic: several million orders, so that relay's
// fixed costs (the first fetch, the last interval's wait and commit) are a few percent of a run.
const defaultOrders = 4000000

// tpKinds are the relay configurations measured, in report order (BENCH_TP_KINDS picks some).
var tpKinds = []string{"xa", "held", "xa+append"}

func runThroughput(e *kit.Env) (*TPResult, string, map[int32]int64, error) {
	r := &TPResult{Orders: int64(kit.EnvInt("BENCH_ORDERS", defaultOrders)), Partitions: 4,
		SKUs: kit.EnvInt("BENCH_SKUS", 1000), Windows: kit.EnvInt("BENCH_WINDOWS", 10),
		Subtasks: kit.EnvInt("BENCH_SUBTASKS", 2), Interval: kit.EnvDuration("BENCH_TP_INTERVAL", time.Second).String(),
		Summary: map[string]TPStats{}, RelayEnv: map[string]string{}}
	reps := kit.EnvInt("BENCH_REPS", 3)
	topic, err := e.CreateTopic("bench_tp", r.Partitions)
	if err != nil {
		return nil, "", nil, err
	}
	lg := harness.Loadgen{Topic: topic, Orders: int(r.Orders), SKUs: r.SKUs, Windows: r.Windows, Seed: 1}
	r.Loadgen = "bin/relay " + strings.Join(quoteEmpty(lg.Args("…")), " ")
	kit.Logf("producing %d orders into %s", r.Orders, topic)
	end, took, err := e.Produce(lg, "tp-loadgen.log")
	if err != nil {
		return nil, "", nil, err
	}
	r.ProduceSecs = took.Seconds()
	if harness.Total(end) != r.Orders {
		return nil, "", nil, fmt.Errorf("topic holds %d records, want %d", harness.Total(end), r.Orders)
	}
	r.Kinds = strings.Split(kit.EnvString("BENCH_TP_KINDS", strings.Join(tpKinds, ",")), ",")
	for _, k := range r.Kinds {
		if !slices.Contains(tpKinds, k) {
			return nil, "", nil, fmt.Errorf("BENCH_TP_KINDS: unknown kind %q (known: %s)", k, strings.Join(tpKinds, ","))
		}
	}
	r.Clients = strings.Split(kit.EnvString("BENCH_TP_CLIENTS", "tuned,shipped"), ",")
	if slices.Contains(r.Clients, "tuned") {
		if err := sweep(e, r, topic, reps); err != nil {
			return nil, "", nil, err
		}
	}
	r.ClientProps = map[string]string{}
	for _, c := range r.Clients {
		props, ok := clientProps[c]
		if !ok {
			return nil, "", nil, fmt.Errorf("BENCH_TP_CLIENTS: unknown client setting %q", c)
		}
		r.ClientProps[c] = props
	}
	for rep := 1; rep <= reps; rep++ {
		for _, client := range r.Clients {
			base, err := runBaseline(e, topic, client, "baseline", rep)
			if err != nil {
				return nil, "", nil, err
			}
			r.Runs = append(r.Runs, base)
			rd, err := runBaseline(e, topic, client, "reader", rep)
			if err != nil {
				return nil, "", nil, err
			}
			rd.Ratio = rd.Rate / base.Rate
			r.Runs = append(r.Runs, rd)
			// librdkafka's own ceiling: the C reader under the same settings, and (once a
			// repetition) under librdkafka's defaults; relay is compared with the faster.
			ceiling := 0.0
			for _, kind := range cKinds(client == r.Clients[0]) {
				cr, err := runBaseline(e, topic, client, kind, rep)
				if err != nil {
					return nil, "", nil, err
				}
				cr.Ratio = cr.Rate / base.Rate
				r.Runs = append(r.Runs, cr)
				ceiling = max(ceiling, float64(cr.Records)/cr.ProcessSecs)
			}
			if client != r.Clients[0] {
				ceiling = max(ceiling, r.defaultsCeiling(rep))
			} else {
				// franz-go's bare read, for scale: a Go client without librdkafka.
				fr, err := runBaseline(e, topic, client, "franz", rep)
				if err != nil {
					return nil, "", nil, err
				}
				fr.Ratio = fr.Rate / base.Rate
				r.Runs = append(r.Runs, fr)
			}
			for _, kind := range r.Kinds {
				run, env, err := runRelayThroughput(e, r, topic, end, client, kind, rep)
				if err != nil {
					return nil, "", nil, fmt.Errorf("%s/%s rep %d: %w", client, kind, rep, err)
				}
				run.Ratio = run.Rate / base.Rate
				run.ReaderRatio = run.Rate / rd.Rate
				run.CRatio = float64(run.Records) / run.ProcessSecs / ceiling
				r.Runs = append(r.Runs, run)
				r.RelayEnv[client+"/"+kind] = env
			}
		}
	}
	for _, key := range r.keys() {
		var rates, ratios, rratios, cratios, secs, cpu, rdk, kcpu, mcpu, psecs, steady []float64
		for _, run := range r.Runs {
			if run.Client+"/"+run.Kind != key {
				continue
			}
			rates = append(rates, run.Rate)
			if run.SteadyRate > 0 {
				steady = append(steady, run.SteadyRate)
			}
			ratios = append(ratios, run.Ratio)
			if run.ReaderRatio > 0 {
				rratios = append(rratios, run.ReaderRatio)
			}
			if run.CRatio > 0 {
				cratios = append(cratios, run.CRatio)
			}
			secs = append(secs, run.Seconds)
			psecs = append(psecs, run.ProcessSecs)
			cpu = append(cpu, run.CPU["self"]/float64(run.Records)*1e6)
			rdk = append(rdk, run.CPU["rdk"]/float64(run.Records)*1e6)
			kcpu = append(kcpu, run.CPU["kafka"])
			mcpu = append(mcpu, run.CPU["mysql"])
		}
		r.Summary[key] = TPStats{MedianRate: kit.Median(rates), MedianRatio: kit.Median(ratios), MedianReaderRatio: kit.Median(rratios), MedianCRatio: kit.Median(cratios), MedianSeconds: kit.Median(secs),
			CPUPerMillion: kit.Median(cpu), RdkPerMillion: kit.Median(rdk), KafkaCPU: kit.Median(kcpu), MySQLCPU: kit.Median(mcpu), MedianProcSecs: kit.Median(psecs), MedianSteady: kit.Median(steady)}
	}
	return r, topic, end, nil
}

// keys lists "client/kind" in report order.
func (r *TPResult) keys() []string {
	var out []string
	for _, c := range r.Clients {
		kinds := append([]string{"baseline", "reader"}, cKinds(c == r.Clients[0])...)
		if c == r.Clients[0] {
			kinds = append(kinds, "franz")
		}
		for _, k := range append(kinds, r.Kinds...) {
			out = append(out, c+"/"+k)
		}
	}
	return out
}

func quoteEmpty(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" {
			a = "''"
		}
		out[i] = a
	}
	return out
}

// cKinds are the C reader's runs of a client setting: under relay's settings, and for the first
// client also under librdkafka's defaults (the same run for every client).
func cKinds(first bool) []string {
	if first {
		return []string{"creader", "creader-defaults"}
	}
	return []string{"creader"}
}

// defaultsCeiling is the process rate of repetition rep's C reader under librdkafka's defaults.
func (r *TPResult) defaultsCeiling(rep int) float64 {
	for _, run := range r.Runs {
		if run.Kind == "creader-defaults" && run.Rep == rep {
			return float64(run.Records) / run.ProcessSecs
		}
	}
	return 0
}

// relayProperties are relay's librdkafka settings (consumer.ConfigMap) as the C reader's -X flags,
// but for what the C reader sets itself (brokers, group, no commits) and the Go client's own keys.
func relayProperties() []string {
	var out []string
	for k, v := range *consumer.ConfigMap(consumer.Options{}) {
		if strings.HasPrefix(k, "go.") || k == "bootstrap.servers" || k == "group.id" {
			continue
		}
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(out)
	return out
}

// runBaseline runs a bare reader: kind "baseline" is confluent-kafka-go's Poll, "reader" relay's
// batch reader (rawconsume --reader), "creader" librdkafka's C batch read under relay's settings
// (bench/creader), "creader-defaults" the same under librdkafka's defaults, "franz" franz-go's
// bare read under its own defaults (rawconsume --reader franz).
func runBaseline(e *kit.Env, topic, client, kind string, rep int) (TPRun, error) {
	run := TPRun{Client: client, Kind: kind, Rep: rep}
	cpu := e.StartCPU(nil)
	bin, args := "rawconsume", []string{"--brokers", e.Brokers, "--topic", topic}
	switch kind {
	case "reader":
		args = append(args, "--reader", "batch")
	case "creader":
		bin = "creader"
		for _, kv := range relayProperties() {
			args = append(args, "-X", kv)
		}
	case "creader-defaults":
		bin = "creader"
	case "franz":
		args = append(args, "--reader", "franz")
	}
	if p := clientProps[client]; p != "" && kind != "creader-defaults" && kind != "franz" {
		for _, kv := range strings.Split(p, ",") {
			args = append(args, "-X", kv)
		}
	}
	cmd := exec.Command(filepath.Join(e.BinDir, bin), args...)
	out, err := cmd.Output()
	run.CPU = cpu.Stop()
	if err != nil {
		return run, fmt.Errorf("%s: %w", bin, err)
	}
	var res struct {
		Records     int64   `json:"records"`
		Seconds     float64 `json:"seconds"`
		Rate        float64 `json:"rate"`
		ProcessSecs float64 `json:"process_secs"`
		CPUSecs     float64 `json:"cpu_secs"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return run, fmt.Errorf("%s output %q: %w", bin, out, err)
	}
	run.Records, run.Seconds, run.Rate, run.ProcessSecs = res.Records, res.Seconds, res.Rate, res.ProcessSecs
	run.CPU["self"] = res.CPUSecs
	run.Ratio = 1
	kit.Logf("%s/%s rep %d: %d records in %.2fs = %.0f/s", client, kind, rep, run.Records, run.Seconds, run.Rate)
	return run, nil
}

func runRelayThroughput(e *kit.Env, r *TPResult, topic string, end map[int32]int64, client, kind string, rep int, extra ...string) (TPRun, string, error) {
	run := TPRun{Client: client, Kind: kind, Rep: rep, Records: r.Orders}
	job, dsn, db, err := e.CreateJob()
	if err != nil {
		return run, "", err
	}
	interval, _ := time.ParseDuration(r.Interval)
	o := kit.RelayOpts{Job: job, Topic: topic, DSN: dsn, Mode: "xa", Subtasks: r.Subtasks, Interval: interval, LogLevel: "info"}
	if kind == "held" {
		o.Mode = "held"
	}
	o.Detail = kind == "xa+append"
	if p := clientProps[client]; p != "" {
		o.Extra = append(o.Extra, "RELAY_KAFKA_PROPERTIES="+p)
	}
	o.Extra = append(o.Extra, extra...)
	cpu := e.StartCPU(nil)
	p, err := e.StartRelay(o, fmt.Sprintf("tp-%s-%s-%d.log", client, strings.ReplaceAll(kind, "+", "-"), rep))
	if err != nil {
		return run, "", err
	}
	defer p.Kill()
	doneAt, err := committed.Wait(db, job, topic, o.Mode == "held", end, 25*time.Millisecond, 10*time.Minute, p.Alive)
	if err != nil {
		return run, "", err
	}
	running, err := p.WaitLog(kit.IsRunning, 5*time.Second)
	if err != nil {
		return run, "", err
	}
	th, err := kit.ReadThreads(p.PID())
	if err != nil {
		return run, "", err
	}
	if err := p.Stop(time.Minute); err != nil {
		return run, "", err
	}
	run.CPU = cpu.Stop()
	run.CPU["self"] = p.CPU().Seconds()
	run.CPU["rdk"] = th.Rdk.Seconds()
	run.Seconds = doneAt.Sub(running.TS).Seconds()
	run.ProcessSecs = doneAt.Sub(p.Start).Seconds()
	run.Rate = float64(run.Records) / run.Seconds
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if o.Mode == "xa" {
		cps, err := committed.Checkpoints(ctx, db, job, topic)
		if err != nil {
			return run, "", err
		}
		run.Checkpoints = len(cps)
		if n := len(cps); n >= 3 {
			var recs int64
			for _, c := range cps[1:] {
				recs += c.Records
			}
			run.SteadyRate = float64(recs) / cps[n-1].DecidedAt.Sub(cps[0].DecidedAt).Seconds()
		}
	}
	// Light verification: every order is counted once in the aggregate (and once in the detail table).
	var orders, details int64
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(order_count), 0) FROM order_stats_minute`).Scan(&orders); err != nil {
		return run, "", err
	}
	run.Verified = fmt.Sprintf("sum(order_count)=%d", orders)
	if o.Detail {
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_details`).Scan(&details); err != nil {
			return run, "", err
		}
		run.Verified += fmt.Sprintf(" details=%d", details)
	}
	if orders != r.Orders || (o.Detail && details != r.Orders) {
		return run, "", fmt.Errorf("verification failed: %s, want %d", run.Verified, r.Orders)
	}
	kit.Logf("%s/%s rep %d: %.2fs = %.0f/s (steady %.0f/s, %d checkpoints, relay CPU %.1fs, kafka %.1fs, mysql %.1fs)", client, kind, rep,
		run.Seconds, run.Rate, run.SteadyRate, run.Checkpoints, run.CPU["self"], run.CPU["kafka"], run.CPU["mysql"])
	e.DropNow(job)
	return run, strings.Join(o.Vars(), " "), nil
}
