// Package layers keeps docs/PACKAGES.md, the map of relay's packages, true, the arrows between
// them pointing one way, and each package's doc where go doc finds it (pkgdoc_test.go).
//
// Invariant: docs/PACKAGES.md is byte-for-byte what render produces from `go list` and the
// identifiers each package uses of another, so an arrow cannot appear, disappear or change its
// reason without the map changing with it; the commit protocol (internal/commit) sits below
// pipeline, ops and cmd and above ledger, xa and sink; no arrow between relay's packages exists for
// a single identifier unless oneHelper says why. Regenerate with:
//
//	go test ./test/layers -update
package layers

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/PACKAGES.md from go list")

const module = "github.com/relay-sh/relay/"

var docPath = filepath.Join("..", "..", "docs", "PACKAGES.md")

// vocabulary are packages that hold what many others speak in, so any arrow to one may carry a
// single identifier: the per-partition offsets, the one error classifier, the metric names.
var vocabulary = map[string]string{
	"internal/partition": "the offsets every layer passes around",
	"internal/fault":     "the one classifier of MySQL and Kafka errors",
	"internal/metrics":   "the registry and its label values",
}

// oneHelper are the other arrows allowed to carry a single identifier, each with why the target is
// the right home for it rather than the importer.
var oneHelper = map[string]string{
	"cmd/relay -> internal/gctuner":          "gctuner is one mechanism (a GOGC controller) behind one entry point",
	"cmd/relay -> internal/httpserver":       "httpserver is one mechanism (the metrics and health listener) behind one entry point",
	"cmd/relay -> internal/supervisor":       "supervisor is one mechanism (first error wins, cancels the rest) behind one type",
	"cmd/relay -> internal/sink":             "run tells MySQL from MariaDB once, at start, where the sink's SQL dialect lives",
	"internal/config -> internal/consumer":   "the consumer owns the librdkafka properties relay sets itself; config refuses them at load",
	"internal/loadgen -> internal/config":    "loadgen writes the default spec's records, which config defines",
	"internal/ops -> internal/format":        "preflight runs relay run's start-up check of the topics' subjects, which the format owns",
	"internal/ops -> internal/loadgen":       "verify --against reads loadgen's totals file, whose format loadgen owns",
	"internal/sink -> internal/money":        "decimal measures are rendered by money, the one decimal type",
	"internal/format -> internal/money":      "an Avro decimal's unscaled value becomes money's units, whose scale money owns",
	"internal/pipeline -> internal/config":   "the job's configuration, one struct read field by field",
	"internal/ops -> internal/config":        "the job's configuration, one struct read field by field",
	"internal/pipeline -> internal/database": "a Galera node's primary-component check, with the server-state queries it belongs to",
}

// pkg is one relay package as go list describes it, with what it uses of each relay import.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
	uses       map[string][]string // import path (short) → identifiers used, sorted
}

func short(path string) string { return strings.TrimPrefix(path, module) }

// load lists the product's packages (not its tests, not bench/, which is its own module) and, for
// each arrow, the identifiers the importer's files use through it.
func load(t *testing.T) map[string]*pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "../../internal/...", "../../cmd/...")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(short(p.ImportPath), "internal/testenv") || strings.HasPrefix(short(p.ImportPath), "internal/harness") {
			continue // test support: imported only by tests
		}
		p.uses = uses(t, &p)
		pkgs[short(p.ImportPath)] = &p
	}
	// Arrows lead only to product packages: what is left out above is no arrow of the map.
	for _, p := range pkgs {
		for imp := range p.uses {
			if pkgs[imp] == nil {
				delete(p.uses, imp)
			}
		}
	}
	return pkgs
}

// uses returns, per relay import of p, the sorted identifiers p's files select through it.
func uses(t *testing.T, p *pkg) map[string][]string {
	t.Helper()
	seen := map[string]map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		local := map[string]string{} // name in the file → import path (short)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(path, module) {
				continue
			}
			name := filepath.Base(path)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			local[name] = short(path)
			if seen[short(path)] == nil {
				seen[short(path)] = map[string]bool{}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok {
					if path, ok := local[id.Name]; ok {
						seen[path][sel.Sel.Name] = true
					}
				}
			}
			return true
		})
	}
	out := map[string][]string{}
	for path, ids := range seen {
		for id := range ids {
			out[path] = append(out[path], id)
		}
		slices.Sort(out[path])
	}
	return out
}

// layers gives each package 1 + the highest layer among its relay imports (0: none).
func layers(pkgs map[string]*pkg) map[string]int {
	l := map[string]int{}
	var depth func(string) int
	depth = func(name string) int {
		if d, ok := l[name]; ok {
			return d
		}
		d := 0
		for imp := range pkgs[name].uses {
			d = max(d, depth(imp)+1)
		}
		l[name] = d
		return d
	}
	for name := range pkgs {
		depth(name)
	}
	return l
}

func render(pkgs map[string]*pkg) string {
	l := layers(pkgs)
	highestFirst := func(a, b string) int {
		if l[a] != l[b] {
			return l[b] - l[a]
		}
		return strings.Compare(a, b)
	}
	names := slices.SortedFunc(maps.Keys(pkgs), highestFirst)
	var b strings.Builder
	b.WriteString(`# Packages

The product's packages (internal/ and cmd/; bench/ is a module of its own, internal/testenv and
internal/harness serve tests only), highest first. A package's layer is one more than the highest
layer it imports, so every arrow points down. Each arrow lists what the importer uses through it:
an arrow carrying one identifier needs a reason (test/layers keeps a list), since a package that
exists for one helper of another is usually that helper in the wrong place.

Generated by test/layers from ` + "`go list`" + ` and the sources; ` + "`go test ./test/layers -update`" + `
rewrites it, and the test fails when this page and the code disagree.

The commit protocol, internal/commit, sits below pipeline (the read loop), ops (the operator
commands) and cmd/relay, and above ledger (the decisions), xa (the XA branch) and sink (the
tables): docs/PROTOCOL.md walks through it file by file.

| layer | package | imports: identifiers used |
| --- | --- | --- |
`)
	for _, name := range names {
		var cells []string
		for _, imp := range slices.SortedFunc(maps.Keys(pkgs[name].uses), highestFirst) {
			ids := pkgs[name].uses[imp]
			shown := ids
			if len(ids) > 4 {
				shown = append(slices.Clip(ids[:4]), fmt.Sprintf("… %d in all", len(ids)))
			}
			cells = append(cells, fmt.Sprintf("**%s**: %s", filepath.Base(imp), strings.Join(shown, ", ")))
		}
		fmt.Fprintf(&b, "| %d | %s | %s |\n", l[name], name, strings.Join(cells, "; "))
	}
	b.WriteString("\n```mermaid\ngraph TD\n")
	for _, name := range names {
		for _, imp := range slices.Sorted(maps.Keys(pkgs[name].uses)) {
			fmt.Fprintf(&b, "  %s --> %s\n", mermaidID(name), mermaidID(imp))
		}
	}
	b.WriteString("```\n")
	return b.String()
}

func mermaidID(name string) string {
	return strings.NewReplacer("internal/", "", "/", "_").Replace(name)
}

func TestPackagesDoc(t *testing.T) {
	got := render(load(t))
	if *update {
		if err := os.WriteFile(docPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("docs/PACKAGES.md is stale: regenerate with `go test ./test/layers -update`\n--- generated ---\n%s", got)
	}
}

// TestProtocolLayer: go list -deps puts the commit protocol below its users and above its parts.
func TestProtocolLayer(t *testing.T) {
	pkgs := load(t)
	commit := pkgs["internal/commit"]
	if commit == nil {
		t.Fatal("no internal/commit package")
	}
	deps := func(p *pkg) []string {
		var out []string
		for _, d := range p.Deps {
			if strings.HasPrefix(d, module) {
				out = append(out, short(d))
			}
		}
		return out
	}
	for _, above := range []string{"internal/pipeline", "internal/ops", "cmd/relay"} {
		if !slices.Contains(deps(pkgs[above]), "internal/commit") {
			t.Errorf("%s does not depend on internal/commit", above)
		}
		if slices.Contains(deps(commit), above) {
			t.Errorf("internal/commit depends on %s, which is above it", above)
		}
	}
	for _, below := range []string{"internal/ledger", "internal/xa", "internal/sink"} {
		if !slices.Contains(deps(commit), below) {
			t.Errorf("internal/commit does not depend on %s", below)
		}
		if slices.Contains(deps(pkgs[below]), "internal/commit") {
			t.Errorf("%s depends on internal/commit, which is above it", below)
		}
	}
	// commit is the only owner of XA: every other package lists, probes and resolves branches
	// through it (commit/operator.go), so the protocol's rules about branches hold everywhere.
	for name, p := range pkgs {
		if _, ok := p.uses["internal/xa"]; ok && name != "internal/commit" {
			t.Errorf("%s imports internal/xa: XA goes through internal/commit", name)
		}
	}
	// Configuration is read above the protocol and handed down as settings: the protocol never
	// reads it (nor the consumer, which is the loop's).
	for _, never := range []string{"internal/config", "internal/consumer"} {
		if slices.Contains(deps(commit), never) {
			t.Errorf("internal/commit depends on %s", never)
		}
	}
}

// TestNoArrowForOneHelper: an import between relay packages carries more than one identifier,
// or has its reason in oneHelper.
func TestNoArrowForOneHelper(t *testing.T) {
	pkgs := load(t)
	used := map[string]bool{}
	for name, p := range pkgs {
		for imp, ids := range p.uses {
			edge := name + " -> " + imp
			if len(ids) > 1 {
				continue
			}
			if _, ok := vocabulary[imp]; ok {
				continue
			}
			used[edge] = true
			if _, ok := oneHelper[edge]; !ok {
				t.Errorf("%s exists for %s alone: move it to the importer, or give the arrow a reason in oneHelper", edge, ids[0])
			}
		}
	}
	for edge := range oneHelper {
		if !used[edge] {
			t.Errorf("oneHelper lists %s, which no longer carries a single identifier: drop it", edge)
		}
	}
}
