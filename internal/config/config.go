// Package config holds relay's one configuration struct.
//
// Invariant: a Config that passed Validate can run; every refusal names the offending key (its YAML
// path and its RELAY_* variable) and, for limits, by how much it is off. The field table in fields.go
// is the single description of every key: YAML, environment override and docs/CONFIG.md come from it.
package config

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/spec"
)

// ResolveMode fixes the mode for the server relay talks to (galera: it is a Galera node). An unset
// mode becomes held on Galera (picked reports it) and xa elsewhere; mode xa on Galera is refused at
// once, naming held mode: Galera refuses XA (error 1235) and every checkpoint would fail.
func (c *Config) ResolveMode(galera bool) (picked bool, err error) {
	switch {
	case c.Mode == commit.ModeXA && galera:
		return false, bad("mode", "xa is not possible on a Galera cluster (MariaDB Galera / Percona XtraDB Cluster refuse XA transactions, error 1235): "+
			"use mode held (%s=held), or leave mode unset, which picks held on Galera", envOf("mode"))
	case c.Mode == commit.ModeAuto && galera:
		c.Mode, picked = commit.ModeHeld, true
		if c.MySQL.LedgerDSN != "" {
			return true, bad("mode", "unset, so held on this Galera node, which keeps the ledger in the sink database: mysql.ledger_dsn (%s) must be empty", envOf("mysql.ledger_dsn"))
		}
	case c.Mode == commit.ModeAuto:
		c.Mode = commit.ModeXA
	}
	return picked, nil
}

// MySQLTLS is the TLS of relay's MySQL connections (zero: the DSN decides).
func (c Config) MySQLTLS() database.TLS {
	return database.TLS{CAFile: c.MySQL.TLSCAFile, CertFile: c.MySQL.TLSCertFile,
		KeyFile: c.MySQL.TLSKeyFile, ServerName: c.MySQL.TLSServerName}
}

// SinkSession is what every connection of the sink pool gets (the ledger's too when it shares the
// sink): the timeouts, TLS, and READ COMMITTED (see database.Session.ReadCommitted).
func (c Config) SinkSession() database.Session {
	s := c.LedgerSession()
	s.ReadCommitted = true
	return s
}

// Commit is the commit protocol's settings.
func (c Config) Commit() commit.Settings {
	return commit.Settings{Job: c.Job.Name, BatchRows: c.MySQL.BatchRows, LockWait: c.MySQL.LockWait,
		CheckpointTimeout: c.Checkpoint.Timeout, ResolveInterval: c.Checkpoint.ResolveInterval,
		InDoubtAlertAge: c.Checkpoint.InDoubtAlertAge, ForgetMembersAfter: c.Job.ForgetMembersAfter}
}

// LedgerSession is what the connections of a separate ledger server (mysql.ledger_dsn) get: the
// server's default isolation, since the ledger writes a few rows of one job at a time. On a Galera
// node both run with causal reads (database.Session.CausalReads).
func (c Config) LedgerSession() database.Session {
	return database.Session{WaitTimeout: c.MySQL.SessionTimeout, LockWaitTimeout: c.MySQL.LockWait, TLS: c.MySQLTLS(),
		StatementTimeout: c.MySQL.StatementTimeout, CausalReads: true}
}

// Config is everything relay run needs. Field docs are in fields.go (and docs/CONFIG.md).
type Config struct {
	Job        Job         `yaml:"job"`
	Kafka      Kafka       `yaml:"kafka"`
	MySQL      MySQL       `yaml:"mysql"`
	Mode       commit.Mode `yaml:"mode"`
	Subtasks   int         `yaml:"subtasks"`
	Checkpoint Checkpoint  `yaml:"checkpoint"`
	Input      Input       `yaml:"input"`
	// Pipeline is the shape of records and aggregate tables; nil means spec.Default of input.* and
	// mysql.table (see Plan).
	Pipeline *spec.Spec `yaml:"pipeline"`
	// PipelineFile holds the pipeline block in a file of its own (a mounted ConfigMap), so that a
	// deployment configured by environment variables alone can run a spec too.
	PipelineFile string `yaml:"pipeline_file"`
	HTTPAddr     string `yaml:"http_addr"`
	HTTPPprof    bool   `yaml:"http_pprof"`
	// StartupWait bounds how long relay run waits at start for MySQL, Kafka and a primary Galera
	// component; 0 waits for as long as it takes (a sidecar starts in any order).
	StartupWait time.Duration `yaml:"startup_wait_timeout"`
	LogLevel    string        `yaml:"log_level"`
	Instance    string        `yaml:"instance"`
	Membership  string        `yaml:"membership"`
	GCFloorMiB  int           `yaml:"gc_heap_floor_mib"`
}

// Job names the pipeline.
type Job struct {
	Name  string        `yaml:"name"`
	Lease time.Duration `yaml:"lease"`
	// ForgetMembersAfter is how long a stopped group member's lease and owner rows stay once its
	// lease ran out (ledger.ForgetMembers): every member process start leaves one key behind.
	ForgetMembersAfter time.Duration `yaml:"forget_members_after"`
}

// Kafka is the source.
type Kafka struct {
	Brokers            string            `yaml:"brokers"`
	Topics             []string          `yaml:"topics"`
	GroupID            string            `yaml:"group_id"`
	GroupInstanceID    string            `yaml:"group_instance_id"`
	StartOffset        string            `yaml:"start_offset"`
	CommitGroupOffsets bool              `yaml:"commit_group_offsets"`
	DiscoveryInterval  time.Duration     `yaml:"discovery_interval"`
	Properties         map[string]string `yaml:"properties"`
	SASLPasswordFile   string            `yaml:"sasl_password_file"`
}

// MySQL is the sink and, by default, the ledger.
type MySQL struct {
	DSN              string        `yaml:"dsn"`
	PasswordFile     string        `yaml:"password_file"`
	LedgerDSN        string        `yaml:"ledger_dsn"`
	Table            string        `yaml:"table"`
	DLQTable         string        `yaml:"dlq_table"`
	DetailTable      string        `yaml:"detail_table"`
	SessionTimeout   time.Duration `yaml:"session_timeout"`
	LockWait         time.Duration `yaml:"lock_wait_timeout"`
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	BatchRows        int           `yaml:"batch_rows"`
	TLSCAFile        string        `yaml:"tls_ca_file"`
	TLSCertFile      string        `yaml:"tls_cert_file"`
	TLSKeyFile       string        `yaml:"tls_key_file"`
	TLSServerName    string        `yaml:"tls_server_name"`
}

// Checkpoint is the coordinator's schedule.
type Checkpoint struct {
	Interval          time.Duration `yaml:"interval"`
	MinPause          time.Duration `yaml:"min_pause"`
	IdleAfter         time.Duration `yaml:"idle_after"`
	Timeout           time.Duration `yaml:"timeout"`
	TolerableFailures int           `yaml:"tolerable_failures"`
	RestartAllowance  time.Duration `yaml:"restart_allowance"`
	BufferKeys        int           `yaml:"buffer_keys"`
	ResolveInterval   time.Duration `yaml:"resolve_interval"`
	InDoubtAlertAge   time.Duration `yaml:"in_doubt_alert_age"`
	ReadyMaxAge       time.Duration `yaml:"ready_max_age"`
}

// Input is the record contract.
type Input struct {
	OrderIDField    string        `yaml:"order_id_field"`
	SKUField        string        `yaml:"sku_field"`
	AmountField     string        `yaml:"amount_field"`
	TSField         string        `yaml:"ts_field"`
	Window          time.Duration `yaml:"window"`
	BadInputPolicy  string        `yaml:"bad_input_policy"`
	MaxPayloadBytes int           `yaml:"max_payload_bytes"`
	MinEventTime    time.Time     `yaml:"min_event_time"`
	MaxEventTime    time.Time     `yaml:"max_event_time"`
	DLQPayloadBytes int           `yaml:"dlq_payload_bytes"`
}

// Default returns the configuration every unset key falls back to.
func Default() Config {
	return Config{
		Job: Job{Lease: 10 * time.Second, ForgetMembersAfter: 24 * time.Hour},
		Kafka: Kafka{
			StartOffset:        "earliest",
			CommitGroupOffsets: true,
			DiscoveryInterval:  30 * time.Second,
		},
		MySQL: MySQL{
			Table:            "order_stats_minute",
			DLQTable:         "relay_dlq",
			SessionTimeout:   10 * time.Minute,
			LockWait:         50 * time.Second,
			StatementTimeout: time.Minute,
			BatchRows:        500,
		},
		Mode:     commit.ModeAuto,
		Subtasks: 2,
		Checkpoint: Checkpoint{
			Interval:          time.Second,
			MinPause:          0,
			IdleAfter:         100 * time.Millisecond,
			Timeout:           time.Minute,
			TolerableFailures: 10,
			RestartAllowance:  2 * time.Minute,
			BufferKeys:        100000,
			ResolveInterval:   30 * time.Second,
			InDoubtAlertAge:   5 * time.Minute,
			ReadyMaxAge:       2 * time.Minute,
		},
		Input: Input{
			OrderIDField:    "order_id",
			SKUField:        "sku",
			AmountField:     "amount",
			TSField:         "ts",
			Window:          time.Minute,
			BadInputPolicy:  "dlq",
			MaxPayloadBytes: 64 << 10,
			MinEventTime:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
			MaxEventTime:    time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
			DLQPayloadBytes: 4096,
		},
		HTTPAddr:   ":8080",
		LogLevel:   "info",
		GCFloorMiB: 128,
		Instance:   "0/1",
		Membership: MembershipInstances,
	}
}

var (
	jobNameRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	// A member's id goes into its ledger key (64 characters with the job's) and lock name.
	memberIDRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,20}$`)
	// Table names are spliced into SQL text, so they are held to a conservative identifier grammar.
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// FieldError names the key a Validate refusal is about.
type FieldError struct {
	Key string // YAML path, e.g. checkpoint.interval
	Env string // RELAY_* variable, when it has one
	Msg string
}

func (e *FieldError) Error() string {
	if e.Env != "" {
		return fmt.Sprintf("config %s (%s): %s", e.Key, e.Env, e.Msg)
	}
	return fmt.Sprintf("config %s: %s", e.Key, e.Msg)
}

func bad(key, format string, args ...any) error {
	return &FieldError{Key: key, Env: envOf(key), Msg: fmt.Sprintf(format, args...)}
}

// Validate refuses a configuration that cannot run safely. The first refusal wins, so the operator
// fixes one thing at a time with an exact message.
func (c *Config) Validate() error {
	if !jobNameRE.MatchString(c.Job.Name) {
		return bad("job.name", "%q must match [a-z0-9_]{1,32}: it names XA transactions and ledger rows", c.Job.Name)
	}
	_, m, err := ParseInstance(c.Instance)
	if err != nil {
		return bad("instance", "%v", err)
	}
	switch c.Membership {
	case MembershipInstances:
		if c.Kafka.GroupInstanceID != "" {
			return bad("kafka.group_instance_id", "is for membership group (%s=group); with instances the partitions are fixed by instance", envOf("membership"))
		}
	case MembershipGroup:
		if id := c.Kafka.GroupInstanceID; id != "" && !memberIDRE.MatchString(id) {
			return bad("kafka.group_instance_id", "%q must match [A-Za-z0-9_.-]{1,20}: it names the member's ledger rows and lock", id)
		}
		if m > 1 {
			return bad("membership", "group shares the partitions among the running processes itself: instance (%s) must stay 0/1, not %s", envOf("instance"), c.Instance)
		}
		if c.Subtasks > 1 {
			return bad("subtasks", "%d with membership group: members share rows, and several branches per member could wait on each other across members: set subtasks to 1 (%s=1) and scale with more members", c.Subtasks, envOf("subtasks"))
		}
	default:
		return bad("membership", "%q is not instances or group", c.Membership)
	}
	// Instances own partitions, not keys, so they write the same rows. With one branch per instance
	// a prepared branch never waits, and every wait ends; with several, instance A's branch can wait
	// for B's prepared one while B's waits for A's: a cycle only a lock wait timeout breaks.
	if m > 1 && c.Subtasks > 1 {
		return bad("subtasks", "%d with instance %s: a job split into instances runs one subtask per instance (several would deadlock across instances on shared rows): set subtasks to 1 (%s=1) and scale with more instances", c.Subtasks, c.Instance, envOf("subtasks"))
	}
	if n := len(commit.MaxTag(c.Job.Name, m*c.Subtasks)); n > commit.MaxTagBytes {
		return bad("job.name", "transaction tag can reach %d bytes, XA allows %d", n, commit.MaxTagBytes)
	}
	if strings.TrimSpace(c.Kafka.Brokers) == "" {
		return bad("kafka.brokers", "is required")
	}
	if len(c.Kafka.Topics) == 0 {
		return bad("kafka.topics", "at least one topic is required")
	}
	for _, t := range c.Kafka.Topics {
		if t == "" || strings.ContainsAny(t, ", ") {
			return bad("kafka.topics", "bad topic name %q", t)
		}
	}
	switch c.Kafka.StartOffset {
	case "earliest", "latest":
	default:
		return bad("kafka.start_offset", "%q is not earliest or latest", c.Kafka.StartOffset)
	}
	if c.Kafka.DiscoveryInterval < time.Second {
		return bad("kafka.discovery_interval", "%s is below 1s", c.Kafka.DiscoveryInterval)
	}
	// librdkafka would otherwise refuse a property only when the consumer is built, after the fence.
	if err := consumer.CheckProperties(c.Kafka.Properties); err != nil {
		return bad("kafka.properties", "%v", err)
	}
	if c.MySQL.DSN == "" {
		return bad("mysql.dsn", "is required")
	}
	if _, err := mysql.ParseDSN(c.MySQL.DSN); err != nil {
		return bad("mysql.dsn", "%v", err)
	}
	if c.MySQL.LedgerDSN != "" {
		if _, err := mysql.ParseDSN(c.MySQL.LedgerDSN); err != nil {
			return bad("mysql.ledger_dsn", "%v", err)
		}
	}
	if !identRE.MatchString(c.MySQL.Table) {
		return bad("mysql.table", "%q is not a plain identifier", c.MySQL.Table)
	}
	if !identRE.MatchString(c.MySQL.DLQTable) {
		return bad("mysql.dlq_table", "%q is not a plain identifier", c.MySQL.DLQTable)
	}
	if c.MySQL.DetailTable != "" && !identRE.MatchString(c.MySQL.DetailTable) {
		return bad("mysql.detail_table", "%q is not a plain identifier", c.MySQL.DetailTable)
	}
	if c.MySQL.BatchRows < 1 || c.MySQL.BatchRows > 10000 {
		return bad("mysql.batch_rows", "%d is outside 1..10000", c.MySQL.BatchRows)
	}
	if (c.MySQL.TLSCertFile == "") != (c.MySQL.TLSKeyFile == "") {
		return bad("mysql.tls_key_file", "mysql.tls_cert_file and mysql.tls_key_file go together")
	}
	for _, f := range []struct{ key, path string }{{"mysql.tls_ca_file", c.MySQL.TLSCAFile},
		{"mysql.tls_cert_file", c.MySQL.TLSCertFile}, {"mysql.tls_key_file", c.MySQL.TLSKeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return bad(f.key, "%v", err)
		}
	}
	if c.MySQL.LockWait < time.Second {
		return bad("mysql.lock_wait_timeout", "%s is below 1s", c.MySQL.LockWait)
	}
	if c.Job.Lease < time.Second || c.Job.Lease >= c.MySQL.SessionTimeout {
		return bad("job.lease", "%s must be at least 1s and below mysql.session_timeout (%s)", c.Job.Lease, c.MySQL.SessionTimeout)
	}
	if c.Job.ForgetMembersAfter < 0 {
		return bad("job.forget_members_after", "%s is negative", c.Job.ForgetMembersAfter)
	}
	switch c.Mode {
	case commit.ModeXA, commit.ModeHeld, commit.ModeAuto:
	default:
		return bad("mode", "%q is not xa or held", c.Mode)
	}
	// Held mode commits a subtask's offsets in its data transaction, so on the sink connection, while
	// the fence and recovery read the ledger database: with a separate ledger, recovery would resume
	// from offsets the data never moved (or from stale relay_* tables) and replay committed records.
	if c.Mode == commit.ModeHeld && c.MySQL.LedgerDSN != "" {
		return bad("mode", "held keeps the ledger in the sink database (offsets commit with the data): mysql.ledger_dsn (%s) must be empty with it", envOf("mysql.ledger_dsn"))
	}
	if c.Subtasks < 1 || c.Subtasks > 256 {
		return bad("subtasks", "%d is outside 1..256", c.Subtasks)
	}
	cp := c.Checkpoint
	if cp.Interval < 10*time.Millisecond {
		return bad("checkpoint.interval", "%s is below 10ms", cp.Interval)
	}
	if cp.MinPause < 0 || cp.MinPause > cp.Interval {
		return bad("checkpoint.min_pause", "%s must be between 0 and checkpoint.interval (%s)", cp.MinPause, cp.Interval)
	}
	if cp.IdleAfter != 0 && (cp.IdleAfter < time.Millisecond || cp.IdleAfter > cp.Interval) {
		return bad("checkpoint.idle_after", "%s must be 0 (off) or between 1ms and checkpoint.interval (%s)", cp.IdleAfter, cp.Interval)
	}
	if cp.Timeout < 100*time.Millisecond {
		return bad("checkpoint.timeout", "%s is below 100ms", cp.Timeout)
	}
	if cp.TolerableFailures < 0 {
		return bad("checkpoint.tolerable_failures", "%d is negative", cp.TolerableFailures)
	}
	if cp.RestartAllowance < 0 {
		return bad("checkpoint.restart_allowance", "%s is negative", cp.RestartAllowance)
	}
	// A session killed for idleness between checkpoints loses its open transaction (held mode) or
	// the XA branch being filled: the timeout must outlast the longest gap relay can leave.
	if need := cp.Interval + cp.Timeout + cp.RestartAllowance; c.MySQL.SessionTimeout <= need {
		return bad("mysql.session_timeout", "%s must exceed checkpoint.interval + checkpoint.timeout + checkpoint.restart_allowance = %s (short by %s)",
			c.MySQL.SessionTimeout, need, need-c.MySQL.SessionTimeout+time.Second)
	}
	if c.MySQL.LockWait >= cp.Timeout {
		return bad("mysql.lock_wait_timeout", "%s must be below checkpoint.timeout (%s) so a blocked flush fails inside the checkpoint", c.MySQL.LockWait, cp.Timeout)
	}
	if c.MySQL.StatementTimeout < c.MySQL.LockWait+time.Second {
		return bad("mysql.statement_timeout", "%s must exceed mysql.lock_wait_timeout (%s) by at least 1s: a statement waiting for a row lock is not a dead connection",
			c.MySQL.StatementTimeout, c.MySQL.LockWait)
	}
	if cp.BufferKeys < 1 {
		return bad("checkpoint.buffer_keys", "%d must be positive", cp.BufferKeys)
	}
	if cp.ResolveInterval < time.Second {
		return bad("checkpoint.resolve_interval", "%s is below 1s", cp.ResolveInterval)
	}
	if cp.ReadyMaxAge <= cp.Interval {
		return bad("checkpoint.ready_max_age", "%s must exceed checkpoint.interval (%s)", cp.ReadyMaxAge, cp.Interval)
	}
	in := c.Input
	for key, v := range map[string]string{"input.order_id_field": in.OrderIDField, "input.sku_field": in.SKUField,
		"input.amount_field": in.AmountField, "input.ts_field": in.TSField} {
		if v == "" {
			return bad(key, "must not be empty")
		}
	}
	if in.Window < time.Second || time.Hour*24%in.Window != 0 {
		return bad("input.window", "%s must be at least 1s and divide a day", in.Window)
	}
	switch in.BadInputPolicy {
	case "dlq", "skip", "fail":
	default:
		return bad("input.bad_input_policy", "%q is not dlq, skip or fail", in.BadInputPolicy)
	}
	if in.MaxPayloadBytes < 64 {
		return bad("input.max_payload_bytes", "%d is below 64", in.MaxPayloadBytes)
	}
	if in.DLQPayloadBytes < 0 || in.DLQPayloadBytes > 65535 {
		return bad("input.dlq_payload_bytes", "%d is outside 0..65535", in.DLQPayloadBytes)
	}
	// DATETIME holds years 1000..9999; a window outside it cannot be stored.
	lo, hi := time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	if in.MinEventTime.Before(lo) || !in.MinEventTime.Before(in.MaxEventTime) {
		return bad("input.min_event_time", "%s must be after %s and before input.max_event_time", in.MinEventTime, lo)
	}
	if in.MaxEventTime.After(hi) {
		return bad("input.max_event_time", "%s is past what DATETIME holds (%s)", in.MaxEventTime, hi)
	}
	if _, err := c.Plan(); err != nil {
		return err
	}
	// The append sink's rows are the default spec's fields (order_id, sku, amount).
	if c.Pipeline != nil && c.MySQL.DetailTable != "" {
		return bad("mysql.detail_table", "the append sink writes order_id, sku and amount, the default spec's fields: it does not run with a pipeline block")
	}
	if c.StartupWait < 0 {
		return bad("startup_wait_timeout", "%s is negative (0 waits for as long as it takes)", c.StartupWait)
	}
	if c.GCFloorMiB < 0 || c.GCFloorMiB > 1<<16 {
		return bad("gc_heap_floor_mib", "%d is outside 0..65536", c.GCFloorMiB)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("log_level", "%q is not debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// Plan compiles the pipeline spec: the pipeline block, or without one the default spec built from
// input.*_field, input.window and mysql.table (so every RELAY_INPUT_* variable keeps working). The
// record limits come from input.* either way. Errors name the key (pipeline.aggregates[0].window).
func (c *Config) Plan() (*spec.Plan, error) {
	in := c.Input
	lim := order.DefaultLimits()
	lim.MaxPayloadBytes = in.MaxPayloadBytes
	lim.MinTS, lim.MaxTS = in.MinEventTime.UnixMilli(), in.MaxEventTime.UnixMilli()
	if c.Pipeline == nil {
		s := spec.Default(order.Fields{OrderID: in.OrderIDField, SKU: in.SKUField, Amount: in.AmountField, TS: in.TSField},
			lim, c.MySQL.Table, in.Window)
		return spec.Compile(s)
	}
	return c.Pipeline.Compile(spec.Limits{MaxPayloadBytes: lim.MaxPayloadBytes, MinTS: lim.MinTS, MaxTS: lim.MaxTS, MaxUnits: lim.MaxAmountUnits})
}

// Membership values: how the processes of a job share its partitions.
const (
	MembershipInstances = "instances" // fixed: instance i of M reads p mod M == i
	MembershipGroup     = "group"     // Kafka's consumer group assigns them among whoever runs
)

// GroupSessionTimeout is the consumer group's session timeout: kafka.properties session.timeout.ms,
// else librdkafka's default (45 s).
func (c *Config) GroupSessionTimeout() time.Duration {
	if ms, err := strconv.Atoi(c.Kafka.Properties["session.timeout.ms"]); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 45 * time.Second
}

// DrainBound is the longest a session can take to drain, with every step within its deadline: to
// release partitions the group revoked (a member's revoke waits this long at most before it is
// acknowledged anyway, membership.Options.Drain), and to stop on SIGTERM (the grace period a
// deployment must give a process, terminationGracePeriodSeconds in deploy/k8s). A step past its
// deadline fails the session instead, and the partitions' owner epochs refuse its late decisions.
//
// From the code, with T = checkpoint.timeout:
//   - A checkpoint takes up to 2T (commit.Coordinator): its barrier phase (the subtasks' flush and
//     prepare, then the ledger decision) within T, its commit phase (the branches' commits and
//     the committed mark) within another T. Held mode's one phase takes up to T.
//   - The drain (pipeline loop.go) waits for the checkpoint in flight (2T), cuts the open epoch,
//     which reserves a new block of checkpoint ids within T when the block ran out (one in a
//     thousand cuts: the drain's or the one just before it, never both), and waits for its own
//     checkpoint (2T): 5T.
//   - The loop takes a revoke or SIGTERM only between two events. The longest event is a move of
//     partitions granted earlier (pipeline group.go add): it waits for the checkpoint in flight
//     (2T, which the drain then need not), then takes the partitions and assigns them within
//     restart_allowance. A session starting (recovery and its first take) takes up to
//     restart_allowance too, and has no checkpoint in flight.
//
// Hence restart_allowance + 5T, plus drainSlack for the steps no deadline bounds (folding the
// batches in hand when the poll stops, unassigning the released partitions: milliseconds).
func (cp Checkpoint) DrainBound() time.Duration {
	return cp.RestartAllowance + 5*cp.Timeout + drainSlack
}

// drainSlack is DrainBound's margin for the untimed steps of a drain.
const drainSlack = time.Second

// Group reports whether the job's processes share its partitions through the consumer group.
func (c *Config) Group() bool { return c.Membership == MembershipGroup }

// ParseInstance reads "i/M": this process is instance i of M, owning partitions p with p mod M == i.
func ParseInstance(s string) (i, m int, err error) {
	is, ms, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(is)
	m, err2 := strconv.Atoi(ms)
	if !ok || err1 != nil || err2 != nil || m < 1 || m > 1024 || i < 0 || i >= m {
		return 0, 0, fmt.Errorf("%q is not i/M with 0 <= i < M <= 1024", s)
	}
	return i, m, nil
}

// InstanceIndex and InstanceCount are the parsed instance (valid after Validate).
func (c *Config) InstanceIndex() int { i, _, _ := ParseInstance(c.Instance); return i }

// InstanceCount is M of "i/M".
func (c *Config) InstanceCount() int { _, m, _ := ParseInstance(c.Instance); return m }

// LedgerDSNOrSink is where the ledger lives.
func (c *Config) LedgerDSNOrSink() string {
	if c.MySQL.LedgerDSN != "" {
		return c.MySQL.LedgerDSN
	}
	return c.MySQL.DSN
}

// CheckServer validates the settings that depend on the server: connection budget.
func (c *Config) CheckServer(maxConnections, threadsConnected int) error {
	// subtasks + ledger pool (2) + fence lock (1) + resolver (1).
	need := c.Subtasks + 4
	if free := maxConnections - threadsConnected; need > free {
		return bad("subtasks", "needs %d connections, the server has %d free (max_connections %d, %d in use)",
			need, free, maxConnections, threadsConnected)
	}
	return nil
}

// ErrUnknownKey marks a key relay does not know, in the file or the environment.
var ErrUnknownKey = errors.New("unknown key")
