// Validation: every rule a Config must keep to run safely, one function per section.
//
// Invariant: Validate reports every refusal at once, each a *FieldError naming its key (YAML path
// and RELAY_* variable) and, for limits, by how much it is off; a check that depends on a key
// already refused is skipped, so one mistake is reported once.

package config

import (
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/spec"
)

var (
	jobNameRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	// A member's id goes into its ledger key (64 characters with the job's) and lock name.
	memberIDRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,20}$`)
	// Table names are spliced into SQL text, so they are held to a conservative identifier grammar.
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// problems collects the refusals of one Validate, in the order of the checks.
type problems []error

func (p *problems) bad(key, format string, args ...any) {
	*p = append(*p, bad(key, format, args...))
}

// refused reports whether a key starting with one of prefixes was refused.
func (p problems) refused(prefixes ...string) bool {
	for _, err := range p {
		var fe *FieldError
		if errors.As(err, &fe) && hasAnyPrefix(fe.Key, prefixes) {
			return true
		}
	}
	return false
}

// Validate refuses a configuration that cannot run safely, with every refusal at once (joined, in
// the order below), so that an operator fixes a file in one round rather than one error per start.
// It first picks the subtasks an unset key means for the layout (pickSubtasks).
func (c *Config) Validate() error {
	c.pickSubtasks()
	var p problems
	c.validateLayout(&p)
	c.validateKafka(&p)
	c.validateMySQL(&p)
	c.validateCheckpoint(&p)
	c.validateInput(&p)
	if !p.refused("input.", "mysql.table") {
		if plan, err := c.Plan(); err != nil {
			p = append(p, err)
		} else {
			c.validateRegistry(&p, plan.InputFormat())
		}
	}
	// The append sink's rows are the default spec's fields (order_id, sku, amount).
	if c.Pipeline != nil && c.MySQL.DetailTable != "" {
		p.bad("mysql.detail_table", "the append sink writes order_id, sku and amount, the default spec's fields: it does not run with a pipeline block")
	}
	if c.StartupWait < 0 {
		p.bad("startup_wait_timeout", "%s is negative (0 waits for as long as it takes)", c.StartupWait)
	}
	if c.GCFloorMiB < 0 || c.GCFloorMiB > 1<<16 {
		p.bad("gc_heap_floor_mib", "%d is outside 0..65536", c.GCFloorMiB)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		p.bad("log_level", "%q is not debug, info, warn or error", c.LogLevel)
	}
	return errors.Join(p...)
}

// pickSubtasks gives subtasks, when neither the file nor the environment set it, the value the
// layout runs: 1 when the job's processes share rows (membership group, or instance i/M with
// M > 1: see validateLayout), else the default. A value written out is kept, and refused there
// when it conflicts. It runs in Validate, after --instance is applied over the file.
func (c *Config) pickSubtasks() {
	if c.set["subtasks"] || c.Subtasks != Default().Subtasks {
		return
	}
	if _, m, err := ParseInstance(c.Instance); c.Membership == MembershipGroup || (err == nil && m > 1) {
		c.Subtasks = 1
	}
}

// validateLayout checks the job's name and how its processes share the partitions: instances,
// membership, subtasks, and the transaction tags they make.
func (c *Config) validateLayout(p *problems) {
	nameOK := jobNameRE.MatchString(c.Job.Name)
	if !nameOK {
		p.bad("job.name", "%q must match [a-z0-9_]{1,32}: it names XA transactions and ledger rows", c.Job.Name)
	}
	_, m, err := ParseInstance(c.Instance)
	if err != nil {
		p.bad("instance", "%v", err)
	}
	switch c.Membership {
	case MembershipInstances:
		if c.Kafka.GroupInstanceID != "" {
			p.bad("kafka.group_instance_id", "is for membership group (%s=group); with instances the partitions are fixed by instance", envOf("membership"))
		}
	case MembershipGroup:
		if id := c.Kafka.GroupInstanceID; id != "" && !memberIDRE.MatchString(id) {
			p.bad("kafka.group_instance_id", "%q must match [A-Za-z0-9_.-]{1,20}: it names the member's ledger rows and lock", id)
		}
		if m > 1 {
			p.bad("membership", "group shares the partitions among the running processes itself: instance (%s) must stay 0/1, not %s", envOf("instance"), c.Instance)
		}
		if c.Subtasks > 1 {
			p.bad("subtasks", "%d with membership group: members share rows, and several branches per member could wait on each other across members: set subtasks to 1 (%s=1) and scale with more members", c.Subtasks, envOf("subtasks"))
		}
		// A revoke's drain blocks the group client's poll; past max.poll.interval.ms librdkafka
		// leaves the group with every partition (relay sets the bound + 30 s unless told).
		if v, set := c.Kafka.Properties["max.poll.interval.ms"]; set {
			if ms, err := strconv.Atoi(v); err == nil && time.Duration(ms)*time.Millisecond < c.Checkpoint.DrainBound() {
				p.bad("kafka.properties", "max.poll.interval.ms=%s is below the drain bound %s (checkpoint.restart_allowance + 5 x checkpoint.timeout + 1s): a revoke's drain may block the group client's poll that long, and past it the member leaves the group with all its partitions; leave it unset or raise it", v, c.Checkpoint.DrainBound())
			}
		}
	default:
		p.bad("membership", "%q is not instances or group", c.Membership)
	}
	// librdkafka refuses a consumer whose session timeout exceeds its max.poll.interval.ms (300 s
	// unless set), and relay's reading consumer runs with kafka.properties too.
	if v, set := c.Kafka.Properties["session.timeout.ms"]; set {
		poll := 300000
		if pv, ok := c.Kafka.Properties["max.poll.interval.ms"]; ok {
			poll, _ = strconv.Atoi(pv)
		}
		if ms, err := strconv.Atoi(v); err == nil && ms > poll {
			p.bad("kafka.properties", "session.timeout.ms=%s is above max.poll.interval.ms (%d): librdkafka refuses it; set max.poll.interval.ms in kafka.properties at least as high", v, poll)
		}
	}
	// Instances own partitions, not keys, so they write the same rows. With one branch per instance
	// a prepared branch never waits, and every wait ends; with several, instance A's branch can wait
	// for B's prepared one while B's waits for A's: a cycle only a lock wait timeout breaks.
	if m > 1 && c.Subtasks > 1 {
		p.bad("subtasks", "%d with instance %s: a job split into instances runs one subtask per instance (several would deadlock across instances on shared rows): set subtasks to 1 (%s=1) and scale with more instances", c.Subtasks, c.Instance, envOf("subtasks"))
	}
	subtasksOK := c.Subtasks >= 1 && c.Subtasks <= 256
	if !subtasksOK {
		p.bad("subtasks", "%d is outside 1..256", c.Subtasks)
	}
	if nameOK && m > 0 && subtasksOK {
		if n := len(commit.MaxTag(c.Job.Name, m*c.Subtasks)); n > commit.MaxTagBytes {
			p.bad("job.name", "transaction tag can reach %d bytes, XA allows %d", n, commit.MaxTagBytes)
		}
	}
}

// validateKafka checks the source.
func (c *Config) validateKafka(p *problems) {
	if strings.TrimSpace(c.Kafka.Brokers.String()) == "" {
		p.bad("kafka.brokers", "is required")
	}
	if len(c.Kafka.Topics) == 0 {
		p.bad("kafka.topics", "at least one topic is required")
	}
	for _, t := range c.Kafka.Topics {
		if t == "" || strings.ContainsAny(t, ", ") {
			p.bad("kafka.topics", "bad topic name %q", t)
		}
	}
	switch c.Kafka.StartOffset {
	case "earliest", "latest":
	default:
		p.bad("kafka.start_offset", "%q is not earliest or latest", c.Kafka.StartOffset)
	}
	if c.Kafka.DiscoveryInterval < time.Second {
		p.bad("kafka.discovery_interval", "%s is below 1s", c.Kafka.DiscoveryInterval)
	}
	// librdkafka would otherwise refuse a property only when the consumer is built, after the fence.
	if err := consumer.CheckProperties(c.Kafka.Properties); err != nil {
		p.bad("kafka.properties", "%v", err)
	}
}

// validateMySQL checks the sink and ledger connections, the tables and the commit mode.
func (c *Config) validateMySQL(p *problems) {
	my := c.MySQL
	if my.DSN == "" {
		p.bad("mysql.dsn", "is required")
	} else if _, err := mysql.ParseDSN(my.DSN); err != nil {
		p.bad("mysql.dsn", "%v", err)
	}
	if my.LedgerDSN != "" {
		if _, err := mysql.ParseDSN(my.LedgerDSN); err != nil {
			p.bad("mysql.ledger_dsn", "%v", err)
		}
	}
	if !identRE.MatchString(my.Table) {
		p.bad("mysql.table", "%q is not a plain identifier", my.Table)
	}
	if !identRE.MatchString(my.DLQTable) {
		p.bad("mysql.dlq_table", "%q is not a plain identifier", my.DLQTable)
	}
	if my.DetailTable != "" && !identRE.MatchString(my.DetailTable) {
		p.bad("mysql.detail_table", "%q is not a plain identifier", my.DetailTable)
	}
	if my.BatchRows < 1 || my.BatchRows > 10000 {
		p.bad("mysql.batch_rows", "%d is outside 1..10000", my.BatchRows)
	}
	if (my.TLSCertFile == "") != (my.TLSKeyFile == "") {
		p.bad("mysql.tls_key_file", "mysql.tls_cert_file and mysql.tls_key_file go together")
	}
	for _, f := range []struct{ key, path string }{{"mysql.tls_ca_file", my.TLSCAFile},
		{"mysql.tls_cert_file", my.TLSCertFile}, {"mysql.tls_key_file", my.TLSKeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			p.bad(f.key, "%v", err)
		}
	}
	if my.LockWait < time.Second {
		p.bad("mysql.lock_wait_timeout", "%s is below 1s", my.LockWait)
	}
	if c.Job.Lease < time.Second || c.Job.Lease >= my.SessionTimeout {
		p.bad("job.lease", "%s must be at least 1s and below mysql.session_timeout (%s)", c.Job.Lease, my.SessionTimeout)
	}
	if c.Job.ForgetMembersAfter < 0 {
		p.bad("job.forget_members_after", "%s is negative", c.Job.ForgetMembersAfter)
	}
	switch c.Mode {
	case commit.ModeXA, commit.ModeHeld, commit.ModeAuto:
	default:
		p.bad("mode", "%q is not xa or held", c.Mode)
	}
	// Held mode commits a subtask's offsets in its data transaction, so on the sink connection, while
	// the fence and recovery read the ledger database: with a separate ledger, recovery would resume
	// from offsets the data never moved (or from stale relay_* tables) and replay committed records.
	if c.Mode == commit.ModeHeld && my.LedgerDSN != "" {
		p.bad("mode", "held keeps the ledger in the sink database (offsets commit with the data): mysql.ledger_dsn (%s) must be empty with it", envOf("mysql.ledger_dsn"))
	}
}

// validateCheckpoint checks the schedule and its relations to MySQL's timeouts.
func (c *Config) validateCheckpoint(p *problems) {
	cp := c.Checkpoint
	if cp.Interval < 10*time.Millisecond {
		p.bad("checkpoint.interval", "%s is below 10ms", cp.Interval)
	}
	if cp.MinPause < 0 || cp.MinPause > cp.Interval {
		p.bad("checkpoint.min_pause", "%s must be between 0 and checkpoint.interval (%s)", cp.MinPause, cp.Interval)
	}
	if cp.IdleAfter != 0 && (cp.IdleAfter < time.Millisecond || cp.IdleAfter > cp.Interval) {
		p.bad("checkpoint.idle_after", "%s must be 0 (off) or between 1ms and checkpoint.interval (%s)", cp.IdleAfter, cp.Interval)
	}
	if cp.Timeout < 100*time.Millisecond {
		p.bad("checkpoint.timeout", "%s is below 100ms", cp.Timeout)
	}
	if cp.TolerableFailures < 0 {
		p.bad("checkpoint.tolerable_failures", "%d is negative", cp.TolerableFailures)
	}
	if cp.RestartAllowance < 0 {
		p.bad("checkpoint.restart_allowance", "%s is negative", cp.RestartAllowance)
	}
	// A session killed for idleness between checkpoints loses its open transaction (held mode) or
	// the XA branch being filled: the timeout must outlast the longest gap relay can leave.
	if need := cp.Interval + cp.Timeout + cp.RestartAllowance; c.MySQL.SessionTimeout <= need {
		p.bad("mysql.session_timeout", "%s must exceed checkpoint.interval + checkpoint.timeout + checkpoint.restart_allowance = %s (short by %s)",
			c.MySQL.SessionTimeout, need, need-c.MySQL.SessionTimeout+time.Second)
	}
	if c.MySQL.LockWait >= cp.Timeout {
		p.bad("mysql.lock_wait_timeout", "%s must be below checkpoint.timeout (%s) so a blocked flush fails inside the checkpoint", c.MySQL.LockWait, cp.Timeout)
	}
	if c.MySQL.StatementTimeout < c.MySQL.LockWait+time.Second {
		p.bad("mysql.statement_timeout", "%s must exceed mysql.lock_wait_timeout (%s) by at least 1s: a statement waiting for a row lock is not a dead connection",
			c.MySQL.StatementTimeout, c.MySQL.LockWait)
	}
	if cp.BufferKeys < 1 {
		p.bad("checkpoint.buffer_keys", "%d must be positive", cp.BufferKeys)
	}
	if cp.ResolveInterval < time.Second {
		p.bad("checkpoint.resolve_interval", "%s is below 1s", cp.ResolveInterval)
	}
	if cp.ReadyMaxAge <= cp.Interval {
		p.bad("checkpoint.ready_max_age", "%s must exceed checkpoint.interval (%s)", cp.ReadyMaxAge, cp.Interval)
	}
}

// validateRegistry checks the schema_registry.* settings against the plan's input format: a
// registry format needs a registry the client can be made for (its TLS files are read then), and
// JSON needs none.
func (c *Config) validateRegistry(p *problems, inputFormat string) {
	r := c.SchemaRegistry
	formatKey := "input.format"
	if c.Pipeline != nil {
		formatKey = "pipeline.input.format"
	}
	if inputFormat == spec.FormatJSON {
		for _, f := range []struct{ key, v string }{{"schema_registry.url", r.URL}, {"schema_registry.username", r.Username},
			{"schema_registry.password_file", r.PasswordFile}, {"schema_registry.tls_ca_file", r.TLSCAFile},
			{"schema_registry.tls_cert_file", r.TLSCertFile}, {"schema_registry.tls_key_file", r.TLSKeyFile}} {
			if f.v != "" {
				p.bad(f.key, "is set, but %s is json, which reads no registry", formatKey)
			}
		}
		return
	}
	switch {
	case r.URL == "":
		p.bad("schema_registry.url", "is required: %s %s finds writer schemas in a Schema Registry", formatKey, inputFormat)
	case (r.Username == "") != (r.PasswordFile == ""):
		p.bad("schema_registry.username", "and schema_registry.password_file go together")
	case (r.TLSCertFile == "") != (r.TLSKeyFile == ""):
		p.bad("schema_registry.tls_cert_file", "and schema_registry.tls_key_file go together")
	default:
		if _, err := format.NewRegistry(c.Registry()); err != nil {
			p.bad("schema_registry.url", "%v", err)
		}
	}
}

// validateInput checks the record contract.
func (c *Config) validateInput(p *problems) {
	in := c.Input
	switch in.Format {
	case spec.FormatJSON, spec.FormatAvro, spec.FormatProtobuf, spec.FormatJSONSchema:
	default:
		p.bad("input.format", "%q is not json, avro, protobuf or json_schema", in.Format)
	}
	for _, f := range []struct{ key, v string }{{"input.order_id_field", in.OrderIDField}, {"input.sku_field", in.SKUField},
		{"input.amount_field", in.AmountField}, {"input.ts_field", in.TSField}} {
		if f.v == "" {
			p.bad(f.key, "must not be empty")
		}
	}
	if in.Window < time.Second || time.Hour*24%in.Window != 0 {
		p.bad("input.window", "%s must be at least 1s and divide a day", in.Window)
	}
	switch in.BadInputPolicy {
	case "dlq", "skip", "fail":
	default:
		p.bad("input.bad_input_policy", "%q is not dlq, skip or fail", in.BadInputPolicy)
	}
	if in.MaxPayloadBytes < 64 {
		p.bad("input.max_payload_bytes", "%d is below 64", in.MaxPayloadBytes)
	}
	if in.DLQPayloadBytes < 0 || in.DLQPayloadBytes > 65535 {
		p.bad("input.dlq_payload_bytes", "%d is outside 0..65535", in.DLQPayloadBytes)
	}
	if in.Decoders < 0 || in.Decoders > maxDecoders {
		p.bad("input.decoders", "%d is outside 0..%d", in.Decoders, maxDecoders)
	}
	// DATETIME holds years 1000..9999; a window outside it cannot be stored.
	lo, hi := time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	if in.MinEventTime.Before(lo) || !in.MinEventTime.Before(in.MaxEventTime) {
		p.bad("input.min_event_time", "%s must be after %s and before input.max_event_time", in.MinEventTime, lo)
	}
	if in.MaxEventTime.After(hi) {
		p.bad("input.max_event_time", "%s is past what DATETIME holds (%s)", in.MaxEventTime, hi)
	}
}
