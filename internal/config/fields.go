// Field table: every configuration key, its environment variable and its doc line.
//
// Invariant: a key exists in exactly one place (this table, checked against the struct by a test), so
// the YAML loader, the RELAY_* overrides and docs/CONFIG.md cannot drift apart.
package config

import (
	"bytes"
	"errors"
	"fmt"
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

// Field describes one key.
type Field struct {
	Key string // YAML path
	Env string // environment variable overriding it
	Doc string
}

// docs holds the doc line of each key; envNames the contract names that differ from RELAY_<PATH>.
var (
	docs = map[string]string{
		"job.name":                      "Pipeline name ([a-z0-9_]{1,32}); names XA transactions, ledger rows and metrics. Never change it for a running deployment: a new name orphans the old one's in-doubt transactions.",
		"job.lease":                     "How long this process's ownership of the job lasts past its last renewal (renewed about every second, by the server's clock). A replacement finding the owner silent waits this long, then ends the old owner's MySQL sessions and takes over; an owner that cannot renew stops deciding before it runs out.",
		"kafka.brokers":                 "Kafka bootstrap servers, comma-separated host:port.",
		"kafka.topics":                  "Topics to consume, comma-separated in the environment. Every partition is read, new ones are picked up.",
		"kafka.group_id":                "Consumer group: with membership group, the group whose members share the partitions; otherwise only where committed offsets are published for lag tooling. Default relay-<job>: the prefix keeps relay's group apart from other consumers of the topic that happen to use the job's name, and lag tools (KEDA, Burrow) find the job under it.",
		"kafka.group_instance_id":       "Static membership (KIP-345) with membership group: a stable id per member (a StatefulSet pod name). A member restarting with the same id within the group's session timeout (kafka.properties session.timeout.ms) gets its partitions back without a rebalance. Empty (default): dynamic membership.",
		"kafka.start_offset":            "earliest or latest: where the job starts a topic it has never read (its first run on it). The position is recorded in the ledger before any record is read, so a restart, a failed session or another member never resolves it again; a partition added to the topic later starts at its beginning (docs/PROTOCOL.md, \"Start positions\").",
		"kafka.commit_group_offsets":    "After each committed checkpoint, also commit its offsets to the consumer group (for lag tools; relay never reads them back).",
		"kafka.discovery_interval":      "How often to look for new partitions of the topics.",
		"kafka.properties":              "Extra librdkafka properties (security.protocol, sasl.*, ssl.* ...); in the environment as k=v,k=v, where `\\,` is a comma and `\\\\` a backslash inside a value. Keys relay sets itself and keys or values the linked librdkafka refuses stop relay at start-up, before it connects; errors name the key, never the value.",
		"kafka.sasl_password_file":      "File holding the SASL password (sets sasl.password), e.g. a mounted secret; trailing newlines are dropped. Keeps the password out of the environment and needs no escaping; kafka.properties must not set sasl.password too.",
		"mysql.dsn":                     "go-sql-driver DSN of the sink database, e.g. relay:secret@tcp(mysql:3306)/relay?tls=true. relay sets interpolateParams=true itself (statements never go as server-side prepared statements; see docs/PROTOCOL.md, Galera), so the DSN must not name a charset the driver cannot escape safely (big5, cp932, gb2312, gbk, sjis).",
		"mysql.password_file":           "File holding the password of mysql.dsn's user, e.g. a mounted secret, so the DSN carries none (relay@tcp(mysql:3306)/relay?tls=true); trailing newlines are dropped. mysql.ledger_dsn, when set, carries its own.",
		"mysql.ledger_dsn":              "DSN of the ledger database; empty means the sink database. Not with mode held, which commits offsets with the data, in the sink database.",
		"mysql.table":                   "Aggregate table of the default spec (window_start, sku, order_count, amount_sum); created if missing. Not with a pipeline block, which names its tables.",
		"mysql.dlq_table":               "Dead-letter table for bad input; created if missing.",
		"mysql.detail_table":            "Append sink: one row per order (order_id, sku, amount, event_time, source topic/partition/offset) in the same epoch transactions; empty (default) turns it off.",
		"mysql.session_timeout":         "wait_timeout set on relay's sessions; must exceed checkpoint.interval + checkpoint.timeout + checkpoint.restart_allowance.",
		"mysql.lock_wait_timeout":       "innodb_lock_wait_timeout set on relay's sessions; below checkpoint.timeout.",
		"mysql.statement_timeout":       "Read and write timeout of every MySQL connection (the driver's readTimeout/writeTimeout unless the DSN sets them): a connection the network silently dropped fails within this time. Above mysql.lock_wait_timeout.",
		"mysql.batch_rows":              "Rows per multi-row upsert statement.",
		"mysql.tls_ca_file":             "PEM file of the CA(s) MySQL's server certificate must chain to; turns on verified TLS for the sink and ledger connections (overrides the DSN's tls parameter). Empty: the DSN decides (tls=true uses the system CAs).",
		"mysql.tls_cert_file":           "Client certificate (PEM) for servers that require one; with mysql.tls_key_file.",
		"mysql.tls_key_file":            "Private key (PEM) of mysql.tls_cert_file.",
		"mysql.tls_server_name":         "Host name to verify the server certificate against; default the DSN's host.",
		"mode":                          "xa (XA two-phase commit) or held (one ordinary transaction per subtask, for MySQL without XA; needs mysql.ledger_dsn empty). Unset: xa, or held on a Galera node (MariaDB Galera / Percona XtraDB Cluster have no XA; xa there is refused at start).",
		"subtasks":                      "Number of sink writers, each with its own MySQL connection and transaction per checkpoint.",
		"checkpoint.interval":           "Time between checkpoints (Go duration). Data becomes visible in MySQL at checkpoints.",
		"checkpoint.min_pause":          "Minimum pause between the end of one checkpoint and the start of the next.",
		"checkpoint.idle_after":         "Also cut a checkpoint once no record has arrived for this long (still honouring min_pause), so when traffic pauses what was read becomes visible without waiting out the interval; 0 turns it off.",
		"checkpoint.timeout":            "Deadline of each phase of a checkpoint: its flush, prepare and ledger decision within one, its commit within another (and a cut's reservation of checkpoint ids). A checkpoint past it fails: rolled back before its decision, finished by recovery after it. A drain (SIGTERM, or a group member's revoke) can take up to checkpoint.restart_allowance + 5 × this + 1s; keep a deployment's grace period (terminationGracePeriodSeconds) at least that (docs/RUNBOOK.md, \"The drain bound\").",
		"checkpoint.tolerable_failures": "In-process restarts in a row without a committed checkpoint (failed checkpoints, lost MySQL connections, a MySQL or broker restart, the fence lost) tolerated before relay exits non-zero; restarts back off with jitter from 200ms to 10s. A checkpoint whose rows MySQL refuses for their values ends the process after 3 such failures (exit status 6).",
		"checkpoint.restart_allowance":  "How long a restart (recovery) may take, and a group member's take of partitions granted while a session runs; part of the session-timeout rule and of the drain bound (see checkpoint.timeout).",
		"checkpoint.buffer_keys":        "Distinct keys (of all aggregate tables together) a subtask buffers before flushing early into the open transaction.",
		"checkpoint.resolve_interval":   "How often the resolver looks for this job's left-behind XA branches. A stopped process's branches are looked at again as soon as its lease runs out, sooner than this when it would run out first.",
		"checkpoint.in_doubt_alert_age": "Age past which an in-doubt branch of this job is flagged (relay_xa_in_doubt_oldest_age_seconds).",
		"checkpoint.ready_max_age":      "/readyz fails when the last successful checkpoint is older than this.",
		"input.order_id_field":          "JSON field holding the order id.",
		"input.sku_field":               "JSON field holding the sku.",
		"input.amount_field":            "JSON field holding the amount (decimal string or number).",
		"input.ts_field":                "JSON field holding the event time in epoch milliseconds.",
		"input.window":                  "Tumbling window size of the default spec's table (must divide a day). Not with a pipeline block.",
		"input.bad_input_policy":        "dlq (write bad records to the dead-letter table, default), skip (count only) or fail (stop).",
		"input.max_payload_bytes":       "Records larger than this are bad input (too_large).",
		"input.min_event_time":          "Earliest plausible event time (RFC 3339); older is bad input.",
		"input.max_event_time":          "Event times at or after this (RFC 3339) are bad input.",
		"input.dlq_payload_bytes":       "Bytes of a bad record's payload kept in the dead-letter table.",
		"pipeline_file":                 "A YAML file holding the pipeline spec (what the pipeline block holds: input, aggregates), for deployments configured by environment variables (RELAY_PIPELINE_FILE, e.g. a mounted ConfigMap). Not together with pipeline.",
		"pipeline":                      "The pipeline spec (YAML only; from the environment, name a file with pipeline_file): input fields, event time and aggregate tables, see docs/PIPELINES.md. Absent: today's order_stats_minute shape from input.*_field, input.window and mysql.table, which must then not be set.",
		"http_addr":                     "Listen address for /metrics, /healthz and /readyz. The owner records its /readyz URL (a wildcard host as the host name) with its lease, where relay status asks it.",
		"http_pprof":                    "Also serve Go's /debug/pprof profiles on http_addr (off by default: profiles expose internals; enable to diagnose CPU or memory).",
		"gc_heap_floor_mib":             "Go heap size (MiB) below which relay does not collect garbage: relay's own garbage (each epoch's new keys, its SQL) is small, and with a small heap the collector would still run for it during a checkpoint burst (measured on 2 Dec: 4-6 collections per 2 M orders without the floor, none with it; the Kafka client's per-record garbage, which made it run many times a second, went with the batch reader). Above the floor Go's default applies. While the floor is in effect the Go memory limit is 3 floors (a lower GOMEMLIMIT is kept), so the raised heap goal never applies to a heap that grew past it. 0 turns this off; a GOGC environment variable also does.",
		"log_level":                     "debug, info, warn or error.",
		"membership":                    "How the processes of a job share its partitions: instances (default: fixed, see instance) or group (Kafka's consumer group kafka.group_id assigns them among whoever runs, with the cooperative-sticky assignor; members join and leave a running job; each partition's owner epoch in the ledger fences a member that lost it; librdkafka's heartbeat.interval.ms defaults to a quarter of checkpoint.interval, within 100 ms and 250 ms, unless kafka.properties sets it: each round of a rebalance waits about one heartbeat). To switch a job between instances and group, stop every process of the old layout, then start the new ones: a process of one layout is refused while one of the other holds its fence, and offsets are kept per partition (docs/RUNBOOK.md, \"Switching membership\").",
		"instance":                      "i/M: this process is instance i of M and reads the partitions p with p mod M == i (a StatefulSet ordinal). Each instance has its own fence and runs one subtask (instances share rows, and several branches per instance could wait on each other across instances), so with M > 1 set subtasks to 1: the default 2 is refused. Tags stay unique across instances.",
	}
	envNames = map[string]string{
		"mysql.ledger_dsn":   "RELAY_LEDGER_DSN",
		"kafka.start_offset": "RELAY_START_OFFSET",
	}
)

// yamlOnly are keys a structure is written under, too rich for one variable: they have no
// environment variable, and the environment cannot set them.
var yamlOnly = map[string]bool{"pipeline": true}

// pipelineShape are the keys the default spec is built from: with a pipeline block they would be
// silently ignored, so setting them too is refused.
var pipelineShape = []string{"input.order_id_field", "input.sku_field", "input.amount_field", "input.ts_field", "input.window", "mysql.table"}

// Fields lists every key in struct order.
func Fields() []Field {
	var out []Field
	walk(reflect.ValueOf(&Config{}).Elem(), "", func(key string, _ reflect.Value) {
		out = append(out, Field{Key: key, Env: envOf(key), Doc: docs[key]})
	})
	return out
}

func envOf(key string) string {
	if yamlOnly[key] {
		return ""
	}
	if e, ok := envNames[key]; ok {
		return e
	}
	return "RELAY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

var durationType = reflect.TypeOf(time.Duration(0))
var timeType = reflect.TypeOf(time.Time{})

// walk calls fn for every leaf of the config struct with its YAML path.
func walk(v reflect.Value, prefix string, fn func(string, reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		key := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if prefix != "" {
			key = prefix + "." + key
		}
		f := v.Field(i)
		if f.Kind() == reflect.Struct && f.Type() != timeType {
			walk(f, key, fn)
			continue
		}
		fn(key, f)
	}
}

// Load builds a Config from defaults, then the YAML file (if path is not empty), then the
// environment. Unknown keys in either place are errors that name the key.
func Load(path string, environ []string) (Config, error) {
	c := Default()
	set := map[string]bool{} // keys the file or the environment sets
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		var root yaml.Node
		if yaml.Unmarshal(b, &root) == nil {
			visitKeys("", &root, func(key string, _, _ *yaml.Node) bool { set[key] = true; return true })
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		var te *yaml.TypeError
		if err := dec.Decode(&c); errors.As(err, &te) {
			return c, keyedTypeErrors(path, b, te)
		} else if err != nil && err.Error() != "EOF" {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := c.applyEnv(environ); err != nil {
		return c, err
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		set[name] = true
	}
	if err := c.readPipelineFile(); err != nil {
		return c, err
	}
	if c.Pipeline != nil {
		for _, key := range pipelineShape {
			if set[key] || set[envOf(key)] {
				return c, bad(key, "is set together with pipeline, which names the fields and tables itself: set one of them")
			}
		}
	}
	if err := c.readSecretFiles(); err != nil {
		return c, err
	}
	if c.Kafka.GroupID == "" && c.Job.Name != "" {
		c.Kafka.GroupID = "relay-" + c.Job.Name
	}
	return c, nil
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
func keyedTypeErrors(path string, b []byte, te *yaml.TypeError) error {
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
	return errors.Join(errs...)
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
func (c *Config) readSecretFiles() error {
	if p := c.Kafka.SASLPasswordFile; p != "" {
		if _, ok := c.Kafka.Properties["sasl.password"]; ok {
			return bad("kafka.sasl_password_file", "kafka.properties sets sasl.password too: set it in one place")
		}
		pw, err := readSecret(p)
		if err != nil {
			return bad("kafka.sasl_password_file", "%v", err)
		}
		if c.Kafka.Properties == nil {
			c.Kafka.Properties = map[string]string{}
		}
		c.Kafka.Properties["sasl.password"] = pw
	}
	if p := c.MySQL.PasswordFile; p != "" && c.MySQL.DSN != "" {
		dsn, err := mysql.ParseDSN(c.MySQL.DSN)
		if err != nil {
			return bad("mysql.dsn", "%v", err)
		}
		if dsn.Passwd != "" {
			return bad("mysql.password_file", "mysql.dsn has a password too: set it in one place")
		}
		if dsn.Passwd, err = readSecret(p); err != nil {
			return bad("mysql.password_file", "%v", err)
		}
		c.MySQL.DSN = dsn.FormatDSN()
	}
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

func (c *Config) applyEnv(environ []string) error {
	setters := map[string]reflect.Value{}
	keys := map[string]string{}
	walk(reflect.ValueOf(c).Elem(), "", func(key string, v reflect.Value) {
		if env := envOf(key); env != "" {
			setters[env] = v
			keys[env] = key
		}
	})
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
		if err := setFromString(v, val); err != nil {
			return &FieldError{Key: keys[name], Env: name, Msg: err.Error()}
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("config: %w in environment: %s", ErrUnknownKey, strings.Join(unknown, ", "))
	}
	return nil
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
