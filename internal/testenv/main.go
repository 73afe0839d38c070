// Main: the TestMain of packages that run the real relay binary.
//
// Invariant: the binary is built once per test binary, with the crash points compiled in, before
// any test runs, and removed when the tests end; a build failure fails the whole package. Under
// -short it is not built: every test of these packages runs it against the servers, so each skips
// (serverTest) before it would start one.

package testenv

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/relay-sh/relay/internal/harness"
)

// MainWithRelay builds relay with crash points into *bin (from the package two levels below the
// module root, as test/crash and test/galera are), runs the tests and exits with their status.
func MainWithRelay(m *testing.M, bin *string) {
	flag.Parse() // testing.Short reads the flags, which m.Run would parse only later
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "relay-crash")
	if err != nil {
		panic(err)
	}
	if *bin, err = harness.BuildRelay("../..", dir, "relay-crash", "crashpoints"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
