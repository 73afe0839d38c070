package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A user has only the repository: no file in it points to the design document the project started
// from (it is not in the repo), and every relative link of its Markdown leads to a file and a
// heading that exist.
func TestDocsPointOnlyIntoTheRepo(t *testing.T) {
	root := filepath.Join("..", "..")
	design := regexp.MustCompile(`DESIGN(\.md)?\s*§|DESIGN\.md`)
	link := regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		ext := filepath.Ext(path)
		if d.IsDir() || !(ext == ".md" || ext == ".go" || ext == ".yml" || ext == ".yaml" || ext == ".sh" ||
			d.Name() == "Makefile" || d.Name() == "Dockerfile") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(b), "\n") {
			if design.MatchString(line) && !strings.HasSuffix(path, "docs_test.go") {
				t.Errorf("%s:%d points to a design section the repo does not have: %s", rel, i+1, strings.TrimSpace(line))
			}
			if ext != ".md" {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target, anchor := m[1], strings.TrimPrefix(m[2], "#")
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file := path
				if target != "" {
					file = filepath.Join(filepath.Dir(path), target)
				}
				if r, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(r, "..") {
					t.Errorf("%s:%d links to %s, outside the repo", rel, i+1, m[0])
					continue
				}
				tb, err := os.ReadFile(file)
				if err != nil {
					t.Errorf("%s:%d links to %s, which is not in the repo", rel, i+1, m[0])
					continue
				}
				if anchor != "" && !hasHeading(string(tb), anchor) {
					t.Errorf("%s:%d links to %s: %s has no such heading", rel, i+1, m[0], target)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hasHeading reports whether Markdown text has a heading whose GitHub anchor is anchor.
func hasHeading(text, anchor string) bool {
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		if strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-") == anchor {
			return true
		}
	}
	return false
}
