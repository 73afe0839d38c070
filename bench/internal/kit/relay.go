// relay processes of the benchmarks and the histograms of their /metrics.
//
// Invariant: a relay started here listens for /metrics on a port of its own and is killed at
// Cleanup (before its database is dropped) if the step did not stop it.

package kit

import (
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/harness"
)

// Relay is one running `relay run` and the address of its /metrics.
type Relay struct {
	*harness.Relay
	HTTP string // host:port
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

// StartRelay starts relay with its log in OutDir/logName.
func (e *Env) StartRelay(o RelayOpts, logName string) (*Relay, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	env := append(os.Environ(), "RELAY_KAFKA_BROKERS="+e.Brokers, "RELAY_MYSQL_DSN="+o.DSN, "RELAY_HTTP_ADDR="+addr)
	r, err := harness.Start(harness.Options{Bin: e.RelayBin, Args: []string{"run"}, Env: append(env, o.Vars()...),
		Log: filepath.Join(e.OutDir, logName), Wrapper: o.Wrapper})
	if err != nil {
		return nil, err
	}
	e.OnCleanup(r.Kill) // an interrupted run kills relay before it drops its database
	return &Relay{Relay: r, HTTP: addr}, nil
}

// IsRunning matches the "state ... to running" line.
func IsRunning(l harness.LogLine) bool { return l.Msg == "state" && l.Fields["to"] == "running" }

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
	text, err := r.scrape()
	return ParseHistograms(text, name, label), err
}

// ScrapeCounter reads /metrics and returns counter name's value by the value of label (or "").
func (r *Relay) ScrapeCounter(name, label string) (map[string]float64, error) {
	text, err := r.scrape()
	out := map[string]float64{}
	samples(text, name, func(series, labels string, val float64) {
		if series == name {
			out[labelValue(labels, label)] += val
		}
	})
	return out, err
}

func (r *Relay) scrape() (string, error) {
	resp, err := http.Get("http://" + r.HTTP + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// samples calls fn with each sample of Prometheus text format whose series starts with prefix.
func samples(text, prefix string, fn func(series, labels string, val float64)) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, prefix) {
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
		fn(series, labels, val)
	}
}

// ParseHistograms parses Prometheus text format for one histogram family.
func ParseHistograms(text, name, label string) map[string]Histogram {
	type bucket struct{ le, c float64 }
	buckets := map[string][]bucket{}
	out := map[string]Histogram{}
	samples(text, name+"_", func(series, labels string, val float64) {
		lv := labelValue(labels, label)
		h := out[lv]
		switch series {
		case name + "_bucket":
			le, err := strconv.ParseFloat(labelValue(labels, "le"), 64)
			if err != nil {
				return
			}
			buckets[lv] = append(buckets[lv], bucket{le, val})
		case name + "_sum":
			h.Sum = val
		case name + "_count":
			h.Count = val
		}
		out[lv] = h
	})
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
