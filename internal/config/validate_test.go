package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fieldErrors are the keys of the FieldErrors in err, in order.
func fieldErrors(err error) []string {
	var keys []string
	var walk func(error)
	walk = func(err error) {
		var fe *FieldError
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		} else if errors.As(err, &fe) {
			keys = append(keys, fe.Key)
		}
	}
	if err != nil {
		walk(err)
	}
	return keys
}

// Validate reports every refusal at once, each naming its key, in the order of the sections; a
// check that depends on a refused key (the plan on a refused input.window) adds nothing.
func TestValidateReportsEveryError(t *testing.T) {
	c := valid()
	c.Job.Name = "Bad-Name"
	c.Kafka.StartOffset = "x"
	c.MySQL.BatchRows = 0
	c.Checkpoint.Interval = time.Millisecond
	c.Input.Window = 7 * time.Minute
	c.LogLevel = "loud"
	err := c.Validate()
	want := []string{"job.name", "kafka.start_offset", "mysql.batch_rows", "checkpoint.interval", "checkpoint.idle_after", "input.window", "log_level"}
	if got := fieldErrors(err); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("refused %v, want %v:\n%v", got, want, err)
	}
	if !strings.Contains(err.Error(), `config kafka.start_offset (RELAY_START_OFFSET): "x" is not earliest or latest`) {
		t.Errorf("error does not name the key with its message:\n%v", err)
	}
}

// Load reports every bad variable and every type error of the file at once, and still applies
// the rest.
func TestLoadReportsEveryError(t *testing.T) {
	path := writeConfig(t, "job: {name: j}\nsubtasks: many\ncheckpoint: {interval: fast}\n")
	c, err := Load(path, []string{"RELAY_MYSQL_BATCH_ROWS=lots", "RELAY_KAFKA_DISCOVERY_INTERVAL=often", "RELAY_NOPE=1", "RELAY_LOG_LEVEL=debug"})
	got := fieldErrors(err)
	for _, key := range []string{"subtasks", "checkpoint.interval", "mysql.batch_rows", "kafka.discovery_interval"} {
		if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+key+" ") {
			t.Errorf("%s not refused: %v", key, err)
		}
	}
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "RELAY_NOPE") {
		t.Errorf("unknown variable not reported: %v", err)
	}
	if c.Job.Name != "j" || c.LogLevel != "debug" {
		t.Errorf("the good keys were not applied: %+v", c)
	}
}

// A Kubernetes manifest given as the config (deploy/k8s/relay.yaml, next to the name a config is
// given) is named as such, not reported as a list of unknown keys.
func TestLoadRefusesAManifest(t *testing.T) {
	for _, path := range []string{filepath.Join("..", "..", "deploy", "k8s", "relay.yaml"), writeConfig(t, "kind: ConfigMap\ndata: {}\n")} {
		_, err := Load(path, nil)
		if !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), "this is a Kubernetes manifest, not a relay config") || errors.Is(err, ErrUnknownKey) {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// kafka.brokers and kafka.topics take a list or a comma-separated string in YAML, as in the
// environment, and mean the same either way.
func TestListsTakeAStringOrAList(t *testing.T) {
	for _, text := range []string{
		"kafka:\n  brokers: k1:9092, k2:9092\n  topics: [a, b]\n",
		"kafka:\n  brokers: [k1:9092, k2:9092]\n  topics: a,b\n",
		"kafka:\n  brokers:\n    - k1:9092\n    - k2:9092\n  topics: \"a, b,\"\n",
	} {
		c, err := Load(writeConfig(t, text), nil)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if c.Kafka.Brokers.String() != "k1:9092,k2:9092" || strings.Join(c.Kafka.Topics, "|") != "a|b" {
			t.Errorf("%q: brokers %q, topics %q", text, c.Kafka.Brokers, c.Kafka.Topics)
		}
	}
}

// An unset subtasks is 1 where the job's processes share rows (membership group, instance i/M with
// M > 1, from the file, the environment or --instance after Load); a value written out, even the
// default 2, is kept and refused with the reason.
func TestUnsetSubtasksFollowTheLayout(t *testing.T) {
	base := "job: {name: j}\nkafka: {brokers: k:9092, topics: [t]}\nmysql: {dsn: \"u:p@tcp(h:3306)/d\"}\n"
	for _, tc := range []struct {
		yaml     string
		env      []string
		instance string // as cmd/relay's --instance sets it after Load
		want     int
		refusal  string
	}{
		{yaml: "", want: 2},
		{yaml: "membership: group\n", want: 1},
		{yaml: "instance: 1/3\n", want: 1},
		{env: []string{"RELAY_MEMBERSHIP=group"}, want: 1},
		{env: []string{"RELAY_INSTANCE=0/2"}, want: 1},
		{instance: "1/2", want: 1},
		{yaml: "membership: group\nsubtasks: 2\n", refusal: "config subtasks (RELAY_SUBTASKS): 2 with membership group"},
		{yaml: "instance: 0/2\nsubtasks: 2\n", refusal: "config subtasks (RELAY_SUBTASKS): 2 with instance 0/2"},
		{env: []string{"RELAY_INSTANCE=0/2", "RELAY_SUBTASKS=2"}, refusal: "2 with instance 0/2"},
		{yaml: "subtasks: 2\n", instance: "1/2", refusal: "2 with instance 1/2"},
	} {
		c, err := Load(writeConfig(t, base+tc.yaml), tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if tc.instance != "" {
			c.Instance = tc.instance
		}
		err = c.Validate()
		switch {
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%q %v: got %v, want %q", tc.yaml, tc.env, err, tc.refusal)
		case tc.refusal == "" && (err != nil || c.Subtasks != tc.want):
			t.Errorf("%q %v: subtasks %d (%v), want %d", tc.yaml, tc.env, c.Subtasks, err, tc.want)
		}
	}
}

// Check reports the file's, the environment's and the rules' problems at once, each key once, and
// applies the command line's overrides before it validates.
func TestCheckReportsEverything(t *testing.T) {
	path := writeConfig(t, "job: {name: j}\nkafka: {brokers: k:9092, topics: t, start_offset: x}\nmysql: {dsn: \"u:p@tcp(h:3306)/d\"}\nsubtasks: many\n")
	c, err := Check(path, []string{"RELAY_CHECKPOINT_INTERVAL=fast"}, func(c *Config) { c.Instance = "0/2" })
	want := []string{"subtasks", "checkpoint.interval", "kafka.start_offset"}
	if got := fieldErrors(err); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("refused %v, want %v:\n%v", got, want, err)
	}
	if c.Instance != "0/2" {
		t.Errorf("instance %s: the override was not applied", c.Instance)
	}
	if _, err := Check(filepath.Join("..", "..", "deploy", "k8s", "relay.yaml"), nil, nil); !errors.Is(err, ErrManifest) || len(fieldErrors(err)) > 0 {
		t.Errorf("a manifest: %v", err)
	}
	if _, err := Check(filepath.Join("..", "..", "relay.example.yaml"), []string{"RELAY_JOB_NAME=j", "RELAY_KAFKA_BROKERS=k:9092",
		"RELAY_KAFKA_TOPICS=t", "RELAY_MYSQL_DSN=u:p@tcp(h:3306)/d"}, nil); err != nil {
		t.Errorf("the example with the four essentials: %v", err)
	}
}
