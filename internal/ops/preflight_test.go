package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/testenv"
)

func checkNamed(t *testing.T, cs []Check, name string) Check {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check in %v", name, cs)
	return Check{}
}

// On the test setup every check passes; an orphan branch is a warning, not a failure.
func TestPreflightPasses(t *testing.T) {
	e, ctx := newEnv(t, 3)
	cs := Preflight(ctx, e)
	for _, c := range cs {
		if c.Status == CheckFail {
			t.Errorf("%s", c)
		}
	}
	for _, name := range []string{"config", "mysql", "galera", "schema", "xa", "xa_recover", "binlog_format", "session_timeout",
		"lock_wait_timeout", "connections", "orphans", "topics", "tag_length"} {
		checkNamed(t, cs, name)
	}
	if c := checkNamed(t, cs, "topics"); !strings.Contains(c.Detail, "3 partitions") {
		t.Fatalf("topics: %s", c)
	}
	orphan := "renamed" + testenv.Suffix() + "-9-0"
	prepare(t, ctx, e, orphan)
	cs = Preflight(ctx, e)
	if c := checkNamed(t, cs, "orphans"); c.Status != CheckWarn || !strings.Contains(c.Detail, orphan) {
		t.Fatalf("orphans with %s prepared: %s", orphan, c)
	}
	if n := Failed(cs); n != 0 {
		t.Fatalf("%d checks failed: %v", n, cs)
	}
}

// A session timeout shorter than interval + timeout + restart allowance, as the server's sessions
// really get it, fails with the numbers. (The configuration's own rule refuses the same setting
// before anything is dialled, config.Validate; here the server's side is checked alone.)
func TestPreflightFailsOnShortSessionTimeout(t *testing.T) {
	e, ctx := newEnv(t, 1, func(c *config.Config) {
		c.MySQL.SessionTimeout = time.Minute
		c.Kafka.Topics = config.List{"missing_" + testenv.Suffix()}
	})
	cs := Preflight(ctx, e)
	if c := checkNamed(t, cs, "session_timeout"); c.Status != CheckFail ||
		!strings.Contains(c.Detail, "wait_timeout 1m0s") || !strings.Contains(c.Detail, "= 3m1s (short by 2m2s)") || !strings.Contains(c.Detail, "RELAY_MYSQL_SESSION_TIMEOUT") {
		t.Fatalf("session_timeout: %s", c)
	}
	if c := checkNamed(t, cs, "topics"); c.Status != CheckFail || !strings.Contains(c.Detail, "does not exist") {
		t.Fatalf("topics: %s", c)
	}
	if c := checkNamed(t, cs, "xa"); c.Status != CheckOK {
		t.Fatalf("xa should still pass: %s", c)
	}
	if n := Failed(cs); n != 2 {
		t.Fatalf("%d checks failed, want 2: %v", n, cs)
	}
}
