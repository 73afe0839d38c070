package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every command's --help ends with the exit codes it can return, each with the table's meaning, and
// no other; relay help lists them all.
func TestHelpListsExitCodes(t *testing.T) {
	var out bytes.Buffer
	helpOut = &out
	defer func() { helpOut = os.Stdout }()
	// Every command and subcommand has its list.
	for _, c := range commands() {
		switch c.name {
		case "txns":
			for _, sub := range []string{"list", "resolve"} {
				if _, ok := exitsOf["txns "+sub]; !ok {
					t.Errorf("txns %s has no exit codes in exitsOf", sub)
				}
			}
		case "offsets", "membership", "config":
			for _, sub := range map[string][]string{"offsets": {"reset"}, "membership": {"switch", "forget"}, "config": {"check"}}[c.name] {
				if _, ok := exitsOf[c.name+" "+sub]; !ok {
					t.Errorf("%s %s has no exit codes in exitsOf", c.name, sub)
				}
			}
		case "spec":
			for _, sub := range []string{"diff", "accept"} {
				if _, ok := exitsOf["spec "+sub]; !ok {
					t.Errorf("spec %s has no exit codes in exitsOf", sub)
				}
			}
		default:
			if _, ok := exitsOf[c.name]; !ok {
				t.Errorf("%s has no exit codes in exitsOf", c.name)
			}
		}
	}
	line := regexp.MustCompile(`(?m)^  ([0-9])  (.*)$`)
	for name, codes := range exitsOf {
		out.Reset()
		if err := run(context.Background(), append(strings.Fields(name), "--help")); err != nil {
			t.Errorf("relay %s --help: %v", name, err)
			continue
		}
		_, section, ok := strings.Cut(out.String(), "\nexit codes:\n")
		if !ok {
			t.Errorf("relay %s --help has no exit codes section:\n%s", name, out.String())
			continue
		}
		var listed []int
		for _, m := range line.FindAllStringSubmatch(section, -1) {
			var c int
			fmt.Sscan(m[1], &c)
			listed = append(listed, c)
			if c >= len(exitMeanings) || m[2] != exitMeanings[c] {
				t.Errorf("relay %s --help: exit code %d means %q, the table says %q", name, c, m[2], exitMeanings[min(c, len(exitMeanings)-1)])
			}
		}
		if !slices.Equal(listed, codes) {
			t.Errorf("relay %s --help lists exit codes %v, want %v", name, listed, codes)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"help"}); err != nil {
		t.Fatal(err)
	}
	for c := range exitMeanings {
		if !strings.Contains(out.String(), fmt.Sprintf(" %d ", c)) {
			t.Errorf("relay help does not list exit code %d:\n%s", c, out.String())
		}
	}
}

// A status a command's source gives (codedError{exit...}, notConfirmed) is in that command's list:
// a function's command is the help name it passes to flagSet or opsFlags.
func TestExitCodesOfTheSource(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`(?:opsFlags|flagSet)\("([a-z ]+)"`)
	coded := regexp.MustCompile(`codedError\{(exit[A-Za-z]+)`)
	table, err := os.ReadFile("exit.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\t(exit[A-Za-z]+)\s*=\s*([0-9]+)$`).FindAllStringSubmatch(string(table), -1) {
		c, _ := strconv.Atoi(m[2])
		consts[m[1]] = c
	}
	if len(consts) != len(exitMeanings) {
		t.Fatalf("exit.go declares %d statuses, exitMeanings has %d", len(consts), len(exitMeanings))
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Per function: the command a function names is the one its statuses belong to.
		for _, src := range strings.Split(string(b), "\nfunc ") {
			var used []int
			for _, m := range coded.FindAllStringSubmatch(src, -1) {
				c, ok := consts[m[1]]
				if !ok {
					t.Errorf("%s: codedError with %s, which is not a status of exit.go", f, m[1])
				}
				used = append(used, c)
			}
			if strings.Contains(src, "notConfirmed(err)") {
				used = append(used, exitNotConfirmed)
			}
			for _, m := range named.FindAllStringSubmatch(src, -1) {
				for _, c := range used {
					if !slices.Contains(exitsOf[m[1]], c) {
						t.Errorf("%s: relay %s can exit %d, which its help does not list", f, m[1], c)
					}
				}
			}
		}
	}
}

// Every command's synopsis (the usage line of its --help) names each flag the command takes, so
// the short form never hides one (--readyz, --yes); a command that takes more than it can name says
// [flags]. --instance is only offered where the process's share matters.
func TestSynopsisNamesEveryFlag(t *testing.T) {
	var out bytes.Buffer
	helpOut = &out
	defer func() { helpOut = os.Stdout }()
	flagLine := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for name := range exitsOf {
		out.Reset()
		if err := run(context.Background(), append(strings.Fields(name), "--help")); err != nil {
			t.Fatalf("relay %s --help: %v", name, err)
		}
		synopsis, _, _ := strings.Cut(out.String(), "\n")
		if strings.Contains(synopsis, "[flags]") {
			continue
		}
		_, flags, _ := strings.Cut(out.String(), "\nflags:\n")
		flags, _, _ = strings.Cut(flags, "\n\n")
		for _, m := range flagLine.FindAllStringSubmatch(flags, -1) {
			if !regexp.MustCompile(`--` + m[1] + `\b`).MatchString(synopsis) {
				t.Errorf("relay %s: the synopsis %q lacks --%s", name, synopsis, m[1])
			}
		}
	}
}
