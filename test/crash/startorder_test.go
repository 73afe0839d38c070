package crash

// Start in any order, as a sidecar must (issue 35): relay started before MySQL and Kafka serves
// /healthz at once, says on /readyz what it waits for, waits for each however long it takes and
// then runs the job by itself, with exact totals and without ever exiting.

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// startWait is how long each service stays away: RELAY_TEST_START_WAIT (a Go duration; make
// crashtest runs 60s), else 15 s, so the test adds well under a minute to a run of the suite.
func startWait(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("RELAY_TEST_START_WAIT")
	if v == "" {
		return 15 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("RELAY_TEST_START_WAIT=%q: want a positive Go duration", v)
	}
	return d
}

// relay is started with nothing listening at its MySQL and Kafka addresses (the shared servers are
// never stopped: each address gets a proxy to them later). For startWait it must stay up, answer
// /healthz 200 and /readyz 503 "waiting for mysql: ..."; then MySQL appears, and for another
// startWait it must say "waiting for kafka: ..."; then Kafka appears (bootstrap only: the broker
// advertises its own address), and the job must commit what the topic holds, to the exact totals,
// the same process throughout. The old start gave up after about 7 s ("mysql not ready yet" 7
// times, exit 1) and served nothing before MySQL answered.
func TestStartBeforeDependencies(t *testing.T) {
	t.Parallel() // bound by waits, not work: see TestMain
	wait := startWait(t)
	e := newEnv(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait+3*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 3000, Batch: 100, AbortRate: 0.1, BadRate: 0.01, SKUs: 40, Windows: 5, Seed: 351}); err != nil {
		t.Fatal(err)
	}
	dsn, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	realMySQL := dsn.Addr
	dsn.Addr = testenv.FreeAddr(t)
	kafkaAddr := testenv.FreeAddr(t)
	p := e.start("RELAY_MYSQL_DSN="+dsn.FormatDSN(), "RELAY_KAFKA_BROKERS="+kafkaAddr)
	addr := httpAddr(t, p)

	// waiting holds, until the deadline, that relay lives, /healthz answers 200 and /readyz 503
	// with the reason (once it said so: right after a service appears the reason may still name
	// it until the next attempt).
	waiting := func(reason string, until time.Time) {
		t.Helper()
		said := false
		for time.Now().Before(until) || !said {
			p.exited(t)
			if code, body := get(t, addr, "/healthz"); code != http.StatusOK {
				t.Fatalf("/healthz answered %d %q while relay waits", code, body)
			}
			code, body := get(t, addr, "/readyz")
			if code != http.StatusServiceUnavailable {
				t.Fatalf("/readyz answered %d %q while relay waits for %q", code, body, reason)
			}
			said = said || strings.HasPrefix(body, reason)
			if !said && time.Now().After(until.Add(30*time.Second)) {
				t.Fatalf("/readyz says %q, want %q...", body, reason)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waiting("waiting for mysql: ", time.Now().Add(wait))
	testenv.NewFaultProxyAt(t, dsn.Addr, realMySQL)
	t.Logf("MySQL appears after %s", wait)
	waiting("waiting for kafka: ", time.Now().Add(wait))
	testenv.NewFaultProxyAt(t, kafkaAddr, e.brokers)
	t.Logf("Kafka appears after another %s", wait)

	// More orders once everything is up, into the same topic.
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 2000, Batch: 100, AbortRate: 0.1, BadRate: 0.01, SKUs: 40, Windows: 5, Seed: 352}); err != nil {
		t.Fatal(err)
	}
	x := e.expected(totals)
	testenv.Poll(2*time.Minute, func() bool {
		p.exited(t)
		return e.diffOracle(x) == ""
	})
	s := scrapeMetrics(t, addr)
	for _, dep := range []string{"mysql", "kafka"} {
		if n := s.value(t, "relay_startup_waits_total", "dependency", dep); n < 1 {
			t.Errorf("relay_startup_waits_total{dependency=%q} = %v after waiting for it", dep, n)
		}
		if n := len(logEvents(t, p.Log, "waiting for "+dep)); n < 1 {
			t.Errorf("no %q log line", "waiting for "+dep)
		}
	}
	if code, body := get(t, addr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz answered %d %q once the job caught up", code, body)
	}
	e.stopAll([]*proc{p})
	e.checkEnd(totals, x, nil)
}

// How a wait at start ends without the services: SIGTERM stops it cleanly (exit 0),
// startup_wait_timeout gives up (exit 1, naming what it waited for), and a wrong password is not
// waited for at all (exit 1 at once).
func TestStartWaitEnds(t *testing.T) {
	e := newEnv(t, 1)
	dsn, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	absent := *dsn
	absent.Addr = testenv.FreeAddr(t)
	waitingFor := func(l harness.LogLine) bool { return l.Msg == "waiting for mysql" }

	p := e.start("RELAY_MYSQL_DSN=" + absent.FormatDSN())
	if _, err := p.WaitLog(waitingFor, 30*time.Second); err != nil {
		t.Fatalf("no 'waiting for mysql': %v\n%s", err, tail(p.Log, 20))
	}
	_ = p.Signal(syscall.SIGTERM)
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("SIGTERM while waiting: %v, want exit 0\n%s", err, tail(p.Log, 20))
	}
	if len(logEvents(t, p.Log, "stopped cleanly before the job started")) != 1 {
		t.Errorf("no 'stopped cleanly before the job started'\n%s", tail(p.Log, 20))
	}

	began := time.Now()
	p = e.start("RELAY_MYSQL_DSN="+absent.FormatDSN(), "RELAY_STARTUP_WAIT_TIMEOUT=3s")
	err = p.wait(t, 30*time.Second)
	if took := time.Since(began); err == nil || took < 3*time.Second ||
		!strings.Contains(tail(p.Log, 5), "gave up waiting at start after startup_wait_timeout 3s") {
		t.Fatalf("startup_wait_timeout 3s: %v after %s, want exit 1 after 3s naming the setting\n%s", err, took, tail(p.Log, 20))
	}

	denied := *dsn
	denied.Passwd = "wrong-" + denied.Passwd
	began = time.Now()
	p = e.start("RELAY_MYSQL_DSN=" + denied.FormatDSN())
	err = p.wait(t, 30*time.Second)
	if took := time.Since(began); err == nil || took > 10*time.Second || len(logEvents(t, p.Log, "waiting for mysql")) != 0 ||
		!strings.Contains(tail(p.Log, 5), "Error 1045") {
		t.Fatalf("wrong password: %v after %s, want exit 1 at once on Error 1045 without waiting\n%s", err, took, tail(p.Log, 20))
	}
}

// relay reading a registry format is started with nothing listening at its Schema Registry
// address, MySQL and Kafka up (the registry is the third dependency it may start before): for
// startWait/3 it must stay up, answer /healthz 200 and /readyz 503 "waiting for schema_registry:
// ...", and read nothing; then the registry appears (a proxy to the shared one), and the job must
// commit what the topic holds, its writer schema changed meanwhile, to the exact totals, the same
// process throughout, with nothing good dead-lettered.
func TestStartBeforeRegistry(t *testing.T) {
	t.Parallel() // bound by waits, not work: see TestMain
	wait := startWait(t) / 3
	addr := testenv.FreeAddr(t)
	direct := testenv.Registry(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	e := formatEnv(t, "protobuf", 2, "http://"+addr+u.Path)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 3000, Batch: 100, AbortRate: 0.1, BadRate: 0.01, SKUs: 40, Windows: 5, Seed: 361, EvolveAfter: 1500}); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	maddr := httpAddr(t, p)
	for until := time.Now().Add(wait); time.Now().Before(until); time.Sleep(500 * time.Millisecond) {
		p.exited(t)
		if code, body := get(t, maddr, "/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz answered %d %q while relay waits for the registry", code, body)
		}
		if code, body := get(t, maddr, "/readyz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "waiting for schema_registry: ") {
			// Before the registry is asked, relay may still be waiting on an earlier step.
			if time.Until(until) < wait/2 {
				t.Fatalf("/readyz answered %d %q, want 503 waiting for schema_registry", code, body)
			}
		}
	}
	if n := len(e.ledgerRows()); n != 0 {
		t.Fatalf("%d checkpoints decided before the registry answered", n)
	}
	testenv.NewFaultProxyAt(t, addr, u.Host)
	t.Logf("the registry appears after %s", wait)
	x := e.expected(totals)
	testenv.Poll(2*time.Minute, func() bool {
		p.exited(t)
		return e.diffOracle(x) == ""
	})
	s := scrapeMetrics(t, maddr)
	if n := s.value(t, "relay_startup_waits_total", "dependency", "schema_registry"); n < 1 {
		t.Errorf("relay_startup_waits_total{dependency=\"schema_registry\"} = %v after waiting for it", n)
	}
	e.stopAll([]*proc{p})
	e.checkEnd(totals, x, nil)
}
