// The label values the code passes, read from the source. Invariant checked: every WithLabelValues
// on a bounded vector, anywhere in the repository, passes only values New registers; a value the scan
// cannot resolve (to a literal, a metrics constant, a local or a parameter through its call sites)
// fails the test rather than passing unchecked.

package metrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // for sql.Open; WatchPool never connects
)

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
