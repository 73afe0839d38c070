// Package testenv gives tests the real Kafka broker and MySQL server that scripts/services.sh runs
// (or that RELAY_TEST_KAFKA / RELAY_TEST_MYSQL_DSN name).
//
// Invariant: each test gets its own database and its own topics, so tests never see each other's
// rows, offsets or XA branches; without the services a test skips, unless RELAY_TEST_REQUIRE=1
// (make test), where it fails: a suite that silently skipped its real-server tests proves nothing.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/database"
)

func need(t testing.TB, name string) string {
	t.Helper()
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
func Suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Brokers returns the Kafka bootstrap servers.
func Brokers(t testing.TB) string { return need(t, "RELAY_TEST_KAFKA") }

// Topic creates a fresh topic with the given partitions.
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
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Error.Code() != kafka.ErrNoError {
		t.Fatal(res[0].Error)
	}
	return name
}

// AddPartitions grows a topic to total partitions.
func AddPartitions(t testing.TB, topic string, total int) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": Brokers(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: topic, IncreaseTo: total}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("add partitions: %v %v", err, res)
	}
}

// AdminDSN is the DSN of a user that may create databases.
func AdminDSN(t testing.TB) string { return need(t, "RELAY_TEST_MYSQL_DSN") }

// Database creates a fresh database and returns a DSN for it; it is dropped when the test ends
// (after its XA branches were rolled back, so a failed test leaves no locks behind).
func Database(t testing.TB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(AdminDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	name := "relay_t_" + Suffix()
	admin := Open(t, cfg.FormatDSN())
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name)
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// Open opens a pool with relay's session settings; closed when the test ends.
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := database.Open(dsn, database.Session{WaitTimeout: time.Hour, LockWaitTimeout: 10 * time.Second})
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
