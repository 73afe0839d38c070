package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/relay-sh/relay/internal/commit"
)

func valid() Config {
	c := Default()
	c.Job.Name = "orders_eu"
	c.Kafka.Brokers = List{"127.0.0.1:9092"}
	c.Kafka.Topics = []string{"orders"}
	c.MySQL.DSN = "relay:pw@tcp(127.0.0.1:3306)/relay"
	return c
}

func TestValidDefaults(t *testing.T) {
	c := valid()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Every refusal names its key and says what is wrong.
func TestValidateRefuses(t *testing.T) {
	cases := []struct {
		key    string
		mutate func(*Config)
		says   string
	}{
		{"job.name", func(c *Config) { c.Job.Name = "" }, "must match"},
		{"job.name", func(c *Config) { c.Job.Name = "Orders-EU" }, "must match"},
		{"job.name", func(c *Config) { c.Job.Name = strings.Repeat("a", 33) }, "must match"},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = List{" "} }, "required"},
		{"kafka.topics", func(c *Config) { c.Kafka.Topics = nil }, "at least one"},
		{"kafka.topics", func(c *Config) { c.Kafka.Topics = []string{"a b"} }, "bad topic"},
		{"kafka.start_offset", func(c *Config) { c.Kafka.StartOffset = "middle" }, "earliest or latest"},
		{"kafka.discovery_interval", func(c *Config) { c.Kafka.DiscoveryInterval = time.Millisecond }, "below"},
		{"kafka.properties", func(c *Config) { c.Kafka.Properties = map[string]string{"isolation.level": "read_uncommitted"} }, "set by relay"},
		{"kafka.properties", func(c *Config) { c.Kafka.Properties = map[string]string{"enable.auto.commit": "true"} }, "set by relay"},
		{"kafka.properties", func(c *Config) { c.Kafka.Properties = map[string]string{"enable.partition.eof": "true"} }, "set by relay"},
		{"kafka.properties", func(c *Config) { c.Kafka.Properties = map[string]string{"sasl.pasword": "x"} }, `"sasl.pasword" is not a librdkafka`},
		{"kafka.properties", func(c *Config) { c.Kafka.Properties = map[string]string{"security.protocol": "sasl"} }, "refuses its value"},
		{"mode", func(c *Config) { c.Mode = commit.ModeHeld; c.MySQL.LedgerDSN = "u:p@tcp(l:3306)/l" }, "mysql.ledger_dsn (RELAY_LEDGER_DSN) must be empty"},
		{"mysql.dsn", func(c *Config) { c.MySQL.DSN = "" }, "required"},
		{"mysql.dsn", func(c *Config) { c.MySQL.DSN = "not a dsn" }, "invalid DSN"},
		{"mysql.ledger_dsn", func(c *Config) { c.MySQL.LedgerDSN = "nope" }, "invalid DSN"},
		{"mysql.table", func(c *Config) { c.MySQL.Table = "x; DROP TABLE y" }, "identifier"},
		{"mysql.dlq_table", func(c *Config) { c.MySQL.DLQTable = "a-b" }, "identifier"},
		{"mysql.batch_rows", func(c *Config) { c.MySQL.BatchRows = 0 }, "outside"},
		{"mysql.lock_wait_timeout", func(c *Config) { c.MySQL.LockWait = 0 }, "below 1s"},
		{"mysql.lock_wait_timeout", func(c *Config) { c.MySQL.LockWait = 2 * time.Minute }, "below checkpoint.timeout"},
		{"job.forget_members_after", func(c *Config) { c.Job.ForgetMembersAfter = -time.Hour }, "is negative"},
		{"mysql.tls_ca_file", func(c *Config) { c.MySQL.TLSCAFile = "/nonexistent/ca.pem" }, "no such file"},
		{"mysql.tls_key_file", func(c *Config) { c.MySQL.TLSCertFile = "/etc/hostname" }, "go together"},
		{"gc_heap_floor_mib", func(c *Config) { c.GCFloorMiB = -1 }, "outside"},
		{"input.decoders", func(c *Config) { c.Input.Decoders = 17 }, "outside"},
		{"startup_wait_timeout", func(c *Config) { c.StartupWait = -time.Second }, "negative"},
		{"mode", func(c *Config) { c.Mode = "2pc" }, "xa or held"},
		{"subtasks", func(c *Config) { c.Subtasks = 0 }, "outside"},
		{"subtasks", func(c *Config) { c.Subtasks = 1000 }, "outside"},
		{"subtasks", func(c *Config) { c.Instance = "1/3"; c.set = map[string]bool{"subtasks": true} }, "set subtasks to 1 (RELAY_SUBTASKS=1)"},
		{"instance", func(c *Config) { c.Instance = "3/3" }, "not i/M"},
		{"membership", func(c *Config) { c.Membership = "elastic" }, `"elastic" is not instances or group`},
		{"membership", func(c *Config) { c.Membership = MembershipGroup; c.Subtasks = 1; c.Instance = "0/2" }, "must stay 0/1"},
		{"subtasks", func(c *Config) { c.Membership = MembershipGroup; c.Subtasks = 3 }, "with membership group"},
		{"kafka.properties", func(c *Config) {
			c.Membership, c.Subtasks, c.Kafka.Properties = MembershipGroup, 1, map[string]string{"max.poll.interval.ms": "300000"}
		}, "below the drain bound"},
		{"kafka.properties", func(c *Config) { c.Kafka.Properties = map[string]string{"session.timeout.ms": "400000"} }, "above max.poll.interval.ms (300000)"},
		{"kafka.properties", func(c *Config) {
			c.Membership, c.Subtasks, c.Kafka.Properties = MembershipGroup, 1, map[string]string{"session.timeout.ms": "700000", "max.poll.interval.ms": "600000"}
		}, "above max.poll.interval.ms (600000)"},
		{"kafka.group_instance_id", func(c *Config) { c.Kafka.GroupInstanceID = "relay-0" }, "is for membership group"},
		{"checkpoint.interval", func(c *Config) { c.Checkpoint.Interval = time.Millisecond }, "below"},
		{"checkpoint.min_pause", func(c *Config) { c.Checkpoint.MinPause = time.Hour }, "between"},
		{"checkpoint.idle_after", func(c *Config) { c.Checkpoint.IdleAfter = time.Hour }, "between"},
		{"checkpoint.timeout", func(c *Config) { c.Checkpoint.Timeout = time.Millisecond }, "below"},
		{"checkpoint.tolerable_failures", func(c *Config) { c.Checkpoint.TolerableFailures = -1 }, "negative"},
		{"mysql.session_timeout", func(c *Config) { c.MySQL.SessionTimeout = time.Minute }, "short by"},
		{"mysql.session_timeout", func(c *Config) { c.Checkpoint.Interval = 9 * time.Minute }, "must exceed"},
		{"checkpoint.buffer_keys", func(c *Config) { c.Checkpoint.BufferKeys = 0 }, "positive"},
		{"checkpoint.resolve_interval", func(c *Config) { c.Checkpoint.ResolveInterval = 0 }, "below"},
		{"checkpoint.ready_max_age", func(c *Config) { c.Checkpoint.ReadyMaxAge = time.Millisecond }, "exceed"},
		{"input.sku_field", func(c *Config) { c.Input.SKUField = "" }, "empty"},
		{"input.window", func(c *Config) { c.Input.Window = 7 * time.Minute }, "divide a day"},
		{"input.bad_input_policy", func(c *Config) { c.Input.BadInputPolicy = "ignore" }, "dlq, skip or fail"},
		{"input.max_payload_bytes", func(c *Config) { c.Input.MaxPayloadBytes = 1 }, "below"},
		{"input.dlq_payload_bytes", func(c *Config) { c.Input.DLQPayloadBytes = 1 << 20 }, "outside"},
		{"input.min_event_time", func(c *Config) { c.Input.MinEventTime = time.Date(900, 1, 1, 0, 0, 0, 0, time.UTC) }, "after"},
		{"input.max_event_time", func(c *Config) { c.Input.MaxEventTime = time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC) }, "DATETIME"},
		{"log_level", func(c *Config) { c.LogLevel = "loud" }, "debug, info"},
	}
	for _, tc := range cases {
		c := valid()
		tc.mutate(&c)
		err := c.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: got %v, want a FieldError", tc.key, err)
			continue
		}
		if fe.Key != tc.key || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: got %q (key %s), want key %s saying %q", tc.key, err, fe.Key, tc.key, tc.says)
		}
		if !strings.Contains(err.Error(), fe.Env) || !strings.HasPrefix(fe.Env, "RELAY_") {
			t.Errorf("%s: error %q does not name its variable", tc.key, err)
		}
	}
}

func TestServerChecks(t *testing.T) {
	c := valid()
	c.Subtasks = 8
	if err := c.CheckServer(151, 10); err != nil {
		t.Fatal(err)
	}
	err := c.CheckServer(20, 15)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Key != "subtasks" || !strings.Contains(err.Error(), "needs 12 connections, the server has 5 free") {
		t.Fatalf("got %v", err)
	}
}

func TestLoadFileAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "relay.yaml")
	yaml := `job:
  name: from_file
kafka:
  brokers: k1:9092
  topics: [a, b]
  properties:
    security.protocol: SASL_SSL
mysql:
  dsn: u:p@tcp(db:3306)/x
checkpoint:
  interval: 500ms
subtasks: 3
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, []string{"RELAY_SUBTASKS=5", "RELAY_KAFKA_TOPICS=x, y", "RELAY_LEDGER_DSN=u:p@tcp(l:3306)/l",
		"RELAY_START_OFFSET=latest", "RELAY_TEST_KAFKA=ignored", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Job.Name != "from_file" || c.Subtasks != 5 || strings.Join(c.Kafka.Topics, ",") != "x,y" ||
		c.Checkpoint.Interval != 500*time.Millisecond || c.MySQL.LedgerDSN != "u:p@tcp(l:3306)/l" ||
		c.Kafka.StartOffset != "latest" || c.Kafka.Properties["security.protocol"] != "SASL_SSL" || c.Kafka.GroupID != "relay-from_file" {
		t.Fatalf("loaded %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// Unknown keys are errors that name the key, in the file and in the environment.
	if err := os.WriteFile(path, []byte("job:\n  nmae: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, nil); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "unknown key job.nmae (line 2)") {
		t.Fatalf("unknown YAML key: %v", err)
	}
	if _, err := Load("", []string{"RELAY_SUBTASK=3"}); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "RELAY_SUBTASK") {
		t.Fatalf("unknown variable: %v", err)
	}
	_, err = Load("", []string{"RELAY_CHECKPOINT_INTERVAL=fast"})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Env != "RELAY_CHECKPOINT_INTERVAL" {
		t.Fatalf("bad value: %v", err)
	}
}

// Every key has a doc line (docs/CONFIG.md is generated from them).
func TestEveryKeyDocumented(t *testing.T) {
	for _, f := range Fields() {
		if f.Doc == "" {
			t.Errorf("%s has no doc line", f.Key)
		}
	}
	for k := range docs {
		found := false
		for _, f := range Fields() {
			found = found || f.Key == k
		}
		if !found {
			t.Errorf("doc for unknown key %s", k)
		}
	}
}

// A list item in the environment can hold a comma or a backslash, escaped.
func TestEnvListEscaping(t *testing.T) {
	c, err := Load("", []string{`RELAY_KAFKA_PROPERTIES=sasl.username=relay, sasl.password=3xtra\,S3cret\\x=y,,`,
		`RELAY_KAFKA_TOPICS=a,b\\`})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Kafka.Properties["sasl.password"]; got != `3xtra,S3cret\x=y` || c.Kafka.Properties["sasl.username"] != "relay" {
		t.Fatalf("properties %q", c.Kafka.Properties)
	}
	if got := strings.Join(c.Kafka.Topics, "|"); got != `a|b\` {
		t.Fatalf("topics %q", got)
	}
}

// A malformed item is named by its position (and key), never by its text: it can be a password.
func TestEnvErrorsHideValues(t *testing.T) {
	const secret = "3xtra-S3cret"
	for _, tc := range []struct{ val, says string }{
		{"sasl.username=relay,sasl.password=a," + secret, "item 3 is not key=value"},
		{"sasl.password=a\\b" + secret, "item 1: a backslash escapes only"},
		{"sasl.password=" + secret + "\\", "item 1: a backslash escapes only"},
		{"sasl.password=" + secret + ",=" + secret, "item 2 is not key=value"},
		{"sasl.password=" + secret + ",sasl.password=" + secret, "item 2 sets sasl.password again"},
	} {
		_, err := Load("", []string{"RELAY_KAFKA_PROPERTIES=" + tc.val})
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Key != "kafka.properties" || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: got %v, want kafka.properties saying %q", tc.val, err, tc.says)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %q shows the value", tc.val, err)
		}
	}
	// librdkafka's refusal of a value is reported without it too.
	c := valid()
	c.Kafka.Properties = map[string]string{"security.protocol": secret}
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("Validate: %v", err)
	}
}

// Secrets can come from files (mounted secrets): no escaping, no password in the environment.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kpw, mpw := write("kafka", "3xtra,S3cret\\\n"), write("mysql", "p@ss:w/rd\r\n")
	c, err := Load("", []string{"RELAY_KAFKA_PROPERTIES=sasl.username=relay", "RELAY_KAFKA_SASL_PASSWORD_FILE=" + kpw,
		"RELAY_MYSQL_DSN=relay@tcp(db:3306)/relay?tls=true&sql_mode=%27ANSI%27", "RELAY_MYSQL_PASSWORD_FILE=" + mpw})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Kafka.Properties["sasl.password"]; got != `3xtra,S3cret\` {
		t.Errorf("sasl.password %q", got)
	}
	dsn, err := mysql.ParseDSN(c.MySQL.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if dsn.User != "relay" || dsn.Passwd != "p@ss:w/rd" || dsn.Addr != "db:3306" || dsn.DBName != "relay" ||
		dsn.TLSConfig != "true" || dsn.Params["sql_mode"] != "'ANSI'" {
		t.Errorf("dsn %s parsed as %+v", c.MySQL.DSN, dsn)
	}
	empty := write("empty", "\n")
	for _, tc := range []struct {
		env  []string
		key  string
		says string
	}{
		{[]string{"RELAY_KAFKA_PROPERTIES=sasl.password=x", "RELAY_KAFKA_SASL_PASSWORD_FILE=" + kpw}, "kafka.sasl_password_file", "sets sasl.password too"},
		{[]string{"RELAY_KAFKA_SASL_PASSWORD_FILE=" + empty}, "kafka.sasl_password_file", "is empty"},
		{[]string{"RELAY_KAFKA_SASL_PASSWORD_FILE=" + dir + "/none"}, "kafka.sasl_password_file", "no such file"},
		{[]string{"RELAY_MYSQL_DSN=relay:pw@tcp(db:3306)/relay", "RELAY_MYSQL_PASSWORD_FILE=" + mpw}, "mysql.password_file", "has a password too"},
	} {
		_, err := Load("", tc.env)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Key != tc.key || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: got %v, want %s saying %q", tc.env, err, tc.key, tc.says)
		}
	}
}

// yaml's type errors name a line; relay's name the key too, in block and flow style.
func TestYAMLTypeErrorsNameTheKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.yaml")
	for _, tc := range []struct {
		yaml string
		keys []string
	}{
		{"job:\n  name: x\ncheckpoint:\n  interval: fast\n", []string{"checkpoint.interval (RELAY_CHECKPOINT_INTERVAL): " + path + " line 4: cannot unmarshal"}},
		{"checkpoint: {timeout: 1s, interval: fast}\nsubtasks: many\n", []string{"checkpoint.interval", "subtasks (RELAY_SUBTASKS)"}},
		{"kafka:\n  topics: [a, [b]]\n  properties: [x]\n", []string{"kafka.topics", "kafka.properties"}},
		{"checkpoint: {timeout: fast, interval: fast}\n", []string{"checkpoint.timeout", "checkpoint.interval"}},
		{"defaults: &d {interval: fast}\ncheckpoint:\n  <<: *d\n", []string{"checkpoint.interval"}},
	} {
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path, nil)
		if err == nil {
			t.Errorf("%q: loaded", tc.yaml)
			continue
		}
		for _, k := range tc.keys {
			if !strings.Contains(err.Error(), "config "+k) {
				t.Errorf("%q: error %q does not name %s", tc.yaml, err, k)
			}
		}
		var fe *FieldError
		if len(tc.keys) > 0 && (!errors.As(err, &fe) || !strings.HasPrefix(tc.keys[0], fe.Key)) {
			t.Errorf("%q: %v is not a FieldError for %s", tc.yaml, err, tc.keys[0])
		}
	}
}

// The drain bound covers the longest drain whose every step keeps its deadline, step by step as
// DrainBound's comment derives it, for the defaults and for settings where either term dominates.
// (Twice the timeout plus the interval, the bound before, covered neither checkpoint's commit
// phase nor the take of a move the session was finishing.)
func TestDrainBound(t *testing.T) {
	for _, tc := range []struct{ timeout, restart time.Duration }{
		{Default().Checkpoint.Timeout, Default().Checkpoint.RestartAllowance},
		{10 * time.Second, 0},
		{time.Second, 5 * time.Minute},
	} {
		cp := Default().Checkpoint
		cp.Timeout, cp.RestartAllowance = tc.timeout, tc.restart
		checkpoint := 2 * cp.Timeout // barrier phase (flush, prepare, decide), then commit phase
		steps := []struct {
			what string
			d    time.Duration
		}{
			{"the checkpoint in flight, awaited by a move of granted partitions", checkpoint},
			{"the move's take and assignment", cp.RestartAllowance},
			{"the drain's cut reserving a block of checkpoint ids", cp.Timeout},
			{"the drain's own checkpoint", checkpoint},
		}
		var worst time.Duration
		var named []string
		for _, s := range steps {
			worst += s.d
			named = append(named, fmt.Sprintf("%s %s", s.what, s.d))
		}
		if got := cp.DrainBound(); got < worst {
			t.Errorf("timeout %s, restart_allowance %s: DrainBound %s, below the worst drain %s: %s", cp.Timeout, cp.RestartAllowance, got, worst, strings.Join(named, ", "))
		}
	}
}
