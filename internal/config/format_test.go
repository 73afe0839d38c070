package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validateEnv loads the environment over a valid base and validates it, as relay run would.
func validateEnv(t *testing.T, path string, env ...string) error {
	t.Helper()
	base := []string{"RELAY_JOB_NAME=j", "RELAY_KAFKA_BROKERS=k:9092", "RELAY_KAFKA_TOPICS=t", "RELAY_MYSQL_DSN=u:p@tcp(h:3306)/d"}
	c, err := Load(path, append(base, env...))
	if err != nil {
		return err
	}
	return c.Validate()
}

// input.format and schema_registry.*: each refusal names its key; a registry format with a
// well-formed registry is accepted.
func TestInputFormatSettings(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const url = "RELAY_SCHEMA_REGISTRY_URL=http://registry:8081"
	for _, c := range []struct {
		env  []string
		errs []string // every refusal, in order
	}{
		{nil, nil},
		{[]string{"RELAY_INPUT_FORMAT=json"}, nil},
		{[]string{"RELAY_INPUT_FORMAT=xml"}, []string{`config input.format (RELAY_INPUT_FORMAT): "xml" is not json, avro, protobuf or json_schema`}},
		{[]string{"RELAY_INPUT_FORMAT=protobuf", url}, nil},
		{[]string{"RELAY_INPUT_FORMAT=protobuf"}, []string{
			"config schema_registry.url (RELAY_SCHEMA_REGISTRY_URL): is required: input.format protobuf finds writer schemas in a Schema Registry"}},
		{[]string{url}, []string{"config schema_registry.url (RELAY_SCHEMA_REGISTRY_URL): is set, but input.format is json, which reads no registry"}},
		{[]string{"RELAY_INPUT_FORMAT=avro"}, []string{
			"config schema_registry.url (RELAY_SCHEMA_REGISTRY_URL): is required: input.format avro finds writer schemas in a Schema Registry"}},
		{[]string{"RELAY_INPUT_FORMAT=avro", "RELAY_SCHEMA_REGISTRY_URL=mock://x"}, []string{
			`config schema_registry.url (RELAY_SCHEMA_REGISTRY_URL): schema registry "mock://x": not an http or https URL`}},
		{[]string{"RELAY_INPUT_FORMAT=avro", url, "RELAY_SCHEMA_REGISTRY_USERNAME=u"}, []string{
			"config schema_registry.username (RELAY_SCHEMA_REGISTRY_USERNAME): and schema_registry.password_file go together"}},
		{[]string{"RELAY_INPUT_FORMAT=avro", url, "RELAY_SCHEMA_REGISTRY_TLS_CA_FILE=" + dir + "/none.pem"}, []string{
			"config schema_registry.url (RELAY_SCHEMA_REGISTRY_URL): "}},
		{[]string{"RELAY_INPUT_FORMAT=avro", url, "RELAY_SCHEMA_REGISTRY_USERNAME=u", "RELAY_SCHEMA_REGISTRY_PASSWORD_FILE=" + pw}, nil},
		{[]string{"RELAY_INPUT_FORMAT=json_schema"}, []string{
			"config schema_registry.url (RELAY_SCHEMA_REGISTRY_URL): is required: input.format json_schema finds writer schemas in a Schema Registry"}},
		{[]string{"RELAY_INPUT_FORMAT=json_schema", url}, nil},
	} {
		err := validateEnv(t, "", c.env...)
		var got []string
		if err != nil {
			got = strings.Split(err.Error(), "\n")
		}
		if len(got) != len(c.errs) {
			t.Errorf("%v: %d refusals, want %d:\n%v", c.env, len(got), len(c.errs), err)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.errs[i]) {
				t.Errorf("%v: refusal %d is\n  %s\nwant\n  %s", c.env, i, got[i], c.errs[i])
			}
		}
	}
}

// A pipeline block names its format itself: the default spec's input.format next to it is
// refused, and its own avro is accepted with a registry, refused naming pipeline.input.format
// without one.
func TestPipelineFormat(t *testing.T) {
	if err := validateEnv(t, writeConfig(t, pipelineYAML), "RELAY_INPUT_FORMAT=json"); err == nil ||
		!strings.Contains(err.Error(), "input.format (RELAY_INPUT_FORMAT): is set together with pipeline") {
		t.Errorf("input.format next to a pipeline block: %v", err)
	}
	avro := strings.Replace(pipelineYAML, "  input:\n", "  input:\n    format: avro\n", 1)
	if err := validateEnv(t, writeConfig(t, avro), "RELAY_SCHEMA_REGISTRY_URL=https://registry/apis/ccompat/v7"); err != nil {
		t.Errorf("a pipeline block reading avro: %v", err)
	}
	err := validateEnv(t, writeConfig(t, avro))
	var fe *FieldError
	if !errors.As(err, &fe) || err.Error() != "config schema_registry.url (RELAY_SCHEMA_REGISTRY_URL): is required: pipeline.input.format avro finds writer schemas in a Schema Registry" {
		t.Errorf("a pipeline block reading avro without a registry: %v", err)
	}
}

// The registry settings reach the client's configuration, the password from its file.
func TestRegistryConfig(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load("", []string{"RELAY_SCHEMA_REGISTRY_URL=https://r:8081", "RELAY_SCHEMA_REGISTRY_USERNAME=u",
		"RELAY_SCHEMA_REGISTRY_PASSWORD_FILE=" + pw, "RELAY_SCHEMA_REGISTRY_TLS_CA_FILE=/ca.pem",
		"RELAY_SCHEMA_REGISTRY_TLS_CERT_FILE=/c.pem", "RELAY_SCHEMA_REGISTRY_TLS_KEY_FILE=/k.pem"})
	if err != nil {
		t.Fatal(err)
	}
	r := c.Registry()
	if r.URL != "https://r:8081" || r.Username != "u" || r.Password != "s3cret" || r.CAFile != "/ca.pem" || r.CertFile != "/c.pem" || r.KeyFile != "/k.pem" {
		t.Errorf("registry config %+v", r)
	}
	if _, err := Load("", []string{"RELAY_SCHEMA_REGISTRY_PASSWORD_FILE=/nonexistent/pw"}); err == nil ||
		!strings.Contains(err.Error(), "schema_registry.password_file (RELAY_SCHEMA_REGISTRY_PASSWORD_FILE): open /nonexistent/pw") {
		t.Errorf("a password file that does not exist: %v", err)
	}
}
