package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// stdout runs fn with os.Stdout captured and returns what it printed.
func stdout(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	err = fn()
	os.Stdout = saved
	w.Close()
	return <-done, err
}

// essentials sets the four keys a configuration needs; a test adds its own variables after.
func essentials(t *testing.T) {
	t.Setenv("RELAY_JOB_NAME", "orders_eu")
	t.Setenv("RELAY_KAFKA_BROKERS", "127.0.0.1:1")
	t.Setenv("RELAY_KAFKA_TOPICS", "orders")
	t.Setenv("RELAY_MYSQL_DSN", "relay:dsn-S3cret@tcp(127.0.0.1:1)/relay")
}

// relay config check prints the configuration relay runs with, secrets masked; with errors it
// prints every one, each naming its key, and exits 2; a Kubernetes manifest is named as such.
func TestConfigCheck(t *testing.T) {
	essentials(t)
	t.Setenv("RELAY_MEMBERSHIP", "group")
	t.Setenv("RELAY_KAFKA_PROPERTIES", "sasl.username=relay,sasl.password=kafka-S3cret")
	out, err := stdout(t, func() error { return run(context.Background(), []string{"config", "check"}) })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# valid", "name: orders_eu", "dsn: relay:xxxxx@tcp(127.0.0.1:1)/relay", "sasl.password: xxxxx", "subtasks: 1", "membership: group"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "S3cret") {
		t.Errorf("a secret is shown:\n%s", out)
	}

	file := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(file, []byte("kafka:\n  start_offset: x\ncheckpoint:\n  interval: 1ms\nsubtasks: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = stdout(t, func() error { return run(context.Background(), []string{"config", "check", "--config", file}) })
	if code := exitCode(err); code != exitUsage || out != "" {
		t.Fatalf("an invalid configuration: exit %d, printed %q: %v", code, out, err)
	}
	for _, want := range []string{`config kafka.start_offset (RELAY_START_OFFSET): "x" is not earliest or latest`, "config checkpoint.interval (RELAY_CHECKPOINT_INTERVAL): 1ms is below 10ms",
		"config subtasks (RELAY_SUBTASKS): 2 with membership group"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in\n%v", want, err)
		}
	}

	_, err = stdout(t, func() error {
		return run(context.Background(), []string{"config", "check", "--config", filepath.Join("..", "..", "deploy", "k8s", "relay.yaml")})
	})
	if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), "this is a Kubernetes manifest, not a relay config") {
		t.Fatalf("a manifest: exit %d: %v", code, err)
	}
}

// relay preflight with an invalid configuration reports every error as a FAIL config line and
// exits 2 without dialling MySQL.
func TestPreflightNeverDialsWithAnInvalidConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialled atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	essentials(t)
	t.Setenv("RELAY_MYSQL_DSN", "relay:pw@tcp("+ln.Addr().String()+")/relay")
	t.Setenv("RELAY_START_OFFSET", "x")
	t.Setenv("RELAY_MYSQL_SESSION_TIMEOUT", "90s")
	out, err := stdout(t, func() error { return run(context.Background(), []string{"preflight"}) })
	var ce codedError
	if !errors.As(err, &ce) || ce.code != exitUsage {
		t.Fatalf("preflight: %v, want exit 2\n%s", err, out)
	}
	if !strings.Contains(out, "FAIL config: config kafka.start_offset") || !strings.Contains(out, "FAIL config: config mysql.session_timeout") ||
		strings.Contains(out, "mysql:") {
		t.Errorf("preflight printed\n%s", out)
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("preflight dialled MySQL %d times with an invalid configuration", n)
	}
}
