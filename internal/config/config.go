// Package config holds relay's one configuration struct.
//
// Invariant: a Config that passed Validate can run; every refusal names the offending key (its YAML
// path and its RELAY_* variable) and, for limits, by how much it is off. The field table in fields.go
// is the single description of every key: YAML, environment override, docs/CONFIG.md and
// relay.example.yaml come from it. Loading is in load.go, the rules in validate.go, rendering a
// Config as a file in render.go.
package config

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/format"
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
	// SchemaRegistry is where the writer schemas of a registry format (input.format avro, json_schema) are.
	SchemaRegistry SchemaRegistry `yaml:"schema_registry"`
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

	// set holds the YAML paths the file or the environment set (Load), so that a default that
	// depends on other keys (subtasks) is told apart from the same value written out.
	set map[string]bool
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
	Brokers            List              `yaml:"brokers"`
	Topics             List              `yaml:"topics"`
	GroupID            string            `yaml:"group_id"`
	GroupInstanceID    string            `yaml:"group_instance_id"`
	StartOffset        string            `yaml:"start_offset"`
	CommitGroupOffsets bool              `yaml:"commit_group_offsets"`
	DiscoveryInterval  time.Duration     `yaml:"discovery_interval"`
	Properties         map[string]string `yaml:"properties"`
	SASLPasswordFile   string            `yaml:"sasl_password_file"`
}

// List is a key that takes a YAML list or one string of comma-separated items (topics: a, b), as
// its RELAY_* variable does, so either spelling of kafka.brokers or kafka.topics is right.
type List []string

// UnmarshalYAML takes a sequence of strings, or a string split at its commas (items trimmed, empty
// ones dropped, as in the environment).
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		var items []string
		if err := n.Decode(&items); err != nil {
			return err
		}
		*l = items
		return nil
	}
	*l = nil
	for _, item := range strings.Split(n.Value, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

// String is the comma-separated form, as librdkafka's bootstrap.servers takes it.
func (l List) String() string { return strings.Join(l, ",") }

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
	// Format is the default spec's input.format (a pipeline block names its own).
	Format          string        `yaml:"format"`
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
	// Decoders is how many goroutines decode a batch's records; 0: DecodeGoroutines decides.
	Decoders int `yaml:"decoders"`
}

// SchemaRegistry is a Confluent-compatible Schema Registry API, as Kafka Connect's
// schema.registry.* settings name one.
type SchemaRegistry struct {
	URL          string `yaml:"url"`
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	TLSCAFile    string `yaml:"tls_ca_file"`
	TLSCertFile  string `yaml:"tls_cert_file"`
	TLSKeyFile   string `yaml:"tls_key_file"`
	password     string // read from PasswordFile at load
}

// Registry is the registry client's configuration.
func (c *Config) Registry() format.RegistryConfig {
	r := c.SchemaRegistry
	return format.RegistryConfig{URL: r.URL, Username: r.Username, Password: r.password,
		CAFile: r.TLSCAFile, CertFile: r.TLSCertFile, KeyFile: r.TLSKeyFile}
}

// Decoder returns a decoder of p's input format, with a registry client of its own for a
// registry format.
func (c *Config) Decoder(p *spec.Plan) (format.Decoder, error) {
	d, err := c.decoders(p, 1)
	if err != nil {
		return nil, err
	}
	return d[0], nil
}

// Decoders returns the decoders of p's input format a pipeline takes (pipeline.Deps.Decoders): the
// poll goroutine's, and with DecodeGoroutines above 1 one more for each helper (a decoder is not
// safe for concurrent use). They share one registry client, which is.
func (c *Config) Decoders(p *spec.Plan) ([]format.Decoder, error) {
	n := c.DecodeGoroutines()
	if n > 1 {
		n++
	}
	return c.decoders(p, n)
}

func (c *Config) decoders(p *spec.Plan, n int) ([]format.Decoder, error) {
	var reg *format.Registry
	if p.InputFormat() != spec.FormatJSON {
		var err error
		if reg, err = format.NewRegistry(c.Registry()); err != nil {
			return nil, err
		}
	}
	decs := make([]format.Decoder, n)
	for i := range decs {
		var err error
		if decs[i], err = format.New(p, reg); err != nil {
			return nil, err
		}
	}
	return decs, nil
}

// DecodeGoroutines is how many goroutines decode: input.decoders, or by default half the CPUs Go
// runs on (GOMAXPROCS, which follows a container's CPU limit), at least 2 where there are 2 and
// at most maxDecoders: the
// other half reads (librdkafka's threads and the poll), folds and writes, and per record decoding
// costs about what reading and folding together do; on 2 cores, 2 helpers overlapping the read were
// 7 % sooner than the poll decoding alone (docs/BENCHMARKS.md, "Cores").
func (c *Config) DecodeGoroutines() int {
	if c.Input.Decoders > 0 {
		return c.Input.Decoders
	}
	n := runtime.GOMAXPROCS(0)
	return min(maxDecoders, max(min(2, n), n/2))
}

// maxDecoders bounds input.decoders: one goroutine reads (~140 ns a record) for all the decoders
// (~225 ns each), so past a few more wait for batches and only hold memory.
const maxDecoders = 16

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
			Format:          spec.FormatJSON,
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

// FieldError names the key a refusal is about, in Load and in Validate.
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
		s.Input.Format = in.Format
		return spec.Compile(s)
	}
	return c.Pipeline.Compile(spec.Limits{MaxPayloadBytes: lim.MaxPayloadBytes, MinTS: lim.MinTS, MaxTS: lim.MaxTS, MaxUnits: lim.MaxAmountUnits})
}

// Membership values: how the processes of a job share its partitions.
const (
	MembershipInstances = "instances" // fixed: instance i of M reads p mod M == i
	MembershipGroup     = "group"     // Kafka's consumer group assigns them among whoever runs
)

// DefaultGroupSessionTimeout is the consumer group's session timeout unless kafka.properties sets
// session.timeout.ms: Kafka's default group.min.session.timeout.ms, the shortest a broker accepts
// unless its operators changed it. A member that dies keeps its partitions for one session
// timeout, and in the classic group protocol members that die right after rejoining a round are
// removed one round at a time, so a burst of deaths can cost two session timeouts before every
// partition moves (docs/PROTOCOL.md, failover): 6 s keeps that within 15 s. Nothing slow misses a
// heartbeat (librdkafka sends them from its own thread, whatever a checkpoint, a drain or a MariaDB
// restart does); only a process stopped whole that long is evicted, and a live member evicted is
// fenced per partition and rejoins: a rebalance, never a record lost or doubled. A dead member's
// prepared branches still hold their rows until its lease (job.lease) ran out and the resolver
// ended them.
const DefaultGroupSessionTimeout = 6 * time.Second

// GroupSessionTimeout is the consumer group's session timeout: kafka.properties session.timeout.ms,
// else DefaultGroupSessionTimeout.
func (c *Config) GroupSessionTimeout() time.Duration {
	if ms, err := strconv.Atoi(c.Kafka.Properties["session.timeout.ms"]); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultGroupSessionTimeout
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
