package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
)

// LatencyResult is checkpoint phase and visibility latency under steady load, per interval.
type LatencyResult struct {
	TargetRate float64 `json:"target_rate"` // orders/s asked of loadgen
	RateSource string  `json:"rate_source"`
	// MaxLoad is the search for the highest load this machine sustains live (producer, Kafka,
	// relay and MariaDB together) at the target interval; the target rate is half of it.
	MaxLoad *MaxLoad     `json:"max_load,omitempty"`
	Runs    []LatencyRun `json:"runs"`
	Load    string       `json:"load"` // the first run's load and relay environment, for the report
	// (the others differ only in rate, interval and names)
	RelayEnv string `json:"relay_env"`
}

// MaxLoad is the sustained-load search: probes in the order run, and the highest sustained rate.
type MaxLoad struct {
	CatchUp   float64      `json:"catch_up_rate"` // relay XA on a backlog (the throughput step), without a live producer
	ProbeSecs float64      `json:"probe_secs"`
	Cores     int          `json:"cores"`
	Probes    []LatencyRun `json:"probes"`
	Sustained float64      `json:"sustained_rate"` // highest probe rate relay kept up with; 0 if none
}

// sustainedDrain is how far behind the producer a probe may end and still count as sustained: a
// relay short of the load by a tenth falls 2 s behind in a 20 s probe.
const sustainedDrain = 2 * time.Second

// sustained says the machine carried the probe's load: the producer produced at 95 % of the rate
// asked or more (it shares the cores: a load it cannot make is not sustained either), and relay
// had committed everything within sustainedDrain of the producer's last record.
func (r LatencyRun) sustained() bool {
	return r.AchievedRate >= 0.95*r.TargetRate && r.DrainSecs <= sustainedDrain.Seconds()
}

// Q is a p50/p99 pair (seconds); Lo/Hi are the histogram bucket bounds of p99 when from a histogram.
type Q struct {
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max,omitempty"`
	P99Lo float64 `json:"p99_bucket_lo,omitempty"`
	P99Hi float64 `json:"p99_bucket_hi,omitempty"`
}

// LatencyRun is one interval.
type LatencyRun struct {
	Interval     string  `json:"interval"`
	Rep          int     `json:"rep,omitempty"` // repetition of the target run (200 ms at half load), from 1
	DurationSecs float64 `json:"duration_secs"`
	Orders       int64   `json:"-"`
	TargetRate   float64 `json:"target_rate"`
	AchievedRate float64 `json:"achieved_rate"`          // orders / producer wall time
	DrainSecs    float64 `json:"drain_secs"`             // producer's last record → relay committed everything
	RecordsPerCP float64 `json:"records_per_checkpoint"` // median, from the ledger
	RowsPerCP    float64 `json:"rows_per_checkpoint"`    // mean, relay_upserted_rows_total / committed checkpoints
	Checkpoints  int     `json:"checkpoints"`
	// From relay's debug log, one sample per checkpoint (millisecond timestamps).
	LogPhases map[string]Q `json:"log_phases"` // flush+prepare, decide, commit, total
	// From relay's /metrics histograms (interpolated inside 5ms·2^k buckets).
	HistPhases map[string]Q `json:"hist_phases"` // flush, prepare, decide, commit, total
	Visibility Q            `json:"visibility"`  // relay_visibility_latency_seconds (per checkpoint, oldest record)
	// Per record: ledger committed_at of the covering checkpoint − Kafka producer timestamp.
	ProduceToVisible Q                  `json:"produce_to_visible"`
	CPU              map[string]float64 `json:"cpu_secs"`
	RelayEnv         string             `json:"-"`
	Loadgen          string             `json:"-"`
}

func runLatency(e *kit.Env, tp *TPResult) (*LatencyResult, error) {
	r := &LatencyResult{}
	if rate := kit.EnvInt("BENCH_LAT_RATE", 0); rate > 0 {
		r.TargetRate, r.RateSource = float64(rate), "BENCH_LAT_RATE"
	} else {
		// "Half the measured maximum load": the maximum is what this machine sustains live, with
		// the producer on the same cores. relay's rate on a backlog (the throughput step) is not a
		// load it can be given here: producing it alone takes most of a core.
		m, err := searchMaxLoad(e, xaRate(tp, "shipped"))
		r.MaxLoad = m
		if err != nil {
			return r, err
		}
		r.TargetRate = math.Round(m.Sustained/2/1000) * 1000
		r.RateSource = "half the highest load sustained live at 200 ms checkpoints"
	}
	base := kit.EnvDuration("BENCH_LAT_DURATION", 30*time.Second)
	for _, iv := range strings.Split(kit.EnvString("BENCH_LAT_INTERVALS", "200ms,1s,10s"), ",") {
		d, err := time.ParseDuration(iv)
		if err != nil || d <= 0 {
			return r, fmt.Errorf("BENCH_LAT_INTERVALS: bad interval %q", iv)
		}
		// Long intervals get twice the load duration, so the run holds a few checkpoints.
		dur := base
		if d >= 10*time.Second {
			dur = 2 * base
		}
		// The run the target is about is the noisiest (checkpoints close to the interval on a
		// busy machine): it is repeated and judged by the median of its repetitions.
		reps := 1
		if r.isTarget(d.String(), r.TargetRate) {
			reps = max(kit.EnvInt("BENCH_LAT_REPS", 3), 1)
		}
		for rep := 1; rep <= reps; rep++ {
			run, err := latencyRun(e, r.TargetRate, d, dur)
			if err != nil {
				return r, fmt.Errorf("interval %s: %w", d, err)
			}
			if reps > 1 {
				run.Rep = rep
			}
			r.Runs = append(r.Runs, run)
			if len(r.Runs) == 1 {
				r.Load, r.RelayEnv = run.Loadgen, run.RelayEnv
			}
		}
	}
	return r, nil
}

// searchMaxLoad finds the highest load relay keeps up with live at targetInterval: probes of
// BENCH_LAT_PROBE_DURATION (20 s), at most BENCH_LAT_PROBES (6) of them.
func searchMaxLoad(e *kit.Env, catchUp float64) (*MaxLoad, error) {
	dur := kit.EnvDuration("BENCH_LAT_PROBE_DURATION", 20*time.Second)
	m, err := bisectLoad(catchUp, max(kit.EnvInt("BENCH_LAT_PROBES", 6), 1), func(rate float64) (LatencyRun, error) {
		run, err := latencyRun(e, rate, targetInterval, dur)
		if err == nil {
			kit.Logf("probe %.0f orders/s: relay done %.2fs after the producer: sustained %v", rate, run.DrainSecs, run.sustained())
		}
		return run, err
	})
	m.ProbeSecs, m.Cores = dur.Seconds(), runtime.NumCPU()
	return m, err
}

// bisectLoad runs up to n probes: the first at half the backlog rate catchUp, then the geometric
// mean of the highest sustained and the lowest unsustained rate (catchUp itself counting as
// unsustained, since relay reads no faster than that with no producer running), 0.6 of the lowest
// while none was sustained; it stops once the two are within 10 %.
func bisectLoad(catchUp float64, n int, probe func(rate float64) (LatencyRun, error)) (*MaxLoad, error) {
	m := &MaxLoad{CatchUp: catchUp}
	fail := catchUp
	if fail <= 0 {
		fail = 400000 // no throughput result: start the search at 200 k/s
	}
	lo, rate := 0.0, fail/2
	for range n {
		rate = math.Round(rate/1000) * 1000
		run, err := probe(rate)
		if err != nil {
			return m, fmt.Errorf("probe at %.0f/s: %w", rate, err)
		}
		m.Probes = append(m.Probes, run)
		if run.sustained() {
			lo = rate
		} else {
			fail = rate
		}
		if lo > 0 && fail <= lo*1.1 {
			break
		}
		if lo == 0 {
			rate = fail * 0.6
		} else {
			rate = math.Sqrt(lo * fail)
		}
	}
	m.Sustained = lo
	if lo == 0 {
		return m, fmt.Errorf("relay kept up with none of the probes (lowest %.0f orders/s)", fail)
	}
	return m, nil
}

func xaRate(tp *TPResult, client string) float64 {
	if tp == nil {
		return 0
	}
	return tp.Summary[client+"/xa"].MedianRate
}

func latencyRun(e *kit.Env, rate float64, interval, dur time.Duration) (LatencyRun, error) {
	run := LatencyRun{Interval: interval.String(), DurationSecs: dur.Seconds(), TargetRate: rate}
	topic, err := e.CreateTopic("bench_lat", 4)
	if err != nil {
		return run, err
	}
	defer e.DeleteTopic(topic)
	job, dsn, db, err := e.CreateJob()
	if err != nil {
		return run, err
	}
	defer e.DropNow(job)
	o := kit.RelayOpts{Job: job, Topic: topic, DSN: dsn, Mode: "xa", Subtasks: kit.EnvInt("BENCH_SUBTASKS", 2),
		Interval: interval, LogLevel: "debug"}
	run.RelayEnv = strings.Join(o.Vars(), " ")
	p, err := e.StartRelay(o, "lat-"+interval.String()+".log")
	if err != nil {
		return run, err
	}
	defer p.Kill()
	if _, err := p.WaitLog(kit.IsRunning, time.Minute); err != nil {
		return run, err
	}
	run.Orders = int64(rate * dur.Seconds())
	lg := harness.Loadgen{Topic: topic, Orders: int(run.Orders), Rate: rate, SKUs: kit.EnvInt("BENCH_SKUS", 1000),
		Windows: kit.EnvInt("BENCH_WINDOWS", 10), Seed: 2}
	run.Loadgen = fmt.Sprintf("kit.PacedProduce: a pool of 262 144 records from loadgen.Generator (seed 2, %d skus, %d windows), repeated, %.0f orders/s in 5 ms steps, linger.ms=5, no transactions",
		lg.SKUs, lg.Windows, rate)
	kit.Logf("interval %s: %d orders at %.0f/s for %s", interval, run.Orders, rate, dur)
	cpu := e.StartCPU(map[string]int{"relay": p.PID(), "producer": os.Getpid()})
	start := time.Now()
	took, err := e.PacedProduce(lg)
	if err != nil {
		return run, fmt.Errorf("produce: %w", err)
	}
	run.AchievedRate = float64(run.Orders) / took.Seconds()
	end, err := harness.EndOffsets(e.Brokers, topic)
	if err != nil {
		return run, err
	}
	if harness.Total(end) != run.Orders {
		return run, fmt.Errorf("topic holds %d records, want %d", harness.Total(end), run.Orders)
	}
	done, err := committed.Wait(db, job, topic, false, end, 50*time.Millisecond, 2*time.Minute+2*interval, p.Alive)
	if err != nil {
		return run, err
	}
	run.DrainSecs = max(done.Sub(start.Add(took)).Seconds(), 0)
	run.CPU = cpu.Stop()
	rows, err := p.ScrapeCounter("relay_upserted_rows_total", "")
	if err != nil {
		return run, err
	}
	cps, err := p.ScrapeCounter("relay_checkpoints_total", "result")
	if err != nil {
		return run, err
	}
	if cps["committed"] > 0 {
		run.RowsPerCP = rows[""] / cps["committed"]
	}
	hist, err := p.ScrapeHistograms("relay_checkpoint_phase_duration_seconds", "phase")
	if err != nil {
		return run, err
	}
	run.HistPhases = map[string]Q{}
	for phase, h := range hist {
		run.HistPhases[phase] = histQ(h)
	}
	vis, err := p.ScrapeHistograms("relay_visibility_latency_seconds", "")
	if err != nil {
		return run, err
	}
	run.Visibility = histQ(vis[""])
	if err := p.Stop(time.Minute); err != nil {
		return run, err
	}
	lines, err := harness.ReadLog(p.Log)
	if err != nil {
		return run, err
	}
	run.LogPhases, run.Checkpoints = logPhases(lines)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ledger, err := committed.Checkpoints(ctx, db, job, topic)
	if err != nil {
		return run, err
	}
	times, err := e.RecordTimes(topic, end)
	if err != nil {
		return run, err
	}
	var recs []float64
	for _, c := range ledger {
		recs = append(recs, float64(c.Records))
	}
	run.RecordsPerCP = kit.Median(recs)
	v := kit.VisibilityPerRecord(ledger, times)
	run.ProduceToVisible = sampleQ(v)
	kit.Logf("interval %s: achieved %.0f/s, done %.2fs after the producer, %d checkpoints of %.0f rows, total p50/p99 %.0f/%.0f ms, visibility (hist) p50/p99 %.0f/%.0f ms, produce→visible p50/p99 %.0f/%.0f ms",
		interval, run.AchievedRate, run.DrainSecs, run.Checkpoints, run.RowsPerCP, run.LogPhases["total"].P50*1e3, run.LogPhases["total"].P99*1e3,
		run.Visibility.P50*1e3, run.Visibility.P99*1e3, run.ProduceToVisible.P50*1e3, run.ProduceToVisible.P99*1e3)
	return run, nil
}

func histQ(h kit.Histogram) Q {
	p50, _, _ := h.Quantile(0.5)
	p99, lo, hi := h.Quantile(0.99)
	q := Q{P50: p50, P99: p99, P99Lo: lo, P99Hi: hi}
	if math.IsNaN(p50) {
		q.P50, q.P99 = 0, 0
	}
	if math.IsInf(q.P99Hi, 1) {
		q.P99Hi = -1 // +Inf: JSON has no infinity
	}
	return q
}

func sampleQ(xs []float64) Q {
	q := Q{P50: kit.Percentile(xs, 0.5), P99: kit.Percentile(xs, 0.99)}
	for _, x := range xs {
		q.Max = max(q.Max, x)
	}
	return q
}

// logPhases derives per-checkpoint phases from relay's debug log: cut = committed − duration;
// flush+prepare = last subtask "prepared" − cut; decide = "decided" − last "prepared";
// commit = "committed" − "decided"; total = the "duration" field.
func logPhases(lines []harness.LogLine) (map[string]Q, int) {
	type cp struct {
		prepared, decided, committed time.Time
		total                        time.Duration
	}
	cps := map[int64]*cp{}
	get := func(id int64) *cp {
		c := cps[id]
		if c == nil {
			c = &cp{}
			cps[id] = c
		}
		return c
	}
	for _, l := range lines {
		id := int64(l.Num("checkpoint"))
		switch {
		case l.Logger == "relay.pipeline.subtask" && l.Msg == "prepared":
			c := get(id)
			if l.TS.After(c.prepared) {
				c.prepared = l.TS
			}
		case l.Logger == "relay.pipeline.checkpoint" && l.Msg == "decided":
			get(id).decided = l.TS
		case l.Logger == "relay.pipeline.checkpoint" && l.Msg == "committed":
			c := get(id)
			c.committed = l.TS
			if s, ok := l.Fields["duration"].(string); ok {
				c.total, _ = time.ParseDuration(s)
			}
		}
	}
	samples := map[string][]float64{}
	n := 0
	for _, c := range cps {
		if c.committed.IsZero() || c.decided.IsZero() || c.prepared.IsZero() {
			continue
		}
		n++
		cut := c.committed.Add(-c.total)
		samples["flush+prepare"] = append(samples["flush+prepare"], c.prepared.Sub(cut).Seconds())
		samples["decide"] = append(samples["decide"], c.decided.Sub(c.prepared).Seconds())
		samples["commit"] = append(samples["commit"], c.committed.Sub(c.decided).Seconds())
		samples["total"] = append(samples["total"], c.total.Seconds())
	}
	out := map[string]Q{}
	for k, v := range samples {
		out[k] = sampleQ(v)
	}
	return out, n
}

// targetInterval is the checkpoint interval the visibility target is about.
const targetInterval = 200 * time.Millisecond

// isTarget says whether a run at interval and rate is the one the visibility target is about:
// targetInterval at the full latency load.
func (r *LatencyResult) isTarget(interval string, rate float64) bool {
	return interval == targetInterval.String() && rate == r.TargetRate
}

// targetRuns are the repetitions of the run the visibility target is about.
func (r *LatencyResult) targetRuns() []LatencyRun {
	var out []LatencyRun
	for _, run := range r.Runs {
		if r.isTarget(run.Interval, run.TargetRate) {
			out = append(out, run)
		}
	}
	return out
}

// renderLatency writes the latency section: the sustained-load search, the runs at the target
// load, and what bounds the checkpoint.
func renderLatency(w func(string, ...any), lt *LatencyResult, cores int) {
	w("### Checkpoint phases and visibility under steady load\n\n")
	row := func(r LatencyRun, label string) {
		lp := r.LogPhases
		w("| %s | %.0f s | %s / %s | %.2f s | %d (%.0f / %.0f) | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s [%s–%s] | %s / %s / %s |\n", label, r.DurationSecs, kps(r.TargetRate), kps(r.AchievedRate), r.DrainSecs,
			r.Checkpoints, r.RecordsPerCP, r.RowsPerCP,
			ms(lp["flush+prepare"].P50), ms(lp["flush+prepare"].P99), ms(lp["decide"].P50), ms(lp["decide"].P99),
			ms(lp["commit"].P50), ms(lp["commit"].P99), ms(lp["total"].P50), ms(lp["total"].P99),
			ms(r.Visibility.P50), ms(r.Visibility.P99), ms(r.Visibility.P99Lo), bound(r.Visibility.P99Hi),
			ms(r.ProduceToVisible.P50), ms(r.ProduceToVisible.P99), ms(r.ProduceToVisible.Max))
	}
	const head = "| run | duration | load orders/s (asked / achieved) | relay done after the producer | checkpoints (median records / mean rows each) | flush+prepare p50 / p99 ms | decide p50 / p99 ms | commit p50 / p99 ms | total p50 / p99 ms | visibility (histogram) p50 / p99 ms | produce→visible per record p50 / p99 / max ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
	cpu := func(runs []LatencyRun, label func(LatencyRun) string) {
		w("\nCPU seconds spent during each run (relay, the producer, Kafka, MariaDB; the machine has %d per second):", cores)
		for _, r := range runs {
			w(" %s: relay %.1f, producer %.1f, Kafka %.1f, MariaDB %.1f;", label(r), r.CPU["relay"], r.CPU["producer"], r.CPU["kafka"], r.CPU["mysql"])
		}
		w("\n\n")
	}
	if m := lt.MaxLoad; m != nil {
		w("**The maximum load.** Each probe runs relay XA at 200 ms checkpoints for %.0f s of live load, the producer on the same machine. A probe is sustained when the producer made at least 95 %% of the rate asked and relay committed the last record within %s of the producer's last, so a relay a tenth short of the load fails it. The first probe is at half relay's rate on a backlog (%s orders/s, the throughput step, with no producer running); the next ones bisect. Highest sustained: **%s orders/s**; the target load is half of it.\n\n",
			m.ProbeSecs, sustainedDrain, kps(m.CatchUp), kps(m.Sustained))
		w(head)
		for i, r := range m.Probes {
			verdict := "not sustained"
			if r.sustained() {
				verdict = "sustained"
			}
			row(r, fmt.Sprintf("probe %d (%s)", i+1, verdict))
		}
		cpu(m.Probes, func(r LatencyRun) string { return "probe at " + kps(r.TargetRate) + "/s" })
	}
	w("**At the target load**, %.0f orders/s (%s). Phases from relay's debug log, one sample per checkpoint (millisecond timestamps): flush+prepare = last subtask `prepared` − cut (cut = `committed` − its `duration`), decide = `decided` − last `prepared`, commit = `committed` − `decided`, total = `duration`. Rows: `relay_upserted_rows_total` over committed checkpoints (one row per distinct key). Visibility: relay's `relay_visibility_latency_seconds` histogram (per checkpoint, oldest record polled → commit; interpolated inside its 5 ms·2^k buckets, p99's bucket in brackets) and, measured from outside, per record: the ledger's `committed_at` of the checkpoint covering the record − the record's Kafka producer timestamp.\n\n",
		lt.TargetRate, lt.RateSource)
	w(head)
	for _, r := range lt.Runs {
		iv := r.Interval
		if r.Rep > 0 {
			iv = fmt.Sprintf("%s (run %d)", iv, r.Rep)
		}
		row(r, iv)
	}
	cpu(lt.Runs, func(r LatencyRun) string { return r.Interval + " at " + kps(r.TargetRate) + "/s" })
	if t := lt.targetRuns(); len(t) > 0 {
		var rows, flush, total, mysql, relay, all []float64
		for _, r := range t {
			fp := r.LogPhases["flush+prepare"].P50
			rows, flush, total = append(rows, r.RowsPerCP), append(flush, fp), append(total, r.LogPhases["total"].P50)
			n := r.RowsPerCP * float64(r.Checkpoints)
			if n > 0 {
				mysql = append(mysql, r.CPU["mysql"]/n)
			}
			relay = append(relay, r.CPU["relay"]/r.DurationSecs)
			all = append(all, (r.CPU["relay"]+r.CPU["producer"]+r.CPU["kafka"]+r.CPU["mysql"])/r.DurationSecs)
		}
		fr := kit.Median(rows) / max(kit.Median(flush), 1e-9)
		w("**What bounds it** (200 ms runs at the target load, medians): a checkpoint writes %.0f rows (distinct keys), and its flush and prepare take %s ms, so the sink takes in %.0f k rows/s at the barrier; the whole checkpoint takes %s ms of the %s interval, and a record waits for the cut (up to an interval, longer while the previous checkpoint is in flight), then its own checkpoint. MariaDB spends %.1f µs of CPU per upserted row; relay uses %.2f cores, and the four processes together %.2f of the machine's %d.\n\n",
			kit.Median(rows), ms(kit.Median(flush)), fr/1e3, ms(kit.Median(total)), targetInterval, kit.Median(mysql)*1e6, kit.Median(relay), kit.Median(all), cores)
	}
	w("The same phases from relay's `relay_checkpoint_phase_duration_seconds` histogram (p50 / p99 ms, interpolated; flush and prepare are the slowest subtask's):\n\n")
	w("| run | flush | prepare | decide | commit | total |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range lt.Runs {
		h := r.HistPhases
		q := func(k string) string { return ms(h[k].P50) + " / " + ms(h[k].P99) }
		w("| %s at %s/s | %s | %s | %s | %s | %s |\n", r.Interval, kps(r.TargetRate), q("flush"), q("prepare"), q("decide"), q("commit"), q("total"))
	}
	if len(lt.Runs) > 0 {
		w("\nLoad: %s. relay: `%s … bin/relay run`.\n\n", lt.Load, lt.RelayEnv)
	}
}
