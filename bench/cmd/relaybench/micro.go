package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/relay-sh/relay/bench/internal/kit"
)

// MicroResult is the Go micro-benchmarks, one core (-cpu 1), medians over Count runs.
type MicroResult struct {
	Command string       `json:"command"`
	Count   int          `json:"count"`
	Rows    []MicroBench `json:"rows"`
}

// MicroBench is one benchmark's medians.
type MicroBench struct {
	Package     string  `json:"package"`
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	// Custom metrics the benchmark reports (keys, heapB/key, MB/s ...), medians.
	Extra map[string]float64 `json:"extra,omitempty"`
}

var microPkgs = []struct{ pkg, pattern string }{
	{"./internal/order/", "^BenchmarkDecode$"},
	{"./internal/spec/", "^BenchmarkDecodeFold$"},
	{"./internal/pipeline/", "^Benchmark(DecodeRouteAggregate|SessionFold|Positions)$"},
}

func runMicro(e *kit.Env) (*MicroResult, error) {
	count := kit.EnvInt("BENCH_MICRO_COUNT", 3)
	benchtime := kit.EnvString("BENCH_MICRO_TIME", "1s")
	r := &MicroResult{Count: count}
	var cmds []string
	for _, p := range microPkgs {
		args := []string{"test", "-run", "^$", "-bench", p.pattern, "-benchmem", "-cpu", "1",
			"-count", strconv.Itoa(count), "-benchtime", benchtime, p.pkg}
		cmds = append(cmds, "go "+strings.Join(quoteArgs(args), " "))
		kit.Logf("go %s", strings.Join(args, " "))
		out, err := exec.Command("go", args...).CombinedOutput()
		_ = os.WriteFile(filepath.Join(e.OutDir, "micro-"+filepath.Base(p.pkg)+".txt"), out, 0o644)
		if err != nil {
			return nil, fmt.Errorf("go test %s: %w\n%s", p.pkg, err, out)
		}
		r.Rows = append(r.Rows, parseBench(strings.TrimSuffix(strings.TrimPrefix(p.pkg, "./"), "/"), string(out))...)
	}
	r.Command = strings.Join(cmds, "\n")
	return r, nil
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$|()") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

// parseBench reads `go test -bench` output and returns the median of each benchmark.
func parseBench(pkg, out string) []MicroBench {
	type acc struct {
		ns, b, a []float64
		extra    map[string][]float64
	}
	byName := map[string]*acc{}
	var order []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		a := byName[name]
		if a == nil {
			a = &acc{extra: map[string][]float64{}}
			byName[name] = a
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				a.ns = append(a.ns, v)
			case "B/op":
				a.b = append(a.b, v)
			case "allocs/op":
				a.a = append(a.a, v)
			default:
				a.extra[f[i+1]] = append(a.extra[f[i+1]], v)
			}
		}
	}
	var rows []MicroBench
	for _, n := range order {
		a := byName[n]
		ns := kit.Median(a.ns)
		mb := MicroBench{Package: pkg, Name: n, NsPerOp: ns, BytesPerOp: kit.Median(a.b),
			AllocsPerOp: kit.Median(a.a), OpsPerSec: 1e9 / ns}
		for k, v := range a.extra {
			if mb.Extra == nil {
				mb.Extra = map[string]float64{}
			}
			mb.Extra[k] = kit.Median(v)
		}
		rows = append(rows, mb)
	}
	return rows
}
