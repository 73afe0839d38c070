// Reading a spec from YAML. Invariant: every refusal, the YAML's own (an unknown key, a value of
// the wrong kind) as much as Compile's, names the key by its path under pipeline, as Error does:
// yaml's own messages name a line and a Go type, which an operator cannot map to the spec.

package spec

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// UnmarshalYAML checks the block's shape against Spec, key by key, before decoding it.
func (s *Spec) UnmarshalYAML(n *yaml.Node) error {
	if err := checkNode("", n, reflect.TypeOf(s).Elem()); err != nil {
		return err
	}
	type plain Spec // without this method
	return n.Decode((*plain)(s))
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	fieldsType   = reflect.TypeOf(Fields(nil))
)

// checkNode refuses n where it cannot be decoded into a t, naming path (empty: the block itself).
func checkNode(path string, n *yaml.Node, t reflect.Type) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // the zero value, refused by Compile where it matters
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	at := func(key string) string {
		if path == "" {
			return key
		}
		return path + key
	}
	switch {
	case t == fieldsType:
		if n.Kind != yaml.MappingNode {
			return bad(path, "line %d: must map field paths to types (customer.region: string(8)), not %s", n.Line, kind(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
				return bad(path+"."+k.Value, "line %d: must be a type (string(N), int or decimal(S)), not %s", k.Line, kind(v))
			}
		}
		return nil
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return bad(path, "line %d: must be a duration (1m, 1h), not %s", n.Line, kind(n))
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			return bad(path, "line %d: %q is not a duration (1m, 15m, 1h, 24h)", n.Line, n.Value)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return bad(path, "line %d: must be a mapping (keys %s), not %s", n.Line, strings.Join(yamlKeys(t), ", "), kind(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				if err := checkNode(path, v, t); err != nil {
					return err
				}
				continue
			}
			key := "." + k.Value
			if path == "" {
				key = k.Value
			}
			f, ok := yamlField(t, k.Value)
			if !ok {
				return bad(at(key), "line %d: unknown key (known here: %s)", k.Line, strings.Join(yamlKeys(t), ", "))
			}
			if err := checkNode(at(key), v, f.Type); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return bad(path, "line %d: must be a list, not %s", n.Line, kind(n))
		}
		for i, v := range n.Content {
			if err := checkNode(fmt.Sprintf("%s[%d]", path, i), v, t.Elem()); err != nil {
				return err
			}
		}
	default:
		if n.Kind != yaml.ScalarNode {
			return bad(path, "line %d: must be a single value, not %s", n.Line, kind(n))
		}
	}
	return nil
}

// yamlField is the field of struct t whose YAML key is key.
func yamlField(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key && f.IsExported() {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKeys lists the YAML keys of struct t.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}
