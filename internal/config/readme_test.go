package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README is what a user has: its commands for several instances are accepted as written, on
// top of the essentials it exports, and so is its pipeline spec example. (Its links, and every
// other document's, are checked by cmd/relay's TestDocsPointOnlyIntoTheRepo.)
func TestReadmeAsWritten(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	var base []string
	for _, m := range regexp.MustCompile(`(?m)^export (RELAY_\w+)='?([^'\n]*)'?$`).FindAllStringSubmatch(readme, -1) {
		base = append(base, m[1]+"="+m[2])
	}
	assign := regexp.MustCompile(`(RELAY_\w+)=(\S+)`)
	flag := regexp.MustCompile(`--instance (\S+)`)
	examples := 0
	for _, line := range strings.Split(readme, "\n") {
		if !strings.Contains(line, "bin/relay run") || !strings.Contains(line, "instance") {
			continue
		}
		for _, cmd := range strings.Split(line, "# or:") {
			if !strings.Contains(cmd, "bin/relay run") {
				continue
			}
			cmd, _, _ = strings.Cut(cmd, "#")
			env := append([]string(nil), base...)
			for _, m := range assign.FindAllStringSubmatch(cmd, -1) {
				env = append(env, m[1]+"="+m[2])
			}
			c, err := Load("", env)
			if m := flag.FindStringSubmatch(cmd); m != nil {
				c.Instance = m[1] // as cmd/relay applies the flag over the environment
			}
			if err == nil {
				err = c.Validate()
			}
			if c.InstanceCount() < 2 {
				t.Errorf("%q: not an example of several instances", cmd)
			}
			if err != nil {
				t.Errorf("README example %q is refused: %v", strings.TrimSpace(cmd), err)
			}
			examples++
		}
	}
	if len(base) == 0 || examples == 0 {
		t.Fatalf("found %d exported essentials and %d commands with an instance in README.md", len(base), examples)
	}
	specs := 0
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		if !strings.Contains(m[1], "aggregates:") {
			continue
		}
		file := filepath.Join(t.TempDir(), "spec.yaml")
		if err := os.WriteFile(file, []byte(m[1]), 0o600); err != nil {
			t.Fatal(err)
		}
		env := append(append([]string(nil), base...), "RELAY_PIPELINE_FILE="+file)
		if regexp.MustCompile(`(?m)^  format: (avro|protobuf|json_schema)$`).MatchString(m[1]) {
			// A registry format's example is run against a registry, as README says.
			env = append(env, "RELAY_SCHEMA_REGISTRY_URL=http://registry:8081")
		}
		c, err := Load("", env)
		if err == nil {
			err = c.Validate()
		}
		if err == nil {
			_, err = c.Plan()
		}
		if err != nil {
			t.Errorf("README's spec example is refused: %v\n%s", err, m[1])
		}
		specs++
	}
	if specs == 0 {
		t.Errorf("README.md has no pipeline spec example (a yaml block with aggregates:)")
	}
}
