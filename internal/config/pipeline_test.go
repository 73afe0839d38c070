package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pipelineYAML = `
job: {name: j}
kafka: {brokers: k:9092, topics: [t]}
mysql: {dsn: "u:p@tcp(h:3306)/d"}
pipeline:
  input:
    fields:
      shop: string(16)
      customer.region: string(8)
      price: decimal(2)
    event_time: {field: at, format: epoch_ms}
  aggregates:
    - table: sales_hour
      window: 1h
      dimensions: [{column: region, field: customer.region}]
      measures: [{column: orders, kind: count}, {column: revenue, kind: sum, field: price}]
`

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A pipeline block is the plan; without one the plan is the default spec of input.* and mysql.table.
func TestPipelineBlock(t *testing.T) {
	c, err := Load(writeConfig(t, pipelineYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := c.Plan()
	if err != nil || strings.Join(p.Tables(), ",") != "sales_hour" {
		t.Fatalf("plan %v, %v", p, err)
	}
	c, err = Load("", []string{"RELAY_JOB_NAME=j", "RELAY_KAFKA_BROKERS=k:9092", "RELAY_KAFKA_TOPICS=t",
		"RELAY_MYSQL_DSN=u:p@tcp(h:3306)/d", "RELAY_MYSQL_TABLE=stats"})
	if err != nil {
		t.Fatal(err)
	}
	if p, err = c.Plan(); err != nil || strings.Join(p.Tables(), ",") != "stats" {
		t.Fatalf("default plan %v, %v", p, err)
	}
}

// The keys the default spec is built from are refused next to a pipeline block, by name, whether
// the file or the environment sets them (even to their default value); a bad spec names its key.
func TestPipelineRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		env        []string
		want       string
	}{
		{"block alone", pipelineYAML, nil, ""},
		{"file mysql.table", strings.Replace(pipelineYAML, `mysql: {dsn: "u:p@tcp(h:3306)/d"}`, `mysql: {dsn: "u:p@tcp(h:3306)/d", table: order_stats_minute}`, 1), nil, "config mysql.table (RELAY_MYSQL_TABLE): is set together with pipeline"},
		{"file input.window", pipelineYAML + "input: {window: 1m}\n", nil, "config input.window (RELAY_INPUT_WINDOW): is set together"},
		{"env sku field", pipelineYAML, []string{"RELAY_INPUT_SKU_FIELD=sku"}, "config input.sku_field (RELAY_INPUT_SKU_FIELD): is set together"},
		{"env limits are fine", pipelineYAML, []string{"RELAY_INPUT_MAX_PAYLOAD_BYTES=1000"}, ""},
		{"append sink", pipelineYAML, []string{"RELAY_MYSQL_DETAIL_TABLE=order_details"}, "config mysql.detail_table (RELAY_MYSQL_DETAIL_TABLE): the append sink writes order_id"},
		{"bad spec", strings.Replace(pipelineYAML, "window: 1h", "window: 7m", 1), nil, "pipeline.aggregates[0].window: 7m0s does not divide a day"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(writeConfig(t, tc.yaml), tc.env)
			if err == nil {
				err = c.Validate()
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Load("", []string{"RELAY_PIPELINE=x"}); err == nil || !strings.Contains(err.Error(), "RELAY_PIPELINE") {
		t.Fatalf("RELAY_PIPELINE: %v", err)
	}
}

// pipeline_file (RELAY_PIPELINE_FILE) holds what the pipeline block would: a deployment set up by
// environment variables alone runs a spec. It follows the block's rules and names itself in errors.
func TestPipelineFile(t *testing.T) {
	block, _, _ := strings.Cut(pipelineYAML, "pipeline:\n")
	_, specText, _ := strings.Cut(pipelineYAML, "pipeline:\n")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("spec.yaml", specText)
	env := []string{"RELAY_JOB_NAME=j", "RELAY_KAFKA_BROKERS=k:9092", "RELAY_KAFKA_TOPICS=t", "RELAY_MYSQL_DSN=u:p@tcp(h:3306)/d"}
	c, err := Load("", append(env, "RELAY_PIPELINE_FILE="+good))
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.Plan(); err != nil || strings.Join(p.Tables(), ",") != "sales_hour" {
		t.Fatalf("plan from the file: %v, %v", p, err)
	}
	for _, tc := range []struct {
		name, yaml string
		env        []string
		want       string
	}{
		{"with the block", pipelineYAML, []string{"RELAY_PIPELINE_FILE=" + good}, "config pipeline_file (RELAY_PIPELINE_FILE): is set together with pipeline"},
		{"with a shape key", block, []string{"RELAY_PIPELINE_FILE=" + good, "RELAY_INPUT_WINDOW=1m"}, "config input.window (RELAY_INPUT_WINDOW): is set together with pipeline"},
		{"unknown key", block, []string{"RELAY_PIPELINE_FILE=" + write("typo.yaml", strings.Replace(specText, "measures:", "measure:", 1))}, "config pipeline_file (RELAY_PIPELINE_FILE): " + dir},
		{"missing file", block, []string{"RELAY_PIPELINE_FILE=" + dir + "/none.yaml"}, "no such file"},
		{"bad spec", block, []string{"RELAY_PIPELINE_FILE=" + write("bad.yaml", strings.Replace(specText, "window: 1h", "window: 7m", 1))}, "pipeline.aggregates[0].window: 7m0s does not divide a day"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(writeConfig(t, tc.yaml), tc.env)
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
