// Package testenv gives tests the real Kafka broker and MySQL server that scripts/services.sh runs
// (or that RELAY_TEST_KAFKA / RELAY_TEST_MYSQL_DSN name): internal/harness's helpers as testing.TB
// conveniences (a failure fails the test, a cleanup runs when it ends), and the fault proxy.
//
// Invariant: each test gets its own database and its own topics, so tests never see each other's
// rows, offsets or XA branches; without the services a test skips, unless RELAY_TEST_REQUIRE=1
// (make test), where it fails: a suite that silently skipped its real-server tests proves nothing.
// Under -short (make test-unit, the fast tier) every test of a real server skips, services or not
// (serverTest): whatever asks testenv for a server is left out, and only that.
package testenv

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/harness"
)

// serverTest skips t in the fast tier. Every test of a real server comes through here (need, Galera)
// before it touches one, so this is the one place that decides what -short leaves out; -short wins
// over RELAY_TEST_REQUIRE, since whoever passed it asked for no servers.
func serverTest(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: -short (make test-unit) runs no test against real servers", what)
	}
}

func need(t testing.TB, name string) string {
	t.Helper()
	serverTest(t, name)
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("RELAY_TEST_REQUIRE") == "1" {
			t.Fatalf("%s is not set: run the suite with `make test`", name)
		}
		t.Skipf("%s not set; run `make test` (or scripts/services.sh up) for tests against real servers", name)
	}
	return v
}

// Suffix is a short random name part.
func Suffix() string { return harness.Suffix() }

// Brokers returns the Kafka bootstrap servers.
func Brokers(t testing.TB) string { return need(t, "RELAY_TEST_KAFKA") }

// Topic creates a fresh topic with the given partitions, named after the test.
func Topic(t testing.TB, partitions int) string {
	t.Helper()
	brokers := Brokers(t)
	name := "t_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, strings.ToLower(t.Name())) + "_" + Suffix()
	if len(name) > 200 {
		name = name[:200]
	}
	if err := harness.CreateTopic(brokers, name, partitions); err != nil {
		t.Fatal(err)
	}
	return name
}

// AddPartitions grows a topic to total partitions.
func AddPartitions(t testing.TB, topic string, total int) {
	t.Helper()
	if err := harness.AddPartitions(Brokers(t), topic, total); err != nil {
		t.Fatal(err)
	}
}

// AdminDSN is the DSN of a user that may create databases.
func AdminDSN(t testing.TB) string { return need(t, "RELAY_TEST_MYSQL_DSN") }

// Database creates a fresh database and returns a DSN for it; it is dropped when the test ends
// (after its XA branches were rolled back, so a failed test leaves no locks behind).
func Database(t testing.TB) string {
	t.Helper()
	d, err := harness.CreateDatabase(AdminDSN(t), "relay_t_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Drop() })
	return d.DSN
}

// Open opens a pool with relay's session settings; closed when the test ends.
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := harness.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Context is a test context with a deadline.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
