// Rendering a Config as a YAML file: the effective configuration relay config check prints, with
// its secrets masked, and relay.example.yaml, every key at its default under its doc line.
//
// Invariant: both come from walk over the struct and the field table, as Load reads a file, so
// they hold every key exactly where the file nests it, and Load reads an unmasked rendering back
// to the same Config (TestRenderedConfigLoadsBack).

package config

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/spec"
)

// Rendering styles.
const (
	renderMasked = iota // values, secrets masked (what may be printed or pasted into a ticket)
	// renderExample comments every key out under its doc line and variable: a copy sets nothing
	// until a line is uncommented, so a default that depends on other keys (subtasks) stays unset,
	// and a later relay's defaults still apply to what was never changed.
	renderExample
)

// EffectiveYAML is c as a YAML file, every key with the value relay runs with, passwords masked:
// in DSNs, and the kafka.properties that hold secrets (sasl.password, set from
// kafka.sasl_password_file too, and any other *password*, *secret* or private key).
func (c Config) EffectiveYAML() ([]byte, error) { return c.renderYAML(renderMasked, "") }

// renderYAML renders every key of c in struct order, under head (a comment) when not empty.
func (c Config) renderYAML(style int, head string) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	sections := map[string]*yaml.Node{}
	var err error
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, v reflect.Value) {
		// Next to a pipeline the default spec's keys are refused (Load), and the block read from
		// pipeline_file stays there.
		if c.Pipeline != nil && slices.Contains(pipelineShape, key) {
			return
		}
		if key == "pipeline" && c.PipelineFile != "" {
			v = reflect.ValueOf((*spec.Spec)(nil))
		}
		parent, name := root, key
		if section, leaf, nested := strings.Cut(key, "."); nested {
			if sections[section] == nil {
				sections[section] = &yaml.Node{Kind: yaml.MappingNode}
				root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: section}, sections[section])
			}
			parent, name = sections[section], leaf
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: name}
		if style == renderExample {
			k.HeadComment = wrapComment(docOf(key), 96)
		}
		val, verr := valueNode(key, v, style == renderMasked)
		if verr != nil && err == nil {
			err = fmt.Errorf("config: rendering %s: %w", key, verr)
		}
		parent.Content = append(parent.Content, k, val)
	})
	if err != nil {
		return nil, err
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}, HeadComment: head}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("config: rendering: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: rendering: %w", err)
	}
	if style != renderExample {
		return []byte(b.String()), nil
	}
	lines := strings.SplitAfter(b.String(), "\n")
	for i, l := range lines {
		body := strings.TrimLeft(l, " ")
		if body == "" || body == "\n" || strings.HasPrefix(body, "#") || sections[strings.TrimSuffix(body, ":\n")] != nil {
			continue
		}
		lines[i] = l[:len(l)-len(body)] + "# " + body
	}
	return []byte(strings.Join(lines, "")), nil
}

// docOf is a key's doc line and how else to set it.
func docOf(key string) string {
	if env := envOf(key); env != "" {
		return docs[key] + " (" + env + ")"
	}
	return docs[key] + " (YAML only)"
}

// valueNode is the YAML of one key's value: durations and times as Load parses them, lists in
// flow style, maps with sorted keys.
func valueNode(key string, v reflect.Value, mask bool) (*yaml.Node, error) {
	n := &yaml.Node{}
	var err error
	switch {
	case v.Type() == durationType:
		err = n.Encode(time.Duration(v.Int()).String())
	case v.Kind() == reflect.Slice:
		err = n.Encode(append([]string{}, v.Interface().(List)...))
		n.Style = yaml.FlowStyle
	case v.Kind() == reflect.Map:
		return maskProperties(v.Interface().(map[string]string), mask)
	case mask && (key == "mysql.dsn" || key == "mysql.ledger_dsn") && v.String() != "":
		err = n.Encode(database.Redact(v.String()))
	case mask && key == "schema_registry.url":
		// The registry client takes basic auth from the URL's user info too.
		if u, perr := url.Parse(v.String()); perr == nil {
			err = n.Encode(u.Redacted())
		} else {
			err = n.Encode("xxxxx")
		}
	default:
		err = n.Encode(v.Interface())
	}
	return n, err
}

// maskProperties is props with the values of secret keys masked (mask), as a sorted mapping.
func maskProperties(props map[string]string, mask bool) (*yaml.Node, error) {
	n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := props[k]
		if mask && secretProperty(k) {
			val = "xxxxx"
		}
		kn, vn := &yaml.Node{}, &yaml.Node{}
		if err := kn.Encode(k); err != nil {
			return nil, err
		}
		if err := vn.Encode(val); err != nil {
			return nil, err
		}
		n.Content = append(n.Content, kn, vn)
	}
	if len(keys) > 0 {
		n.Style = 0
	}
	return n, nil
}

// secretProperty reports whether a librdkafka property holds a secret: a password, a client
// secret, a private key, or the OAUTHBEARER configuration (which can hold credentials).
func secretProperty(key string) bool {
	k := strings.ToLower(key)
	return strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.HasPrefix(k, "ssl.key") ||
		k == "sasl.oauthbearer.config"
}

// wrapComment breaks text into lines of at most width characters, at spaces.
func wrapComment(text string, width int) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return strings.Join(append(lines, line), "\n")
}
