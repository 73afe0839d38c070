// Package kit is what relay's end-to-end benchmarks need beyond the shared harness
// (internal/harness, which starts relay, reads its log and ledger, and makes topics and databases):
// the run's settings and cleanup, CPU and memory accounting, /metrics histograms, a paced producer
// and statistics. It talks only to the local Kafka and MySQL/MariaDB named by the environment
// (RELAY_TEST_KAFKA, RELAY_TEST_MYSQL_DSN).
//
// Invariant: every topic, database and job a benchmark creates carries a random suffix, so runs never
// see each other's data, and Cleanup removes them when the run ends.
package kit

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relay-sh/relay/internal/harness"
)

// Env is where a benchmark runs.
type Env struct {
	Brokers  string // Kafka bootstrap servers
	AdminDSN string // MySQL user allowed to create databases
	BinDir   string // where scripts/bench.sh built relay, rawconsume and relayprof
	RelayBin string // BinDir/relay
	OutDir   string // logs and raw results
	Root     string // repository root (for .cache/services pid files)

	mu       sync.Mutex
	cleanups []func()
	drops    map[string]func()
}

// OnCleanup registers fn to run (last registered first) at Cleanup.
func (e *Env) OnCleanup(fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, fn)
}

// Cleanup removes what the run created.
func (e *Env) Cleanup() {
	e.mu.Lock()
	fns := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// Logf prints a progress line to stderr.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// EnvInt reads an integer environment variable.
func EnvInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			panic(fmt.Sprintf("%s=%q is not an integer", name, v))
		}
		return n
	}
	return def
}

// EnvDuration reads a Go duration environment variable.
func EnvDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			panic(fmt.Sprintf("%s=%q is not a duration", name, v))
		}
		return d
	}
	return def
}

// EnvString reads a string environment variable.
func EnvString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Median of xs (0 when empty).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Percentile of xs by the nearest-rank method (q in 0..1).
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ProcCPU is the user+system CPU time of a live process, from /proc (10 ms resolution).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// The command name may contain spaces: fields start after the last ')'.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// ProcStatusKB reads a "kB" field (VmHWM, VmRSS) of /proc/PID/status.
func ProcStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", field, pid)
}

// ServicePIDs are the Kafka and MariaDB processes scripts/services.sh started (0 when unknown, e.g.
// servers named by RELAY_TEST_*).
func (e *Env) ServicePIDs() (kafka, mysql int) {
	read := func(name string) int {
		n, err := harness.ServicePID(e.Root, name)
		if err != nil {
			return 0
		}
		if _, err := ProcCPU(n); err != nil {
			return 0
		}
		return n
	}
	return read("kafka"), read("mariadb")
}

// CPUMeter measures the CPU time the local servers spend during an interval.
type CPUMeter struct {
	pids  map[string]int
	start map[string]time.Duration
}

// StartCPU begins measuring the Kafka and MariaDB servers (when known) and any extra pids.
func (e *Env) StartCPU(extra map[string]int) *CPUMeter {
	k, m := e.ServicePIDs()
	pids := map[string]int{}
	if k > 0 {
		pids["kafka"] = k
	}
	if m > 0 {
		pids["mysql"] = m
	}
	for n, p := range extra {
		pids[n] = p
	}
	c := &CPUMeter{pids: pids, start: map[string]time.Duration{}}
	for n, p := range pids {
		c.start[n], _ = ProcCPU(p)
	}
	return c
}

// Stop returns the CPU seconds each process spent since StartCPU.
func (c *CPUMeter) Stop() map[string]float64 {
	out := map[string]float64{}
	for n, p := range c.pids {
		if t, err := ProcCPU(p); err == nil {
			out[n] = (t - c.start[n]).Seconds()
		}
	}
	return out
}

// MachineBusy is the CPU time every core of the machine spent not idle since boot (/proc/stat:
// all but idle and iowait), whoever ran: the difference over an interval, divided by its length,
// is how many cores were busy.
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		// user nice system idle iowait irq softirq steal (guest time is inside user already)
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond, nil
}

// Threads sums /proc/PID/task/TID/schedstat over the threads of process pid now alive (one that
// exits between the listing and its read is skipped).
type Threads struct {
	// Wait is how long they waited on a run queue, runnable but not running (schedstat's second
	// field): CPU time the process wanted and the machine did not have.
	Wait time.Duration
	// Rdk is how long librdkafka's threads (named rdk:…) ran (the first field): the rest of the
	// process's CPU is Go's runtime and relay's goroutines. Where its CPU goes, without a profiler.
	Rdk time.Duration
}

// ReadThreads reads Threads of process pid.
func ReadThreads(pid int) (Threads, error) {
	var out Threads
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return out, err
	}
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
		b, err := os.ReadFile(dir + "schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		ran, _ := strconv.ParseInt(f[0], 10, 64)
		waited, _ := strconv.ParseInt(f[1], 10, 64)
		out.Wait += time.Duration(waited)
		if comm, _ := os.ReadFile(dir + "comm"); strings.HasPrefix(string(comm), "rdk:") {
			out.Rdk += time.Duration(ran)
		}
	}
	return out, nil
}
