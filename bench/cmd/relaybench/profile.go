package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
)

// ProfileResult is where relay's CPU and allocations go in the end-to-end XA run.
type ProfileResult struct {
	Records int64  `json:"records"`
	Client  string `json:"client"` // librdkafka settings (see throughput): shipped by default
	// In-process harness (bench/cmd/relayprof) under runtime/pprof.
	PprofRate     float64 `json:"pprof_rate"`
	PprofCommand  string  `json:"pprof_command"`
	CPUTop        string  `json:"cpu_top"`         // go tool pprof -top (flat)
	CPUTopCum     string  `json:"cpu_top_cum"`     // go tool pprof -top -cum
	AllocSpaceTop string  `json:"alloc_space_top"` // -sample_index=alloc_space
	AllocObjTop   string  `json:"alloc_objects_top"`
	// The real binary under perf (every thread, librdkafka's C threads included).
	PerfCommand string `json:"perf_command,omitempty"`
	PerfDSO     string `json:"perf_dso,omitempty"`
	PerfTop     string `json:"perf_top,omitempty"`
	PerfThreads string `json:"perf_threads,omitempty"`
	PerfNote    string `json:"perf_note,omitempty"`
}

func runProfile(e *kit.Env, topic string, end map[int32]int64) (*ProfileResult, error) {
	if topic == "" {
		// Run alone: make the throughput topic.
		var err error
		topic, err = e.CreateTopic("bench_prof", 4)
		if err != nil {
			return nil, err
		}
		lg := harness.Loadgen{Topic: topic, Orders: kit.EnvInt("BENCH_ORDERS", defaultOrders), SKUs: kit.EnvInt("BENCH_SKUS", 1000),
			Windows: kit.EnvInt("BENCH_WINDOWS", 10), Seed: 1}
		if end, _, err = e.Produce(lg, "prof-loadgen.log"); err != nil {
			return nil, err
		}
	}
	r := &ProfileResult{Records: harness.Total(end), Client: kit.EnvString("BENCH_PROFILE_CLIENT", "shipped")}
	if _, ok := clientProps[r.Client]; !ok {
		return nil, fmt.Errorf("BENCH_PROFILE_CLIENT: unknown client setting %q", r.Client)
	}
	if err := pprofRun(e, r, topic); err != nil {
		return r, err
	}
	if err := perfRun(e, r, topic, end); err != nil {
		r.PerfNote = "perf not run: " + err.Error()
		kit.Logf("%s", r.PerfNote)
	}
	return r, nil
}

func pprofRun(e *kit.Env, r *ProfileResult, topic string) error {
	job, dsn, _, err := e.CreateJob()
	if err != nil {
		return err
	}
	defer e.DropNow(job)
	bin := filepath.Join(e.BinDir, "relayprof")
	cpu, allocs := filepath.Join(e.OutDir, "cpu.pprof"), filepath.Join(e.OutDir, "allocs.pprof")
	o := kit.RelayOpts{Job: job, Topic: topic, DSN: dsn, Mode: "xa", Subtasks: kit.EnvInt("BENCH_SUBTASKS", 2),
		Interval: kit.EnvDuration("BENCH_TP_INTERVAL", time.Second), LogLevel: "info"}
	if p := clientProps[r.Client]; p != "" {
		o.Extra = append(o.Extra, "RELAY_KAFKA_PROPERTIES="+p)
	}
	cmd := exec.Command(bin, "--cpu", cpu, "--allocs", allocs)
	cmd.Env = append(os.Environ(), "RELAY_KAFKA_BROKERS="+e.Brokers, "RELAY_MYSQL_DSN="+dsn)
	cmd.Env = append(cmd.Env, o.Vars()...)
	cmd.Stderr = os.Stderr
	r.PprofCommand = strings.Join(o.Vars(), " ") + " bin/relayprof --cpu cpu.pprof --allocs allocs.pprof"
	kit.Logf("relayprof: XA run of %s under pprof", topic)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("relayprof: %w", err)
	}
	var res struct{ Rate float64 }
	_ = json.Unmarshal(out, &res)
	r.PprofRate = res.Rate
	top := func(args ...string) string {
		a := append([]string{"tool", "pprof", "-top", "-nodecount=25"}, args...)
		b, err := exec.Command("go", a...).Output()
		if err != nil {
			return "pprof failed: " + err.Error()
		}
		return trimPprof(string(b))
	}
	r.CPUTop = top(bin, cpu)
	r.CPUTopCum = top("-cum", bin, cpu)
	r.AllocSpaceTop = top("-sample_index=alloc_space", bin, allocs)
	r.AllocObjTop = top("-sample_index=alloc_objects", bin, allocs)
	kit.Logf("relayprof: %.0f records/s under the profiler", r.PprofRate)
	return nil
}

// trimPprof drops pprof's file/build header lines.
func trimPprof(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") ||
			strings.HasPrefix(l, "Time:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

func perfRun(e *kit.Env, r *ProfileResult, topic string, end map[int32]int64) error {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return err
	}
	job, dsn, db, err := e.CreateJob()
	if err != nil {
		return err
	}
	defer e.DropNow(job)
	o := kit.RelayOpts{Job: job, Topic: topic, DSN: dsn, Mode: "xa", Subtasks: kit.EnvInt("BENCH_SUBTASKS", 2),
		Interval: kit.EnvDuration("BENCH_TP_INTERVAL", time.Second), LogLevel: "info"}
	if p := clientProps[r.Client]; p != "" {
		o.Extra = append(o.Extra, "RELAY_KAFKA_PROPERTIES="+p)
	}
	data := filepath.Join(e.OutDir, "perf.data")
	// relay runs under perf so that every thread it creates (librdkafka's too) is sampled.
	o.Wrapper = []string{perf, "record", "-F", "499", "-g", "-o", data, "--"}
	p, err := e.StartRelay(o, "perf-relay.log")
	if err != nil {
		return err
	}
	defer p.Kill()
	r.PerfCommand = fmt.Sprintf("perf record -F 499 -g -- bin/relay run  (relay: %s)", strings.Join(o.Vars(), " "))
	_, werr := committed.Wait(db, job, topic, false, end, 25*time.Millisecond, 10*time.Minute, p.Alive)
	child, err := p.Child(time.Second)
	if err != nil {
		return err
	}
	// SIGTERM to relay itself: it drains and exits, and perf then writes its data and exits.
	_ = syscall.Kill(child, syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		return fmt.Errorf("perf/relay did not exit")
	}
	if werr != nil {
		return werr
	}
	report := func(args ...string) string {
		a := append([]string{"report", "-i", data, "--stdio", "--no-children", "--percent-limit", "0.7"}, args...)
		b, err := exec.Command(perf, a...).Output()
		if err != nil {
			return "perf report failed: " + err.Error()
		}
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			keep = append(keep, l)
		}
		return strings.Join(keep, "\n")
	}
	r.PerfDSO = report("--sort", "dso", "-g", "none")
	r.PerfThreads = report("--sort", "comm", "-g", "none")
	r.PerfTop = report("--sort", "dso,sym", "-g", "none")
	return nil
}
