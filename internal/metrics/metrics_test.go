// Tests of the exported series themselves: names, types, labels and the bounded label values.
//
// Invariant checked here: every family passes promlint; relay's families carry the relay_ prefix
// and the relay_job label, counters end in _total, labels come from a small known set, and the
// label values the code passes for result, phase, action and origin (labelsource_test.go reads them
// from the source) are the ones New registers, so a typo cannot start a series no dashboard or
// alert looks at. docs/METRICS.md lists every family, and relay_restarts_total's causes as fault.Causes does.

package metrics

import (
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // for sql.Open; WatchPool never connects
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/relay-sh/relay/internal/fault"
)

// gatherAll registers everything a running relay registers and gives every vector one child, so the
// gathered families are all the families relay can export.
func gatherAll(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	m := New("x")
	db, err := sql.Open("mysql", "u:p@tcp(127.0.0.1:1)/x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m.WatchPool("x", "sink", db)
	m.WatchPool("x", "ledger", db)
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		get := v.Field(i).MethodByName("GetMetricWithLabelValues")
		if !get.IsValid() {
			continue
		}
		made := false
		for n := 0; n <= 8 && !made; n++ {
			args := make([]reflect.Value, n)
			for j := range args {
				args[j] = reflect.ValueOf("x")
			}
			made = get.Call(args)[1].IsNil()
		}
		if !made {
			t.Fatalf("could not create a child of %s", v.Type().Field(i).Name)
		}
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func isRuntimeFamily(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

func TestMetricsLint(t *testing.T) {
	mfs := gatherAll(t)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	relay := 0
	for _, mf := range mfs {
		if !isRuntimeFamily(mf.GetName()) {
			relay++
		}
	}
	// Sixteen collectors in Metrics, plus build info and the pool gauges.
	if relay < 18 {
		t.Fatalf("only %d relay families gathered: vectors were not instantiated", relay)
	}
}

// Labels relay may use. A new label is a new cardinality risk: add it here only when its values are
// bounded (never tags, offsets, order ids or payloads).
var allowedLabels = map[string]bool{
	"relay_job": true, "result": true, "phase": true, "action": true, "origin": true, "reason": true,
	"topic": true, "partition": true, "pool": true, "state": true, "version": true, "goversion": true,
	"cause": true, "from": true,
	"kind":       true, // rebalance kinds: assigned, revoked, lost
	"table":      true, // the spec's aggregate tables, fixed at start
	"dependency": true, // start-up's dependencies: mysql, galera, kafka
}

func TestMetricsNamesAndLabels(t *testing.T) {
	for _, mf := range gatherAll(t) {
		name := mf.GetName()
		if isRuntimeFamily(name) {
			continue
		}
		if !strings.HasPrefix(name, "relay_") {
			t.Errorf("%s: relay's families must start with relay_", name)
		}
		isCounter := mf.GetType() == dto.MetricType_COUNTER
		if isCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s (%s): counters, and only counters, end in _total", name, mf.GetType())
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s: no help text", name)
		}
		for _, m := range mf.GetMetric() {
			job := ""
			for _, lp := range m.GetLabel() {
				if !allowedLabels[lp.GetName()] {
					t.Errorf("%s: label %q is not in the allowed (bounded) set", name, lp.GetName())
				}
				if lp.GetName() == "relay_job" {
					job = lp.GetValue()
				}
			}
			if job != "x" {
				t.Errorf("%s: series without the relay_job constant label: %v", name, m.GetLabel())
			}
		}
	}
}

// registered returns, per family, the label value tuples New pre-registered (rendered "a,b").
func registered(t *testing.T) map[string]map[string]bool {
	t.Helper()
	m := New("x")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, mf := range mfs {
		set := map[string]bool{}
		for _, mm := range mf.GetMetric() {
			var vals []string
			for _, lp := range mm.GetLabel() {
				if lp.GetName() != "relay_job" {
					vals = append(vals, lp.GetName()+"="+lp.GetValue())
				}
			}
			sort.Strings(vals)
			set[strings.Join(vals, ",")] = true
		}
		out[mf.GetName()] = set
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// boundedLabels maps each vector field of Metrics to its family and its bounded label names, in
// WithLabelValues order.
var boundedLabels = map[string]struct {
	family string
	labels []string
}{
	"Checkpoints":   {"relay_checkpoints_total", []string{"result"}},
	"Records":       {"relay_records_total", []string{"result"}},
	"PhaseDuration": {"relay_checkpoint_phase_duration_seconds", []string{"phase"}},
	"Transactions":  {"relay_transactions_total", []string{"action", "origin"}},
}

// allowedValues is, per family and label, the set of values New pre-registers.
func allowedValues(t *testing.T) map[string]map[string]map[string]bool {
	t.Helper()
	reg := registered(t)
	out := map[string]map[string]map[string]bool{}
	for _, b := range boundedLabels {
		out[b.family] = map[string]map[string]bool{}
		for tuple := range reg[b.family] {
			for _, kv := range strings.Split(tuple, ",") {
				k, v, _ := strings.Cut(kv, "=")
				if out[b.family][k] == nil {
					out[b.family][k] = map[string]bool{}
				}
				out[b.family][k][v] = true
			}
		}
	}
	return out
}

// The pre-registered sets are the contract dashboards and alerts are written against.
func TestMetricsRegisteredLabelValues(t *testing.T) {
	vals := allowedValues(t)
	want := map[string]map[string][]string{
		"relay_checkpoints_total":                 {"result": {"committed", "empty", "failed"}},
		"relay_records_total":                     {"result": {"dlq", "ok", "skipped"}},
		"relay_checkpoint_phase_duration_seconds": {"phase": {"commit", "decide", "flush", "prepare", "total"}},
		"relay_transactions_total": {"action": {"commit", "prepare", "rollback"},
			"origin": {OriginManual, OriginNormal, OriginRecovery, OriginResolver}},
	}
	for fam, labels := range want {
		for l, w := range labels {
			sort.Strings(w)
			if got := sortedKeys(vals[fam][l]); strings.Join(got, ",") != strings.Join(w, ",") {
				t.Errorf("%s{%s}: registered %v, want %v", fam, l, got, w)
			}
		}
	}
	// Every action × origin pair exists from the start, so rate() and increase() never see a gap.
	if n := len(registered(t)["relay_transactions_total"]); n != 3*4 {
		t.Errorf("relay_transactions_total has %d pre-registered series, want 12", n)
	}
	consts := packageStringConsts(t, ".")
	origins := 0
	for name, v := range consts {
		if strings.HasPrefix(name, "Origin") {
			origins++
			if !vals["relay_transactions_total"]["origin"][v] {
				t.Errorf("constant %s = %q is not a registered origin", name, v)
			}
		}
	}
	if origins != 4 {
		t.Errorf("found %d Origin constants in package metrics, want 4", origins)
	}
}

var docFamilyRE = regexp.MustCompile("(?m)^\\| `(relay_[a-z0-9_]+)`")

// docs/METRICS.md has one table row per family, and no row for a family that does not exist.
func TestMetricsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docFamilyRE.FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	exported := map[string]bool{}
	for _, mf := range gatherAll(t) {
		if name := mf.GetName(); !isRuntimeFamily(name) {
			exported[name] = true
			if !documented[name] {
				t.Errorf("%s is not documented in docs/METRICS.md (a table row starting with | `%s`)", name, name)
			}
		}
	}
	for name := range documented {
		if !exported[name] {
			t.Errorf("docs/METRICS.md documents %s, which relay does not export", name)
		}
	}
}

// relay_restarts_total's HELP and its docs/METRICS.md row name every cause fault.Cause can give, in
// its order, and no other: both come from the one list (fault.Causes).
func TestRestartCausesListed(t *testing.T) {
	want := strings.Join(fault.Causes, ", ")
	for _, mf := range gatherAll(t) {
		if mf.GetName() == "relay_restarts_total" && !strings.HasSuffix(mf.GetHelp(), "by cause: "+want+".") {
			t.Errorf("relay_restarts_total HELP %q does not end with the causes %s", mf.GetHelp(), want)
		}
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `relay_restarts_total` \\| counter \\| `cause`: ([^|]*) \\|").FindSubmatch(b)
	if row == nil {
		t.Fatal("docs/METRICS.md has no relay_restarts_total row with its cause label")
	}
	if got := strings.ReplaceAll(strings.TrimSpace(string(row[1])), "`", ""); got != want {
		t.Errorf("docs/METRICS.md lists the causes %s, want %s", got, want)
	}
}
