package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A rendering loads back to the Config it came from (with no secret to mask), for the defaults and
// for a Config with every kind of value set.
func TestRenderedConfigLoadsBack(t *testing.T) {
	c := valid()
	c.MySQL.DSN = "relay@tcp(127.0.0.1:3306)/relay"
	c.Kafka.Topics = List{"a", "b"}
	c.Kafka.Properties = map[string]string{"security.protocol": "SASL_SSL", "sasl.username": "u:w, #x", "enable.ssl.certificate.verification": "true"}
	c.Checkpoint.Interval = 1500 * time.Millisecond
	c.Input.MinEventTime = time.Date(2020, 2, 3, 4, 5, 6, 0, time.UTC)
	c.HTTPPprof = true
	c.Mode = "held"
	withSpec, err := Load(writeConfig(t, pipelineYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	withSpec.MySQL.DSN = c.MySQL.DSN
	for _, want := range []Config{Default(), c, withSpec} {
		b, err := want.renderYAML(renderMasked, "head")
		if err != nil {
			t.Fatal(err)
		}
		got, err := Load(writeConfig(t, string(b)), nil)
		if err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		got.set, want.set = nil, nil
		// An empty list or map reads back empty, not nil: the same configuration.
		for _, l := range []*List{&got.Kafka.Brokers, &got.Kafka.Topics} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		if len(got.Kafka.Properties) == 0 {
			got.Kafka.Properties = nil
		}
		if want.Job.Name != "" {
			want.Kafka.GroupID = "relay-" + want.Job.Name
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("loaded back with %v\nfrom\n%s", configDiff(got, want), b)
		}
	}
}

// configDiff lists the keys whose values differ, as key: got, want.
func configDiff(got, want Config) []string {
	values := func(c Config) map[string]string {
		m := map[string]string{}
		walk(reflect.ValueOf(&c).Elem(), "", func(key string, v reflect.Value) {
			switch {
			case (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0:
				m[key] = "empty"
			case v.Kind() == reflect.Pointer && !v.IsNil():
				m[key] = fmt.Sprintf("%+v", v.Elem().Interface())
			default:
				m[key] = fmt.Sprintf("%#v", v.Interface())
			}
		})
		return m
	}
	g, w := values(got), values(want)
	var out []string
	for _, f := range Fields() {
		if g[f.Key] != w[f.Key] {
			out = append(out, fmt.Sprintf("%s: %s, want %s", f.Key, g[f.Key], w[f.Key]))
		}
	}
	return out
}

// The effective config shows every key and masks every password: in DSNs, and secret
// kafka.properties (sasl.password comes from kafka.sasl_password_file too).
func TestEffectiveYAMLMasksSecrets(t *testing.T) {
	c := valid()
	c.MySQL.DSN = "relay:dsn-S3cret@tcp(db:3306)/relay"
	c.MySQL.LedgerDSN = "relay:ledger-S3cret@tcp(l:3306)/l"
	c.Kafka.Properties = map[string]string{"sasl.username": "relay", "sasl.password": "kafka-S3cret",
		"ssl.key.password": "key-S3cret", "sasl.oauthbearer.client.secret": "oauth-S3cret"}
	c.SchemaRegistry.URL = "https://u:url-S3cret@registry:8081"
	b, err := c.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if strings.Contains(out, "S3cret") {
		t.Errorf("a secret is shown:\n%s", out)
	}
	for _, want := range []string{"dsn: relay:xxxxx@tcp(db:3306)/relay", "ledger_dsn: relay:xxxxx@tcp(l:3306)/l", "sasl.username: relay", "sasl.password: xxxxx", "url: https://u:xxxxx@registry:8081"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	// Secrets read from files (mounted secrets) are masked where they end up.
	dir := t.TempDir()
	kpw, mpw := filepath.Join(dir, "kafka"), filepath.Join(dir, "mysql")
	for p, pw := range map[string]string{kpw: "kafkafile-S3cret\n", mpw: "mysqlfile-S3cret\n"} {
		if err := os.WriteFile(p, []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fromFiles, err := Load("", []string{"RELAY_KAFKA_SASL_PASSWORD_FILE=" + kpw, "RELAY_MYSQL_DSN=relay@tcp(db:3306)/relay", "RELAY_MYSQL_PASSWORD_FILE=" + mpw})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := fromFiles.EffectiveYAML(); err != nil || strings.Contains(string(b), "S3cret") || !strings.Contains(string(b), "dsn: relay:xxxxx@tcp(db:3306)/relay") {
		t.Errorf("secrets from files (%v):\n%s", err, b)
	}
	for _, f := range Fields() {
		leaf := f.Key[strings.LastIndexByte(f.Key, '.')+1:]
		if !strings.Contains(out, leaf+":") {
			t.Errorf("%s is not shown", f.Key)
		}
	}
}
