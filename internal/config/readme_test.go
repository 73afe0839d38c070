package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README is what a user has: its links stay inside the repository, and its commands for
// several instances are accepted as written, on top of the essentials it exports.
func TestReadmeAsWritten(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, m := range regexp.MustCompile(`\]\(([^)#]+)[^)]*\)`).FindAllStringSubmatch(readme, -1) {
		target := m[1]
		if strings.Contains(target, "://") {
			continue
		}
		if rel, err := filepath.Rel(root, filepath.Join(root, target)); err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("link %s leaves the repository", target)
		} else if _, err := os.Stat(filepath.Join(root, target)); err != nil {
			t.Errorf("link %s: %v", target, err)
		}
	}
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
}
