// Field table: every configuration key, its environment variable and its doc line.
//
// Invariant: a key exists in exactly one place (this table, checked against the struct by a test), so
// the YAML loader, the RELAY_* overrides and docs/CONFIG.md cannot drift apart.
package config

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
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
		"kafka.group_id":                "Consumer group used only to publish committed offsets for lag tooling; default relay-<job>.",
		"kafka.start_offset":            "earliest or latest: where to start partitions the ledger has no offset for (first run only).",
		"kafka.commit_group_offsets":    "After each committed checkpoint, also commit its offsets to the consumer group (for lag tools; relay never reads them back).",
		"kafka.discovery_interval":      "How often to look for new partitions of the topics.",
		"kafka.properties":              "Extra librdkafka properties (security.protocol, sasl.*, ssl.* ...); in the environment as k=v,k=v. Keys relay owns are refused.",
		"mysql.dsn":                     "go-sql-driver DSN of the sink database, e.g. relay:secret@tcp(mysql:3306)/relay?tls=true.",
		"mysql.ledger_dsn":              "DSN of the ledger database; empty means the sink database.",
		"mysql.table":                   "Aggregate table (window_start, sku, order_count, amount_sum); created if missing.",
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
		"mode":                          "xa (XA two-phase commit, the default) or held (one ordinary transaction per subtask, for MySQL without XA).",
		"subtasks":                      "Number of sink writers, each with its own MySQL connection and transaction per checkpoint.",
		"checkpoint.interval":           "Time between checkpoints (Go duration). Data becomes visible in MySQL at checkpoints.",
		"checkpoint.min_pause":          "Minimum pause between the end of one checkpoint and the start of the next.",
		"checkpoint.idle_after":         "Also cut a checkpoint once no record has arrived for this long (still honouring min_pause), so when traffic pauses what was read becomes visible without waiting out the interval; 0 turns it off.",
		"checkpoint.timeout":            "A checkpoint not committed within this time fails and is rolled back.",
		"checkpoint.tolerable_failures": "In-process restarts in a row without a committed checkpoint (failed checkpoints, lost MySQL connections, a MySQL or broker restart, the fence lost) tolerated before relay exits non-zero; restarts back off with jitter from 200ms to 10s.",
		"checkpoint.restart_allowance":  "How long a restart may take; part of the session-timeout rule.",
		"checkpoint.buffer_keys":        "Distinct (window, sku) keys a subtask buffers before flushing early into the open transaction.",
		"checkpoint.resolve_interval":   "How often the resolver looks for this job's left-behind XA branches.",
		"checkpoint.in_doubt_alert_age": "Age past which an in-doubt branch of this job is flagged (relay_xa_in_doubt_oldest_age_seconds).",
		"checkpoint.ready_max_age":      "/readyz fails when the last successful checkpoint is older than this.",
		"input.order_id_field":          "JSON field holding the order id.",
		"input.sku_field":               "JSON field holding the sku.",
		"input.amount_field":            "JSON field holding the amount (decimal string or number).",
		"input.ts_field":                "JSON field holding the event time in epoch milliseconds.",
		"input.window":                  "Tumbling window size for order_stats_minute (must divide a day).",
		"input.bad_input_policy":        "dlq (write bad records to the dead-letter table, default), skip (count only) or fail (stop).",
		"input.max_payload_bytes":       "Records larger than this are bad input (too_large).",
		"input.min_event_time":          "Earliest plausible event time (RFC 3339); older is bad input.",
		"input.max_event_time":          "Event times at or after this (RFC 3339) are bad input.",
		"input.dlq_payload_bytes":       "Bytes of a bad record's payload kept in the dead-letter table.",
		"http_addr":                     "Listen address for /metrics, /healthz and /readyz.",
		"http_pprof":                    "Also serve Go's /debug/pprof profiles on http_addr (off by default: profiles expose internals; enable to diagnose CPU or memory).",
		"gc_heap_floor_mib":             "Go heap size (MiB) below which relay does not collect garbage: the Kafka client makes a few hundred bytes of garbage per record, and with a small heap the collector would run many times a second. Above the floor Go's default applies. While the floor is in effect the Go memory limit is 3 floors (a lower GOMEMLIMIT is kept), so the raised heap goal never applies to a heap that grew past it. 0 turns this off; a GOGC environment variable also does.",
		"log_level":                     "debug, info, warn or error.",
		"instance":                      "i/M: this process is instance i of M and reads the partitions p with p mod M == i (a StatefulSet ordinal). Each instance has its own fence and runs one subtask (instances share rows, and several branches per instance could wait on each other across instances); tags stay unique across instances.",
	}
	envNames = map[string]string{
		"mysql.ledger_dsn":   "RELAY_LEDGER_DSN",
		"kafka.start_offset": "RELAY_START_OFFSET",
	}
)

// Fields lists every key in struct order.
func Fields() []Field {
	var out []Field
	walk(reflect.ValueOf(&Config{}).Elem(), "", func(key string, _ reflect.Value) {
		out = append(out, Field{Key: key, Env: envOf(key), Doc: docs[key]})
	})
	return out
}

func envOf(key string) string {
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
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && err.Error() != "EOF" {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := c.applyEnv(environ); err != nil {
		return c, err
	}
	if c.Kafka.GroupID == "" && c.Job.Name != "" {
		c.Kafka.GroupID = "relay-" + c.Job.Name
	}
	return c, nil
}

// Reserved prefixes belong to the test harness and services script, not to relay's configuration.
var reservedEnvPrefixes = []string{"RELAY_TEST_", "RELAY_SVC_", "RELAY_CRASH"}

func (c *Config) applyEnv(environ []string) error {
	setters := map[string]reflect.Value{}
	keys := map[string]string{}
	walk(reflect.ValueOf(c).Elem(), "", func(key string, v reflect.Value) {
		setters[envOf(key)] = v
		keys[envOf(key)] = key
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
		var parts []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	case v.Kind() == reflect.Map:
		m := map[string]string{}
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			k, val, ok := strings.Cut(p, "=")
			if !ok {
				return fmt.Errorf("%q is not k=v", p)
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
		v.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}
