package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
)

// RSSResult is relay's memory with about a million distinct (window, sku) keys in one epoch.
type RSSResult struct {
	Orders   int64    `json:"orders"`
	SKUs     int      `json:"skus"`
	Windows  int      `json:"windows"`
	RelayEnv string   `json:"relay_env"`
	Loadgen  string   `json:"loadgen_command"`
	Runs     []RSSRun `json:"runs"`
	RSSRun            // the median run by peak RSS
}

// RSSRun is one relay run over the topic.
type RSSRun struct {
	Keys          int64 `json:"keys"`            // distinct keys written (rows of order_stats_minute)
	Checkpoints   int   `json:"checkpoints"`     // must be 1: every key in one epoch
	IdleRSSKB     int64 `json:"idle_rss_kb"`     // VmRSS once running, before the load
	ConsumedHWMKB int64 `json:"consumed_hwm_kb"` // VmHWM when every record was folded (before the flush)
	PeakHWMKB     int64 `json:"peak_hwm_kb"`     // last VmHWM read before exit (every 20 ms): the peak
	// getrusage ru_maxrss after exit. Not the peak: Linux carries the spawning process's high-water
	// mark across exec into it, so it reads at least the driver's own RSS (930 MiB after the
	// latency steps, where relay itself peaked at ~340).
	MaxRSSKB       int64   `json:"maxrss_kb"`
	ConsumeSecs    float64 `json:"consume_secs"`       // running → idle
	FlushSecs      float64 `json:"flush_secs"`         // SIGTERM → exit: the one checkpoint of ~1M rows
	BytesPerKey    float64 `json:"bytes_per_key"`      // (peak − idle) / keys
	HeldBytesPerKy float64 `json:"held_bytes_per_key"` // (consumed HWM − idle) / keys: the in-epoch tables
}

func runRSS(e *kit.Env) (*RSSResult, error) {
	r := &RSSResult{Orders: int64(kit.EnvInt("BENCH_RSS_ORDERS", 1500000)), SKUs: kit.EnvInt("BENCH_RSS_SKUS", 200000), Windows: 10}
	topic, err := e.CreateTopic("bench_rss", 4)
	if err != nil {
		return nil, err
	}
	defer e.DeleteTopic(topic)
	lg := harness.Loadgen{Topic: topic, Orders: int(r.Orders), SKUs: r.SKUs, Windows: r.Windows, Seed: 4}
	r.Loadgen = "bin/relay " + strings.Join(quoteEmpty(lg.Args("…")), " ")
	kit.Logf("producing %d orders over %d×%d keys", r.Orders, r.SKUs, r.Windows)
	end, _, err := e.Produce(lg, "rss-loadgen.log")
	if err != nil {
		return nil, err
	}
	reps := kit.EnvInt("BENCH_RSS_REPS", 3)
	for rep := 1; rep <= reps; rep++ {
		run, err := rssRun(e, r, topic, end, rep)
		if err != nil {
			return nil, fmt.Errorf("rep %d: %w", rep, err)
		}
		r.Runs = append(r.Runs, run)
	}
	// Report the median run by peak RSS (the spread is in Runs).
	sorted := append([]RSSRun(nil), r.Runs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].PeakHWMKB < sorted[j].PeakHWMKB })
	r.RSSRun = sorted[len(sorted)/2]
	return r, nil
}

func rssRun(e *kit.Env, res *RSSResult, topic string, end map[int32]int64, rep int) (RSSRun, error) {
	var r RSSRun
	job, dsn, db, err := e.CreateJob()
	if err != nil {
		return r, err
	}
	defer e.DropNow(job)
	// One epoch for everything: no checkpoint before SIGTERM, no early flush, no idle cut.
	o := kit.RelayOpts{Job: job, Topic: topic, DSN: dsn, Mode: "xa", Subtasks: kit.EnvInt("BENCH_SUBTASKS", 2),
		Interval: time.Hour, LogLevel: "info", Extra: []string{
			"RELAY_CHECKPOINT_BUFFER_KEYS=100000000", "RELAY_CHECKPOINT_TIMEOUT=30m", "RELAY_CHECKPOINT_IDLE_AFTER=0",
			"RELAY_MYSQL_SESSION_TIMEOUT=3h", "RELAY_CHECKPOINT_READY_MAX_AGE=2h"}}
	res.RelayEnv = strings.Join(o.Vars(), " ")
	p, err := e.StartRelay(o, fmt.Sprintf("rss-%d.log", rep))
	if err != nil {
		return r, err
	}
	defer p.Kill()
	running, err := p.WaitLog(kit.IsRunning, time.Minute)
	if err != nil {
		return r, err
	}
	pid := p.PID()
	r.IdleRSSKB, _ = kit.ProcStatusKB(pid, "VmRSS")
	// Folding is done when relay, having worked, stays under 5% of a core for two consecutive seconds.
	prev, _ := kit.ProcCPU(pid)
	base := prev
	idle := 0
	for deadline := time.Now().Add(10 * time.Minute); idle < 2; {
		time.Sleep(time.Second)
		cur, err := kit.ProcCPU(pid)
		if err != nil {
			return r, err
		}
		if cur-prev < 50*time.Millisecond && cur-base > 300*time.Millisecond {
			idle++
		} else {
			idle = 0
		}
		prev = cur
		if time.Now().After(deadline) {
			return r, fmt.Errorf("relay did not go idle")
		}
	}
	r.ConsumeSecs = time.Since(running.TS).Seconds() - 2
	r.ConsumedHWMKB, _ = kit.ProcStatusKB(pid, "VmHWM")
	kit.Logf("folded in ~%.1fs; VmHWM %d MiB; stopping (one checkpoint of every key)", r.ConsumeSecs, r.ConsumedHWMKB>>10)
	stopAt := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(30 * time.Minute) }()
	for waiting := true; waiting; {
		select {
		case err := <-stopped:
			if err != nil {
				return r, err
			}
			waiting = false
		case <-time.After(20 * time.Millisecond):
			if v, err := kit.ProcStatusKB(pid, "VmHWM"); err == nil {
				r.PeakHWMKB = v
			}
		}
	}
	r.FlushSecs = time.Since(stopAt).Seconds()
	r.MaxRSSKB = p.MaxRSSKB()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_stats_minute`).Scan(&r.Keys); err != nil {
		return r, err
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM relay_checkpoints WHERE job = ?`, job).Scan(&r.Checkpoints); err != nil {
		return r, err
	}
	got, err := committed.Offsets(ctx, db, job, topic, false)
	if err != nil {
		return r, err
	}
	if !committed.Reached(got, end) {
		return r, fmt.Errorf("the final checkpoint did not cover the topic: %v, end %v", got, end)
	}
	peak := r.PeakHWMKB
	r.BytesPerKey = float64(peak-r.IdleRSSKB) * 1024 / float64(r.Keys)
	r.HeldBytesPerKy = float64(r.ConsumedHWMKB-r.IdleRSSKB) * 1024 / float64(r.Keys)
	kit.Logf("rss: %d keys in %d checkpoint(s): peak %d MiB (VmHWM; ru_maxrss %d MiB), %d MiB while folding, idle %d MiB; flush %.1fs",
		r.Keys, r.Checkpoints, r.PeakHWMKB>>10, r.MaxRSSKB>>10, r.ConsumedHWMKB>>10, r.IdleRSSKB>>10, r.FlushSecs)
	return r, nil
}
