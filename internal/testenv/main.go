// Main: the TestMain of packages that run the real relay binary.
//
// Invariant: the binary is built once per test binary, with the crash points compiled in, before
// any test runs, and removed when the tests end; a build failure fails the whole package.

package testenv

import (
	"fmt"
	"os"
	"testing"

	"github.com/relay-sh/relay/internal/harness"
)

// MainWithRelay builds relay with crash points into *bin (from the package two levels below the
// module root, as test/crash and test/galera are), runs the tests and exits with their status.
func MainWithRelay(m *testing.M, bin *string) {
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
