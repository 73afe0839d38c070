// docs/CONFIG.md is generated from the field table and Default(); this test keeps it that way.
//
// Invariant: docs/CONFIG.md is byte-for-byte what renderConfigDoc produces from Fields() and
// Default(), so a key, a default or a doc line cannot change without the published reference
// changing with it. Regenerate with: go test ./internal/config -run TestConfigDoc -update
package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite docs/CONFIG.md from the field table")

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
must stay below ` + "`checkpoint.timeout`" + `; the error says by how much a value is off. ` + "`relay preflight`" + `
checks the settings that depend on the servers.

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

func TestConfigDoc(t *testing.T) {
	want := renderConfigDoc()
	if *update {
		if err := os.WriteFile(configDocPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", configDocPath)
		return
	}
	got, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatalf("%v\nregenerate it with: go test ./internal/config -run TestConfigDoc -update", err)
	}
	if !bytes.Equal(got, want) {
		line, g, w := firstDiffLine(got, want)
		t.Fatalf("docs/CONFIG.md is out of date with internal/config (first difference at line %d: %q, want %q).\n"+
			"Regenerate it with: go test ./internal/config -run TestConfigDoc -update", line, g, w)
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
