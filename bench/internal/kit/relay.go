package kit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Relay is one running `relay run`.
type Relay struct {
	Cmd     *exec.Cmd
	LogPath string
	Start   time.Time // just before exec
	HTTP    string    // host:port of /metrics
	done    chan struct{}
	err     error
}

// RelayOpts configure one relay process.
type RelayOpts struct {
	Job, Topic, DSN string
	Mode            string // xa | held
	Detail          bool   // append sink on (table order_details)
	Subtasks        int
	Interval        time.Duration
	LogLevel        string
	Extra           []string // more RELAY_* variables
	Wrapper         []string // run relay under this command (e.g. perf record … --)
}

// Vars renders the environment of relay (for the report too, without the DSN's password).
func (o RelayOpts) Vars() []string {
	v := []string{
		"RELAY_JOB_NAME=" + o.Job,
		"RELAY_KAFKA_TOPICS=" + o.Topic,
		"RELAY_MODE=" + o.Mode,
		"RELAY_SUBTASKS=" + strconv.Itoa(o.Subtasks),
		"RELAY_CHECKPOINT_INTERVAL=" + o.Interval.String(),
		"RELAY_LOG_LEVEL=" + o.LogLevel,
	}
	if o.Detail {
		v = append(v, "RELAY_MYSQL_DETAIL_TABLE=order_details")
	}
	// BENCH_RELAY_ENV: more variables for relay processes only (e.g. GOGC=400), for A/B runs.
	v = append(v, strings.Fields(os.Getenv("BENCH_RELAY_ENV"))...)
	return append(v, o.Extra...)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartRelay starts relay with its log in OutDir/logName.
func (e *Env) StartRelay(o RelayOpts, logName string) (*Relay, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	path := filepath.Join(e.OutDir, logName)
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	argv := append(append([]string{}, o.Wrapper...), e.RelayBin, "run")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "RELAY_KAFKA_BROKERS="+e.Brokers, "RELAY_MYSQL_DSN="+o.DSN, "RELAY_HTTP_ADDR="+addr)
	cmd.Env = append(cmd.Env, o.Vars()...)
	cmd.Stdout, cmd.Stderr = f, f
	r := &Relay{Cmd: cmd, LogPath: path, HTTP: addr, done: make(chan struct{})}
	r.Start = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		r.err = cmd.Wait()
		f.Close()
		close(r.done)
	}()
	e.OnCleanup(r.Kill) // an interrupted run kills relay before it drops its database
	return r, nil
}

// Alive reports whether the process still runs.
func (r *Relay) Alive() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// PID of the process (of the wrapper, when there is one).
func (r *Relay) PID() int { return r.Cmd.Process.Pid }

// Child returns the first child of the process (relay under a wrapper), waiting up to limit.
func (r *Relay) Child(limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", r.PID(), r.PID()))
		if err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no child of %d", r.PID())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop sends SIGTERM (relay drains: one last checkpoint) and waits; SIGKILL after limit.
func (r *Relay) Stop(limit time.Duration) error {
	_ = r.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		return r.err
	case <-time.After(limit):
		_ = r.Cmd.Process.Kill()
		<-r.done
		return fmt.Errorf("relay did not stop within %s; killed", limit)
	}
}

// Kill ends the process at once (cleanup).
func (r *Relay) Kill() {
	if r.Alive() {
		_ = r.Cmd.Process.Kill()
		<-r.done
	}
}

// CPU is the process's user+system time after it exited.
func (r *Relay) CPU() time.Duration {
	if r.Cmd.ProcessState == nil {
		return 0
	}
	return r.Cmd.ProcessState.UserTime() + r.Cmd.ProcessState.SystemTime()
}

// MaxRSSKB is the peak resident set of the exited process (getrusage ru_maxrss, in KiB).
func (r *Relay) MaxRSSKB() int64 {
	if r.Cmd.ProcessState == nil {
		return 0
	}
	if ru, ok := r.Cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}

// LogLine is one JSON log entry of relay.
type LogLine struct {
	TS     time.Time
	Logger string
	Msg    string
	Fields map[string]any
}

// zap's ISO8601TimeEncoder layout.
const zapTime = "2006-01-02T15:04:05.000Z0700"

// ReadLog parses the JSON lines of a relay log.
func ReadLog(path string) ([]LogLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []LogLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		l := LogLine{Fields: m}
		l.Msg, _ = m["msg"].(string)
		l.Logger, _ = m["logger"].(string)
		if ts, ok := m["ts"].(string); ok {
			l.TS, _ = time.Parse(zapTime, ts)
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// Find returns the first line for which match is true.
func Find(lines []LogLine, match func(LogLine) bool) (LogLine, bool) {
	for _, l := range lines {
		if match(l) {
			return l, true
		}
	}
	return LogLine{}, false
}

// IsRunning matches the "state ... to running" line.
func IsRunning(l LogLine) bool { return l.Msg == "state" && l.Fields["to"] == "running" }

// WaitLog polls the log until a line matches (or the process dies, or limit passes).
func (r *Relay) WaitLog(match func(LogLine) bool, limit time.Duration) (LogLine, error) {
	deadline := time.Now().Add(limit)
	for {
		lines, _ := ReadLog(r.LogPath)
		if l, ok := Find(lines, match); ok {
			return l, nil
		}
		if !r.Alive() {
			return LogLine{}, fmt.Errorf("relay exited (%v); log %s", r.err, r.LogPath)
		}
		if time.Now().After(deadline) {
			return LogLine{}, fmt.Errorf("log line not seen within %s; log %s", limit, r.LogPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Num reads a numeric log field.
func (l LogLine) Num(k string) float64 {
	f, _ := l.Fields[k].(float64)
	return f
}

// Histogram is one Prometheus histogram (cumulative buckets).
type Histogram struct {
	Bounds []float64 // upper bounds, ascending, +Inf last
	Counts []float64 // cumulative
	Sum    float64
	Count  float64
}

// Quantile interpolates linearly inside the bucket holding q (as Prometheus' histogram_quantile),
// and returns that bucket's bounds too.
func (h Histogram) Quantile(q float64) (v, lo, hi float64) {
	if h.Count == 0 {
		return math.NaN(), 0, 0
	}
	rank := q * h.Count
	prevB, prevC := 0.0, 0.0
	for i, b := range h.Bounds {
		c := h.Counts[i]
		if c >= rank {
			if math.IsInf(b, 1) {
				return prevB, prevB, b
			}
			if c == prevC {
				return b, prevB, b
			}
			return prevB + (b-prevB)*(rank-prevC)/(c-prevC), prevB, b
		}
		prevB, prevC = b, c
	}
	return prevB, prevB, math.Inf(1)
}

// ScrapeHistograms reads /metrics and returns the histograms of family name by the value of label
// (or "" when unlabelled).
func (r *Relay) ScrapeHistograms(name, label string) (map[string]Histogram, error) {
	resp, err := http.Get("http://" + r.HTTP + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return ParseHistograms(string(body), name, label), nil
}

// ParseHistograms parses Prometheus text format for one histogram family.
func ParseHistograms(text, name, label string) map[string]Histogram {
	type bucket struct{ le, c float64 }
	buckets := map[string][]bucket{}
	out := map[string]Histogram{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"_") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		val, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		series, labels, _ := strings.Cut(line[:sp], "{")
		lv := labelValue(labels, label)
		h := out[lv]
		switch series {
		case name + "_bucket":
			le, err := strconv.ParseFloat(labelValue(labels, "le"), 64)
			if err != nil {
				continue
			}
			buckets[lv] = append(buckets[lv], bucket{le, val})
		case name + "_sum":
			h.Sum = val
		case name + "_count":
			h.Count = val
		}
		out[lv] = h
	}
	for lv, bs := range buckets {
		sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
		h := out[lv]
		for _, b := range bs {
			h.Bounds = append(h.Bounds, b.le)
			h.Counts = append(h.Counts, b.c)
		}
		out[lv] = h
	}
	return out
}

func labelValue(labels, name string) string {
	if name == "" {
		return ""
	}
	i := strings.Index(labels, name+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(name)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}
