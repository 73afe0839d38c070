// Field table: every configuration key, its environment variable and its doc line.
//
// Invariant: a key exists in exactly one place (this table, checked against the struct by a test), so
// the YAML loader, the RELAY_* overrides, docs/CONFIG.md and relay.example.yaml cannot drift apart.

package config

import (
	"reflect"
	"strings"
	"time"
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
		"job.lease":                     "How long this process's ownership of the job lasts past its last renewal (renewed about every second, by the server's clock). A replacement finding the owner silent waits this long, then ends the old owner's MySQL sessions and takes over; an owner that cannot renew stops deciding before it runs out. With membership group the group's session timeout is another thing (6s unless kafka.properties sets session.timeout.ms): a dead member's partitions move after it, while its prepared branches hold their rows until this lease ran out.",
		"job.forget_members_after":      "With membership group: how long a stopped member's lease and owner rows stay after its lease ran out, before a live member's resolver deletes them (every member process start leaves a member behind: a new id, or a static one's earlier epoch). Long enough for relay status to show who ran lately and for a look into one that died; a member with anything in doubt (a checkpoint not COMMITTED, a branch in XA RECOVER) stays until that is settled. relay membership forget deletes stopped members at once. 0: as soon as the lease ran out.",
		"kafka.brokers":                 "Kafka bootstrap servers (host:port): a YAML list or one comma-separated string.",
		"kafka.topics":                  "Topics to consume: a YAML list or one comma-separated string (as in the environment). Every partition is read, new ones are picked up.",
		"kafka.group_id":                "Consumer group: with membership group, the group whose members share the partitions; otherwise only where committed offsets are published for lag tooling. Default relay-<job>: the prefix keeps relay's group apart from other consumers of the topic that happen to use the job's name, and lag tools (KEDA, Burrow) find the job under it.",
		"kafka.group_instance_id":       "Static membership (KIP-345) with membership group: a stable id per member (a StatefulSet pod name). A member restarting with the same id within the group's session timeout (6s unless kafka.properties sets session.timeout.ms: raise it above a pod's usual restart) gets its partitions back without a rebalance; a static member never leaves the group, not even on SIGTERM: its partitions wait for it to come back or for the session timeout. Empty (default): dynamic membership.",
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
		"subtasks":                      "Number of sink writers, each with its own MySQL connection and transaction per checkpoint. Unset, it is 2, or 1 with membership group or instance i/M with M > 1, whose processes share rows and run one each; a value above 1 written out there is refused.",
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
		"input.format":                  "How the default spec's records are encoded: json (one JSON object per record), or avro, protobuf or json_schema (Confluent's wire format, writer schemas from schema_registry.url; json_schema is the JSON text after the header; docs/FORMATS.md). A pipeline block names its own (pipeline.input.format). With a registry format, relay run waits at start until the registry answers for each topic's subject (<topic>-value) and refuses a spec the subject's registered versions cannot give; a registry that stops answering later makes the read wait, never dead-letter a record.",
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
		"input.decoders":                "How many goroutines decode records. 1: the goroutine that reads from librdkafka decodes too. Above 1: that many helpers, each with a decoder of its own (they share one registry client), decode whole batches (up to 512 records) while the reader reads on, and the batches are folded in the order read. 0 (default): half the CPUs Go runs on (GOMAXPROCS, which follows a container's CPU limit), and 2 on 2 CPUs (1 on one), at most 16 (the most it may be set to). Decoding costs about as much CPU per record as reading and folding together; on 2 cores shared with Kafka and MySQL, 2 helpers were 7 % sooner than 1 (docs/BENCHMARKS.md, \"Cores\"). Each helper keeps two more batches (256 KiB of values each) in memory.",
		"schema_registry.url":           "Base URL of a Confluent-compatible Schema Registry API (http or https; Confluent's http://host:8081, Apicurio's http://host:8080/apis/ccompat/v7), where a registry format (input.format avro, protobuf or json_schema) finds each record's writer schema by id. Needed by those; with json it would be asked nothing, so setting it is refused.",
		"schema_registry.username":      "Basic auth user of the registry (Connect's basic.auth.user.info), with schema_registry.password_file.",
		"schema_registry.password_file": "File holding the registry user's password, e.g. a mounted secret; trailing newlines are dropped.",
		"schema_registry.tls_ca_file":   "PEM file of the CA(s) an https registry's certificate must chain to; empty: the system CAs.",
		"schema_registry.tls_cert_file": "Client certificate (PEM) for a registry that requires one; with schema_registry.tls_key_file.",
		"schema_registry.tls_key_file":  "Private key (PEM) of schema_registry.tls_cert_file.",
		"pipeline_file":                 "A YAML file holding the pipeline spec (what the pipeline block holds: input, aggregates), for deployments configured by environment variables (RELAY_PIPELINE_FILE, e.g. a mounted ConfigMap). Not together with pipeline.",
		"pipeline":                      "The pipeline spec (YAML only; from the environment, name a file with pipeline_file): input fields, event time and aggregate tables, see docs/PIPELINES.md. Absent: today's order_stats_minute shape from input.*_field, input.window and mysql.table, which must then not be set.",
		"http_addr":                     "Listen address for /metrics, /healthz and /readyz. The owner records its /readyz URL (a wildcard host as the host name) with its lease, where relay status asks it.",
		"http_pprof":                    "Also serve Go's /debug/pprof profiles on http_addr (off by default: profiles expose internals; enable to diagnose CPU or memory).",
		"startup_wait_timeout":          "How long relay run waits at start for MySQL to answer, a Galera node to be in the primary component, and Kafka to answer for every topic (a topic that does not exist yet is waited for too: another job may create it), each attempt backing off with jitter up to 5s. Meanwhile /healthz answers 200 and /readyz 503 with what it waits for, one warning is logged per attempt and relay_startup_waits_total counts them. 0 (default) waits for as long as it takes, as a sidecar must; past a set bound relay exits 1. Errors no wait cures (access denied, an unknown database, a refused setting) exit at once.",
		"gc_heap_floor_mib":             "Go heap size (MiB) below which relay does not collect garbage: relay's own garbage (each epoch's new keys, its SQL) is small, and with a small heap the collector would still run for it during a checkpoint burst (measured on 2 Dec: 4-6 collections per 2 M orders without the floor, none with it; the Kafka client's per-record garbage, which made it run many times a second, went with the batch reader). Above the floor Go's default applies. While the floor is in effect the Go memory limit is 3 floors (a lower GOMEMLIMIT is kept), so the raised heap goal never applies to a heap that grew past it. 0 turns this off; a GOGC environment variable also does.",
		"log_level":                     "debug, info, warn or error.",
		"membership":                    "How the processes of a job share its partitions: instances (default: fixed, see instance) or group (Kafka's consumer group kafka.group_id assigns them among whoever runs, with the cooperative-sticky assignor; members join and leave a running job; each partition's owner epoch in the ledger fences a member that lost it; librdkafka's heartbeat.interval.ms defaults to a quarter of checkpoint.interval, within 100 ms and 250 ms, unless kafka.properties sets it: each round of a rebalance waits about one heartbeat; the group's session timeout, how long a dead member keeps its partitions, defaults to 6s (the brokers' default minimum: after a burst of deaths every partition moves within two session timeouts) unless kafka.properties sets session.timeout.ms within the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms, else relay exits 2 when it joins; max.poll.interval.ms defaults to the drain bound + 30s). A process of one layout is refused (exit 3) until the job is switched: stop every process of the old layout, run relay membership switch --yes with the new configuration, then start the new ones; offsets are kept per partition (docs/RUNBOOK.md, \"Switching membership\").",
		"instance":                      "i/M: this process is instance i of M and reads the partitions p with p mod M == i (a StatefulSet ordinal). Each instance has its own fence and runs one subtask (instances share rows, and several branches per instance could wait on each other across instances), so with M > 1 an unset subtasks is 1 and a value above 1 is refused. Tags stay unique across instances.",
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
var pipelineShape = []string{"input.format", "input.order_id_field", "input.sku_field", "input.amount_field", "input.ts_field", "input.window", "mysql.table"}

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
		if !t.Field(i).IsExported() {
			continue
		}
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
