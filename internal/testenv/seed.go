// The seed of a randomised test. Invariant: a randomised test draws everything random from the
// seed this returns (the load, the kill schedule, the sequences), logs it with the command that
// replays the test, and the same seed given back through the environment replays the same draws.

package testenv

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Seed returns the seed of the running test: the value of env when it is set (to replay a run),
// else def, or a fresh random seed when def is 0. env must start with RELAY_TEST_ (relay refuses
// other RELAY_* names in its environment, and the crash tests pass theirs on to it). The seed is
// logged with the command that replays the test; a failing test prints it.
func Seed(t testing.TB, env string, def uint64) uint64 {
	t.Helper()
	if !strings.HasPrefix(env, "RELAY_TEST_") {
		t.Fatalf("seed variable %s: must start with RELAY_TEST_", env)
	}
	seed, from := def, "default"
	if v := os.Getenv(env); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		seed, from = s, env
	} else if def == 0 {
		seed, from = rand.Uint64()>>1, "random"
	}
	t.Logf("seed %d (%s); replay: %s=%d go test -count=1 -run '%s' %s", seed, from, env, seed, runPattern(t.Name()), pkgDir())
	return seed
}

// runPattern is the -run pattern that selects exactly the test (or subtest) named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// pkgDir is the test's package directory relative to the module root (go test runs a test in its
// package's directory), as go test takes it: ./internal/spec.
func pkgDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	root, err := repoRoot()
	if err != nil {
		return "."
	}
	rel, err := filepath.Rel(root, wd)
	if err != nil {
		return "."
	}
	return fmt.Sprintf("./%s/", filepath.ToSlash(rel))
}
