// Loading: defaults, then the YAML file, then RELAY_* variables, into one Config.
//
// Invariant: Load reports every problem it finds at once, each naming its key (YAML path, or the
// variable); only a file that cannot be read or parsed, or is not a relay config at all, stops it
// early. Values are never quoted in errors about kafka.properties: they can be passwords.

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/spec"
)

// Load builds a Config from defaults, then the YAML file (if path is not empty), then the
// environment. Unknown keys in either place, and values of the wrong type, are errors that name
// the key; all of them are returned together (joined).
func Load(path string, environ []string) (Config, error) {
	c, errs, _ := load(path, environ)
	return c, errors.Join(errs...)
}

// Check is Load, then apply (the command line's overrides, nil for none), then Validate, with every
// problem of all three at once: a refusal Validate makes of a key Load already refused (the key
// kept its default) is left out. A file that cannot be read or parsed is not validated: every key
// of it would be reported missing.
func Check(path string, environ []string, apply func(*Config)) (Config, error) {
	c, errs, complete := load(path, environ)
	if apply != nil {
		apply(&c)
	}
	if !complete {
		return c, errors.Join(errs...)
	}
	refused := map[string]bool{}
	for _, err := range errs {
		var fe *FieldError
		if errors.As(err, &fe) {
			refused[fe.Key] = true
		}
	}
	verr := c.Validate()
	if j, ok := verr.(interface{ Unwrap() []error }); ok {
		for _, err := range j.Unwrap() {
			var fe *FieldError
			if !errors.As(err, &fe) || !refused[fe.Key] {
				errs = append(errs, err)
			}
		}
	}
	return c, errors.Join(errs...)
}

// load is Load's work. complete is false when the file could not be read or parsed: the Config
// then holds nothing of it, and validating it would only report the file's keys as missing.
func load(path string, environ []string) (c Config, errs []error, complete bool) {
	c = Default()
	c.set = map[string]bool{}
	complete = true
	if path != "" {
		errs, complete = c.loadFile(path)
	}
	errs = append(errs, c.applyEnv(environ)...)
	if err := c.readPipelineFile(); err != nil {
		errs = append(errs, err)
	}
	if c.Pipeline != nil {
		for _, key := range pipelineShape {
			if c.set[key] {
				errs = append(errs, bad(key, "is set together with pipeline, which names the fields and tables itself: set one of them"))
			}
		}
	}
	errs = append(errs, c.readSecretFiles()...)
	if c.Kafka.GroupID == "" && c.Job.Name != "" {
		c.Kafka.GroupID = "relay-" + c.Job.Name
	}
	return c, errs, complete
}

// loadFile decodes the YAML file over c and records the keys it sets; ok is false when the file
// could not be read or parsed, or is a Kubernetes manifest.
func (c *Config) loadFile(path string) (errs []error, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return []error{fmt.Errorf("config: %w", err)}, false
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return []error{fmt.Errorf("config %s: %w", path, err)}, false
	}
	if err := notAManifest(path, &root); err != nil {
		return []error{err}, false
	}
	visitKeys("", &root, func(key string, _, _ *yaml.Node) bool { c.set[key] = true; return true })
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var te *yaml.TypeError
	if err := dec.Decode(c); errors.As(err, &te) {
		return keyedTypeErrors(path, b, te), true
	} else if err != nil && !errors.Is(err, io.EOF) {
		return []error{fmt.Errorf("config %s: %w", path, err)}, false
	}
	return nil, true
}

// ErrManifest marks a Kubernetes manifest given where a relay config belongs (deploy/k8s/relay.yaml
// is one, and relay.yaml is the name a config is given).
var ErrManifest = errors.New("this is a Kubernetes manifest, not a relay config")

// notAManifest refuses a file with a top-level apiVersion or kind, which no relay config has, in
// one sentence rather than one unknown key per line of the manifest.
func notAManifest(path string, root *yaml.Node) error {
	var found []string
	visitKeys("", root, func(key string, _, _ *yaml.Node) bool {
		if key == "apiVersion" || key == "kind" {
			found = append(found, key)
		}
		return false
	})
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("config %s: %w (it has a top-level %s): give relay --config a relay config "+
		"(relay.example.yaml lists every key), or set the manifest's RELAY_* variables", path, ErrManifest, strings.Join(found, " and "))
}

// visitKeys calls fn with the dotted path, key node and value of every key of the mapping n (a
// document, an alias or a mapping), a merge key's values as the mapping's own; where fn returns
// true, it goes on into the value.
func visitKeys(prefix string, n *yaml.Node, fn func(key string, k, v *yaml.Node) bool) {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" {
			visitKeys(prefix, v, fn)
			continue
		}
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if fn(key, k, v) {
			visitKeys(key, v, fn)
		}
	}
}

// keyedTypeErrors names the key of each of yaml's type errors, which name only a line (and, for an
// unknown key, its last part): every leaf of the file is decoded alone into its field's type, and a
// leaf whose error is one of te's owns it (identical texts, as from one line of a flow mapping, go
// to their keys in document order).
func keyedTypeErrors(path string, b []byte, te *yaml.TypeError) []error {
	types := map[string]reflect.Type{}
	sections := map[string]bool{}
	walk(reflect.ValueOf(&Config{}).Elem(), "", func(key string, v reflect.Value) {
		types[key] = v.Type()
		for i := strings.LastIndexByte(key, '.'); i > 0; i = strings.LastIndexByte(key[:i], '.') {
			sections[key[:i]] = true
		}
	})
	owners := map[string][]string{} // error text -> keys
	unknown := map[string]string{}  // yaml's "line N: field x not found" -> key
	visit := func(key string, k, val *yaml.Node) bool {
		t, leaf := types[key]
		if sections[key] {
			return true
		}
		if !leaf {
			unknown[fmt.Sprintf("line %d: field %s not found", k.Line, k.Value)] = key
			return false
		}
		var leafErr *yaml.TypeError
		if errors.As(val.Decode(reflect.New(t).Interface()), &leafErr) {
			for _, msg := range leafErr.Errors {
				owners[msg] = append(owners[msg], key)
			}
		}
		return false
	}
	var root yaml.Node
	if yaml.Unmarshal(b, &root) == nil {
		visitKeys("", &root, visit)
	}
	var errs []error
	for _, msg := range te.Errors {
		where, _, _ := strings.Cut(msg, " in type ")
		if keys := owners[msg]; len(keys) > 0 {
			errs = append(errs, bad(keys[0], "%s %s", path, msg))
			owners[msg] = keys[1:]
		} else if key, ok := unknown[where]; ok {
			line, _, _ := strings.Cut(where, ":")
			errs = append(errs, fmt.Errorf("config %s: %w %s (%s)", path, ErrUnknownKey, key, line))
		} else {
			errs = append(errs, fmt.Errorf("config %s: %s", path, msg))
		}
	}
	return errs
}

// readPipelineFile reads pipeline_file into Pipeline: the file holds what the pipeline block
// would (input, aggregates), with the same strictness about unknown keys.
func (c *Config) readPipelineFile() error {
	path := c.PipelineFile
	if path == "" {
		return nil
	}
	if c.Pipeline != nil {
		return bad("pipeline_file", "is set together with pipeline: set one of them")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return bad("pipeline_file", "%v", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s spec.Spec
	if err := dec.Decode(&s); err != nil {
		return bad("pipeline_file", "%s: %v", path, err)
	}
	c.Pipeline = &s
	return nil
}

// readSecretFiles puts the contents of the *_file keys where relay uses them, so a secret can be a
// mounted file rather than text in the environment or the YAML file, and needs no escaping.
func (c *Config) readSecretFiles() []error {
	var errs []error
	if p := c.Kafka.SASLPasswordFile; p != "" {
		if _, ok := c.Kafka.Properties["sasl.password"]; ok {
			errs = append(errs, bad("kafka.sasl_password_file", "kafka.properties sets sasl.password too: set it in one place"))
		} else if pw, err := readSecret(p); err != nil {
			errs = append(errs, bad("kafka.sasl_password_file", "%v", err))
		} else {
			if c.Kafka.Properties == nil {
				c.Kafka.Properties = map[string]string{}
			}
			c.Kafka.Properties["sasl.password"] = pw
		}
	}
	if p := c.MySQL.PasswordFile; p != "" && c.MySQL.DSN != "" {
		if err := c.putPassword(p); err != nil {
			errs = append(errs, err)
		}
	}
	if p := c.SchemaRegistry.PasswordFile; p != "" {
		pw, err := readSecret(p)
		if err != nil {
			errs = append(errs, bad("schema_registry.password_file", "%v", err))
		}
		c.SchemaRegistry.password = pw
	}
	return errs
}

// putPassword puts the password read from path into mysql.dsn, which must have none.
func (c *Config) putPassword(path string) error {
	dsn, err := mysql.ParseDSN(c.MySQL.DSN)
	if err != nil {
		return bad("mysql.dsn", "%v", err)
	}
	if dsn.Passwd != "" {
		return bad("mysql.password_file", "mysql.dsn has a password too: set it in one place")
	}
	if dsn.Passwd, err = readSecret(path); err != nil {
		return bad("mysql.password_file", "%v", err)
	}
	c.MySQL.DSN = dsn.FormatDSN()
	return nil
}

// readSecret is a file's content without the trailing newline editors and `kubectl create secret
// --from-file` leave; an empty secret is a mistake, not a password.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// Reserved prefixes belong to the test harness and services script, not to relay's configuration.
var reservedEnvPrefixes = []string{"RELAY_TEST_", "RELAY_SVC_", "RELAY_CRASH"}

// applyEnv sets the keys of the RELAY_* variables in environ (and records them as set), each bad
// value an error naming its key and variable, then every unknown variable in one error.
func (c *Config) applyEnv(environ []string) []error {
	setters := map[string]reflect.Value{}
	keys := map[string]string{}
	walk(reflect.ValueOf(c).Elem(), "", func(key string, v reflect.Value) {
		if env := envOf(key); env != "" {
			setters[env] = v
			keys[env] = key
		}
	})
	var errs []error
	var unknown []string
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "RELAY_") || hasAnyPrefix(name, reservedEnvPrefixes) {
			continue
		}
		v, ok := setters[name]
		if !ok {
			unknown = append(unknown, name)
			continue
		}
		c.set[keys[name]] = true
		if err := setFromString(v, val); err != nil {
			errs = append(errs, &FieldError{Key: keys[name], Env: name, Msg: err.Error()})
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		errs = append(errs, fmt.Errorf("config: %w in environment: %s", ErrUnknownKey, strings.Join(unknown, ", ")))
	}
	return errs
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// splitList splits an environment list at its unescaped commas: `\,` is a comma inside an item and
// `\\` a backslash (a Kafka password can hold either). Items are trimmed and kept in place, empty
// ones too, so an error can give an item's position.
func splitList(s string) ([]string, error) {
	var items []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ',':
			items = append(items, strings.TrimSpace(cur.String()))
			cur.Reset()
		case '\\':
			if i+1 == len(s) || (s[i+1] != ',' && s[i+1] != '\\') {
				return nil, fmt.Errorf("item %d: a backslash escapes only a comma or a backslash (write \\\\ for one backslash)", len(items)+1)
			}
			i++
			cur.WriteByte(s[i])
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(items, strings.TrimSpace(cur.String())), nil
}

func setFromString(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a Go duration (e.g. 500ms, 2s, 1m)", s)
		}
		v.SetInt(int64(d))
	case v.Type() == timeType:
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return fmt.Errorf("%q is not an RFC 3339 time", s)
		}
		v.Set(reflect.ValueOf(t))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean", s)
		}
		v.SetBool(b)
	case v.Kind() == reflect.Slice:
		items, err := splitList(s)
		if err != nil {
			return err
		}
		var parts []string
		for _, p := range items {
			if p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	case v.Kind() == reflect.Map:
		items, err := splitList(s)
		if err != nil {
			return err
		}
		// Errors give the item's position and key, never its text: the value can be a password.
		m := map[string]string{}
		for i, p := range items {
			if p == "" {
				continue
			}
			k, val, ok := strings.Cut(p, "=")
			k = strings.TrimSpace(k)
			switch _, dup := m[k]; {
			case !ok || k == "":
				return fmt.Errorf("item %d is not key=value (a comma inside a value is written \\,)", i+1)
			case dup:
				return fmt.Errorf("item %d sets %s again", i+1, k)
			}
			m[k] = strings.TrimSpace(val)
		}
		v.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}
