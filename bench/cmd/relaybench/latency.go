package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/harness"
)

// LatencyResult is checkpoint phase and visibility latency under steady load, per interval.
type LatencyResult struct {
	TargetRate float64      `json:"target_rate"` // orders/s asked of loadgen
	RateSource string       `json:"rate_source"`
	Runs       []LatencyRun `json:"runs"`
	Load       string       `json:"load"`      // the first run's load and relay environment, for the report
	RelayEnv   string       `json:"relay_env"` // (the others differ only in rate, interval and names)
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
	RecordsPerCP float64 `json:"records_per_checkpoint"` // median, from the ledger
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
	// "Half the measured maximum": relay's maximum with its shipped settings.
	shipped := xaRate(tp, "shipped")
	switch {
	case kit.EnvInt("BENCH_LAT_RATE", 0) > 0:
		r.TargetRate, r.RateSource = float64(kit.EnvInt("BENCH_LAT_RATE", 0)), "BENCH_LAT_RATE"
	case shipped > 0:
		r.TargetRate, r.RateSource = math.Round(shipped/2/1000)*1000, "half the median XA throughput measured above"
	default:
		r.TargetRate, r.RateSource = 50000, "default (no throughput result)"
	}
	base := kit.EnvDuration("BENCH_LAT_DURATION", 30*time.Second)
	type plan struct {
		interval time.Duration
		rate     float64
		dur      time.Duration
	}
	var plans []plan
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
		plans = append(plans, plan{d, r.TargetRate, dur})
	}
	if r.TargetRate >= 20000 && slices.ContainsFunc(plans, func(pl plan) bool { return pl.interval == targetInterval }) {
		// The shortest interval at half that load too: where per-checkpoint work stops being the limit.
		plans = append(plans, plan{targetInterval, math.Round(r.TargetRate/2/1000) * 1000, base})
	}
	for _, pl := range plans {
		// The run the target is about is the noisiest (checkpoints back to back on a saturated
		// machine): it is repeated and judged by the median of its repetitions.
		reps := 1
		if r.isTarget(pl.interval.String(), pl.rate) {
			reps = max(kit.EnvInt("BENCH_LAT_REPS", 3), 1)
		}
		for rep := 1; rep <= reps; rep++ {
			run, err := latencyRun(e, pl.rate, pl.interval, pl.dur)
			if err != nil {
				return r, fmt.Errorf("interval %s: %w", pl.interval, err)
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
	if _, err := e.PacedProduce(lg); err != nil {
		return run, fmt.Errorf("produce: %w", err)
	}
	run.AchievedRate = float64(run.Orders) / time.Since(start).Seconds()
	end, err := harness.EndOffsets(e.Brokers, topic)
	if err != nil {
		return run, err
	}
	if harness.Total(end) != run.Orders {
		return run, fmt.Errorf("topic holds %d records, want %d", harness.Total(end), run.Orders)
	}
	if _, err := harness.WaitCommitted(db, job, topic, false, end, 50*time.Millisecond, 2*time.Minute+2*interval, p.Alive); err != nil {
		return run, err
	}
	run.CPU = cpu.Stop()
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
	cps, err := harness.Checkpoints(ctx, db, job, topic)
	if err != nil {
		return run, err
	}
	times, err := e.RecordTimes(topic, end)
	if err != nil {
		return run, err
	}
	var recs []float64
	for _, c := range cps {
		recs = append(recs, float64(c.Records))
	}
	run.RecordsPerCP = kit.Median(recs)
	v := kit.VisibilityPerRecord(cps, times)
	run.ProduceToVisible = sampleQ(v)
	kit.Logf("interval %s: achieved %.0f/s, %d checkpoints, total p50/p99 %.0f/%.0f ms, visibility (hist) p50/p99 %.0f/%.0f ms, produce→visible p50/p99 %.0f/%.0f ms",
		interval, run.AchievedRate, run.Checkpoints, run.LogPhases["total"].P50*1e3, run.LogPhases["total"].P99*1e3,
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
