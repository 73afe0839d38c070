// Tests of the exported series themselves: names, types, labels and the bounded label values.
//
// Invariant checked here: every family passes promlint; relay's families carry the relay_ prefix
// and the relay_job label, counters end in _total, labels come from a small known set, and the
// label values the code passes for result, phase, action and origin are the ones New registers, so
// a typo cannot start a series no dashboard or alert looks at. docs/METRICS.md lists every family.
package metrics

import (
	"database/sql"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // for sql.Open; WatchPool never connects
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
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
	"table": true, // the spec's aggregate tables, fixed at start
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

// The code passes only registered values: every WithLabelValues on a bounded vector, anywhere in
// the repository, is checked after resolving literals, metrics constants, local variables assigned
// from literals and parameters of the enclosing function (through its call sites).
func TestMetricsLabelValuesUsedInCode(t *testing.T) {
	vals := allowedValues(t)
	root := filepath.Join("..", "..")
	src := parseRepo(t, root)
	src.consts = packageStringConsts(t, ".")
	checked := 0
	for _, f := range src.files {
		ast.Inspect(f.file, func(n ast.Node) bool {
			fd, ok := n.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				return true
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "WithLabelValues" {
					return true
				}
				field, ok := sel.X.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				b, ok := boundedLabels[field.Sel.Name]
				if !ok {
					return true
				}
				if f.path == filepath.Join(root, "internal", "metrics", "metrics.go") {
					return true // New itself registers the sets
				}
				pos := src.fset.Position(call.Pos())
				if len(call.Args) != len(b.labels) {
					t.Errorf("%s: %s.WithLabelValues with %d values, want %d", pos, field.Sel.Name, len(call.Args), len(b.labels))
					return true
				}
				for i, arg := range call.Args {
					values, ok := src.resolve(arg, fd, 0)
					if !ok {
						t.Errorf("%s: cannot tell which values %s{%s} gets from %s: pass a string literal or a metrics constant",
							pos, b.family, b.labels[i], types.ExprString(arg))
						continue
					}
					for _, v := range values {
						checked++
						if !vals[b.family][b.labels[i]][v] {
							t.Errorf("%s: %s{%s=%q} is not a registered value %v", pos, b.family, b.labels[i], v,
								sortedKeys(vals[b.family][b.labels[i]]))
						}
					}
				}
				return true
			})
			return false
		})
	}
	t.Logf("%d label values checked", checked)
	// The pipeline alone sets result, phase, action and origin in a dozen places.
	if checked < 12 {
		t.Fatalf("only %d label values checked: the source scan found almost nothing", checked)
	}
}

type srcFile struct {
	path string
	file *ast.File
}

type repo struct {
	fset   *token.FileSet
	files  []srcFile
	consts map[string]string // string constants of package metrics
}

func parseRepo(t *testing.T, root string) *repo {
	t.Helper()
	r := &repo{fset: token.NewFileSet()}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(r.fset, path, nil, 0)
		if err != nil {
			return err
		}
		r.files = append(r.files, srcFile{path, f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// packageStringConsts reads the string constants declared in the Go files of dir.
func packageStringConsts(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	out := map[string]string{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringLit(vs.Values[i]); ok {
							out[name.Name] = s
						}
					}
				}
			}
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// resolve lists the string values e can take inside fn.
func (r *repo) resolve(e ast.Expr, fn *ast.FuncDecl, depth int) ([]string, bool) {
	if depth > 3 {
		return nil, false
	}
	if s, ok := stringLit(e); ok {
		return []string{s}, true
	}
	switch x := e.(type) {
	case *ast.SelectorExpr: // metrics.OriginRecovery
		if pkg, ok := x.X.(*ast.Ident); ok && pkg.Name == "metrics" {
			v, ok := r.consts[x.Sel.Name]
			return []string{v}, ok
		}
	case *ast.Ident:
		if idx := paramIndex(fn, x.Name); idx >= 0 {
			return r.resolveParam(fn, idx, depth)
		}
		if v, ok := r.resolveLocal(x.Name, fn, depth); ok {
			return v, true
		}
		v, ok := r.consts[x.Name] // inside package metrics
		return []string{v}, ok
	}
	return nil, false
}

// resolveLocal collects the values assigned to a local variable; every assignment must resolve.
func (r *repo) resolveLocal(name string, fn *ast.FuncDecl, depth int) ([]string, bool) {
	var out []string
	ok := true
	found := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			for i, lhs := range s.Lhs {
				if id, isID := lhs.(*ast.Ident); isID && id.Name == name {
					found = true
					if len(s.Rhs) != len(s.Lhs) {
						ok = false
						continue
					}
					v, vok := r.resolve(s.Rhs[i], fn, depth+1)
					ok = ok && vok
					out = append(out, v...)
				}
			}
		case *ast.ValueSpec:
			for i, id := range s.Names {
				if id.Name == name {
					found = true
					if i >= len(s.Values) {
						ok = false
						continue
					}
					v, vok := r.resolve(s.Values[i], fn, depth+1)
					ok = ok && vok
					out = append(out, v...)
				}
			}
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{s.Key, s.Value} {
				if id, isID := e.(*ast.Ident); isID && id.Name == name {
					found, ok = true, false
				}
			}
		}
		return true
	})
	return out, found && ok
}

func paramIndex(fn *ast.FuncDecl, name string) int {
	i := 0
	for _, field := range fn.Type.Params.List {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// resolveParam resolves argument idx at every call site of fn (matched by name and arity).
func (r *repo) resolveParam(fn *ast.FuncDecl, idx, depth int) ([]string, bool) {
	arity := 0
	for _, field := range fn.Type.Params.List {
		arity += max(1, len(field.Names))
	}
	var out []string
	ok, calls := true, 0
	for _, f := range r.files {
		ast.Inspect(f.file, func(n ast.Node) bool {
			caller, isFn := n.(*ast.FuncDecl)
			if !isFn || caller.Body == nil {
				return true
			}
			ast.Inspect(caller.Body, func(n ast.Node) bool {
				call, isCall := n.(*ast.CallExpr)
				if !isCall || len(call.Args) != arity || calleeName(call) != fn.Name.Name {
					return true
				}
				calls++
				v, vok := r.resolve(call.Args[idx], caller, depth+1)
				ok = ok && vok
				out = append(out, v...)
				return true
			})
			return false
		})
	}
	return out, ok && calls > 0
}

func calleeName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
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
