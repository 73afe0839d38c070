// docs/CONFIG.md and relay.example.yaml are generated from the field table and Default(); this
// test keeps them that way.
//
// Invariant: docs/CONFIG.md and relay.example.yaml are byte-for-byte what renderConfigDoc and
// renderExampleConfig produce from Fields() and Default(), so a key, a default or a doc line cannot
// change without the published reference and the example changing with it. Regenerate both with:
// go test ./internal/config -run TestConfigDoc -update

package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite docs/CONFIG.md and relay.example.yaml from the field table")

var configDocPath = filepath.Join("..", "..", "docs", "CONFIG.md")

// defaultValues renders every key's default as it would be written in YAML or a RELAY_* variable.
func defaultValues() map[string]string {
	d := Default()
	out := map[string]string{}
	walk(reflect.ValueOf(&d).Elem(), "", func(key string, v reflect.Value) {
		out[key] = renderValue(v)
	})
	return out
}

func renderValue(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Type() == timeType:
		return v.Interface().(time.Time).Format(time.RFC3339)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return ""
		}
	case reflect.String:
		return v.String()
	case reflect.Slice:
		var parts []string
		for i := 0; i < v.Len(); i++ {
			parts = append(parts, fmt.Sprint(v.Index(i).Interface()))
		}
		return strings.Join(parts, ",")
	case reflect.Map:
		var parts []string
		for _, k := range v.MapKeys() {
			parts = append(parts, fmt.Sprintf("%v=%v", k.Interface(), v.MapIndex(k).Interface()))
		}
		sort.Strings(parts)
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v.Interface())
}

// cell escapes text for a markdown table cell: a pipe would end the cell, <job> would be taken
// for an HTML tag and vanish, and sasl.*, ssl.* would turn into emphasis.
var cellEscaper = strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;", "*", `\*`)

func cell(s string) string { return cellEscaper.Replace(s) }

// code renders s as a code span in a table cell, where only the pipe needs escaping.
func code(s string) string { return "`" + strings.ReplaceAll(s, "|", `\|`) + "`" }

func renderConfigDoc() []byte {
	defaults := defaultValues()
	var b bytes.Buffer
	b.WriteString(`# relay configuration

<!-- Generated from internal/config/fields.go and config.Default() by
     go test ./internal/config -run TestConfigDoc -update
     Do not edit by hand: the test fails when this file and the code differ. -->

relay reads its configuration from a YAML file (` + "`relay run --config FILE`" + `, keys as in the first column,
dots being nesting) and from ` + "`RELAY_*`" + ` environment variables, which override the file, so a container
needs no file at all. Unknown keys, in the file or in the environment, and bad values stop relay at
start-up with an error naming the key. Durations are Go durations (` + "`500ms`, `2s`, `1m30s`" + `), times are
RFC 3339, lists and maps in the environment are comma-separated (` + "`a,b`, `k=v,k=v`" + `). Inside an item,
` + "`\\,`" + ` is a comma and ` + "`\\\\`" + ` a backslash; any other backslash is an error, and spaces around items,
keys and values are dropped. A malformed item is reported by its position and key, never its text. Secrets can
instead come from files, such as a mounted Kubernetes secret: ` + "`kafka.sasl_password_file`" + ` and
` + "`mysql.password_file`" + `.

Start-up validation also enforces relations between keys, e.g. ` + "`mysql.session_timeout`" + ` must exceed
` + "`checkpoint.interval + checkpoint.timeout + checkpoint.restart_allowance`" + ` and ` + "`mysql.lock_wait_timeout`" + `
must stay below ` + "`checkpoint.timeout`" + `; the error says by how much a value is off, and every error is
reported at once. ` + "`relay config check`" + ` runs these checks offline and prints the configuration relay runs
with, passwords masked; ` + "`relay preflight`" + ` runs them first, then checks the settings that depend on the
servers. ` + "`relay.example.yaml`" + ` is this table as a config file, every key commented out at its default.

| key | environment variable | default | description |
|---|---|---|---|
`)
	for _, f := range Fields() {
		def := "(empty)"
		if v := defaults[f.Key]; v != "" {
			def = code(v)
		}
		env := "(YAML only)"
		if f.Env != "" {
			env = code(f.Env)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code(f.Key), env, def, cell(f.Doc))
	}
	return b.Bytes()
}

// exampleConfigPath is the commented example config at the repository root: not relay.yaml, the
// name deploy/k8s gives a manifest.
var exampleConfigPath = filepath.Join("..", "..", "relay.example.yaml")

const exampleHead = `relay.example.yaml: every key of relay's configuration, commented out at its default, under its
doc line and the RELAY_* variable that overrides it (docs/CONFIG.md is the same table).

Generated from internal/config/fields.go and config.Default() by
  go test ./internal/config -run TestConfigDoc -update
Do not edit by hand: the test fails when this file and the code differ.

To start: cp relay.example.yaml relay.yaml, uncomment and set job.name, kafka.brokers,
kafka.topics and mysql.dsn, and uncomment only what else you change (a commented key keeps
relay's default, which for subtasks depends on membership and instance). Check it offline with
  relay config check --config relay.yaml
then run relay preflight --config relay.yaml and relay run --config relay.yaml.`

func renderExampleConfig() []byte {
	b, err := Default().renderYAML(renderExample, exampleHead)
	if err != nil {
		panic(err)
	}
	return b
}

// TestConfigDoc keeps every file generated from the field table (docs/CONFIG.md and
// relay.example.yaml) byte for byte what the code renders; -update rewrites them.
func TestConfigDoc(t *testing.T) {
	for _, f := range []struct {
		path string
		want []byte
	}{{configDocPath, renderConfigDoc()}, {exampleConfigPath, renderExampleConfig()}} {
		name := filepath.Base(f.path)
		if *update {
			if err := os.WriteFile(f.path, f.want, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s", f.path)
			continue
		}
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Errorf("%v\nregenerate it with: go test ./internal/config -run TestConfigDoc -update", err)
			continue
		}
		if !bytes.Equal(got, f.want) {
			line, g, w := firstDiffLine(got, f.want)
			t.Errorf("%s is out of date with internal/config (first difference at line %d: %q, want %q).\n"+
				"Regenerate it with: go test ./internal/config -run TestConfigDoc -update", name, line, g, w)
		}
	}
}

// The example config sets nothing as it is (every key is commented out), and with every key line
// uncommented it sets every key, to its default.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	c, err := Load(exampleConfigPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Fields() {
		if c.set[f.Key] {
			t.Errorf("relay.example.yaml sets %s: a copy would pin it", f.Key)
		}
	}
	b, err := os.ReadFile(exampleConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	// A key's line follows its doc, which ends naming the variable (a doc line may itself begin
	// with "word: ").
	keyLine := regexp.MustCompile(`(?m)(\((?:RELAY_[A-Z0-9_]+|YAML only)\)\n)( *)# ([a-z_]+: )`)
	c, err = Load(writeConfig(t, keyLine.ReplaceAllString(string(b), "$1$2$3")), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Fields() {
		if !c.set[f.Key] {
			t.Errorf("relay.example.yaml has no line for %s", f.Key)
		}
	}
	if d := configDiff(c, Default()); len(d) > 0 {
		t.Errorf("relay.example.yaml, uncommented, differs from the defaults: %v", d)
	}
	for _, f := range Fields() {
		env := "(" + f.Env + ")"
		if f.Env == "" {
			env = "(YAML only)"
		}
		if !strings.Contains(string(b), env) {
			t.Errorf("relay.example.yaml does not name %s's variable %s", f.Key, env)
		}
	}
}

// firstDiffLine returns the 1-based number and both versions of the first differing line.
func firstDiffLine(got, want []byte) (int, string, string) {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return i + 1, gl, wl
		}
	}
	return 0, "", ""
}

// The rendering itself: every key has a row with its variable and its default.
func TestConfigDocRows(t *testing.T) {
	doc := string(renderConfigDoc())
	for _, f := range Fields() {
		env := "`" + f.Env + "`"
		if f.Env == "" {
			env = "(YAML only)"
		}
		if !strings.Contains(doc, "| `"+f.Key+"` | "+env+" |") {
			t.Errorf("no row for %s (%s)", f.Key, f.Env)
		}
	}
	for _, row := range []string{
		"| `checkpoint.interval` | `RELAY_CHECKPOINT_INTERVAL` | `1s` |",
		"| `kafka.start_offset` | `RELAY_START_OFFSET` | `earliest` |",
		"| `mysql.ledger_dsn` | `RELAY_LEDGER_DSN` | (empty) |",
		"| `input.min_event_time` | `RELAY_INPUT_MIN_EVENT_TIME` | `2000-01-01T00:00:00Z` |",
	} {
		if !strings.Contains(doc, row) {
			t.Errorf("rendered doc lacks %q", row)
		}
	}
}
