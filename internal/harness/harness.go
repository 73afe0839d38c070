// Package harness is relay's end-to-end harness, shared by the crash tests (test/crash, through
// internal/testenv) and the benchmarks (bench): it starts and stops the relay binary, reads its
// JSON log, and makes and inspects the topics, databases and ledgers a run uses, against the real
// Kafka broker and MySQL/MariaDB server.
//
// Invariant: every function returns its failure as an error and registers nothing: a test turns an
// error into t.Fatal and its cleanups into t.Cleanup, a benchmark into its own cleanup list. So
// this package never imports testing, nor a package whose own tests import internal/testenv (that
// would be an import cycle): only internal/database and internal/fault of relay.
package harness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Suffix is a short random name part: topics, databases and jobs carry one, so runs never see each
// other's data.
func Suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FreeAddr is a loopback address with a port nothing listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// ServicePID is the pid of the server (kafka or mariadb) that scripts/services.sh started for the
// repository at root, from its pid file; an error when there is none (servers named by RELAY_TEST_*).
func ServicePID(root, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(root, ".cache/services", name+".pid"))
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", name, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", name, err)
	}
	return n, nil
}

// BuildRelay builds the relay binary of the module at root into dir, with the build tags given
// (the crash tests use "crashpoints"), and returns its path; the go tool's output goes to stderr.
func BuildRelay(root, dir, name string, tags ...string) (string, error) {
	bin := filepath.Join(dir, name)
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	build := exec.Command("go", append(args, "-o", bin, "./cmd/relay")...)
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building relay (tags %v): %w", tags, err)
	}
	return bin, nil
}
