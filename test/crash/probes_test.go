package crash

// The operator's probes of the real binary agree with each other and with the truth: the series
// alerts read exist from the first moment /readyz says ready, the in-doubt age counts from when the
// branch was left behind (not from this process's first look), `relay status` calls a job running
// only when /readyz does, and every line relay writes is a JSON log entry, librdkafka's included.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/ops"
	"github.com/relay-sh/relay/internal/testenv"
)

// The first scrape after /readyz turned 200 already has the lag of every partition (and
// relay_ready 1): dashboards and alerts never see a ready relay without them.
func TestMetricsPresentWhenReady(t *testing.T) {
	e := newEnv(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 400, Batch: 100, Seed: 41}); err != nil {
		t.Fatal(err)
	}
	// No checkpoint may commit before the first scrape, which reads the lag of every record: a
	// long interval, no idle cut (the stop's drain commits them).
	p := e.start("RELAY_CHECKPOINT_INTERVAL=30s", "RELAY_CHECKPOINT_IDLE_AFTER=0")
	addr := httpAddr(t, p)
	testenv.Eventually(t, 60*time.Second, func() bool {
		code, _ := getQuick(addr, "/readyz")
		return code == http.StatusOK
	}, "/readyz 200")
	s := scrapeMetrics(t, addr)
	lag := 0.0
	for _, part := range []string{"0", "1"} {
		v := s.matching("relay_consumer_lag_records", "topic", e.topic, "partition", part)
		if len(v) != 1 {
			t.Fatalf("first scrape after /readyz 200: %d relay_consumer_lag_records series for partition %s, want 1", len(v), part)
		}
		lag += v[0]
	}
	// Read at the start, before anything was committed: every record produced still lies ahead
	// (transaction markers count as well).
	if _, _, good := totals.Snapshot(); lag < float64(good) {
		t.Errorf("first scrape after /readyz 200: lag %v over both partitions, want at least the %d orders produced", lag, good)
	}
	if got := s.value(t, "relay_ready"); got != 1 {
		t.Errorf("first scrape after /readyz 200: relay_ready = %v", got)
	}
	for _, name := range alertedFamilies(t) {
		if len(s[name].GetMetric()) == 0 {
			t.Errorf("first scrape after /readyz 200 has no %s, which deploy/prometheus/alerts.yml alerts on", name)
		}
	}
	e.stopAll([]*proc{p})
	e.finish(totals)
}

// alertedFamilies lists the relay families the alert rules name.
func alertedFamilies(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, name := range regexp.MustCompile(`\brelay_[a-z_]+`).FindAllString(line, -1) {
			if !seen[name] && !strings.HasPrefix(name, "relay_job") {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	if len(out) < 8 {
		t.Fatalf("found only %v in alerts.yml", out)
	}
	return out
}

// getQuick is get without failing the test: /readyz is polled as fast as relay answers.
func getQuick(addr, path string) (int, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// relay_xa_in_doubt_oldest_age_seconds counts from when relay first found the branch left behind,
// across a restart: a process that finds it again reports the whole time, not 0.
func TestInDoubtAgeSurvivesRestart(t *testing.T) {
	t.Parallel() // bound by waits, not work: see TestMain
	e := newEnv(t, 1, "RELAY_CHECKPOINT_RESOLVE_INTERVAL=5s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Attached to this test's session, the branch can be resolved by nobody: recovery leaves it to
	// the resolver, which can only watch it age.
	zombie, _ := e.attachedBranch(ctx, "doubt_probe", 3)
	prepared := time.Now()

	first := e.start()
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, first.Log, "in-doubt branch left to the resolver")) == 1 }, "the first run's recovery to leave the branch")
	left := time.Now() // the first run noted the branch before this
	first.Kill()

	unset := time.Now() // the gauges were set after this: the start, then each scrape that saw none
	second := e.start()
	addr := httpAddr(t, second)
	var age float64
	testenv.Eventually(t, 60*time.Second, func() bool {
		at := time.Now()
		s := scrapeMetrics(t, addr)
		age = s.value(t, "relay_xa_in_doubt_oldest_age_seconds")
		n := s.value(t, "relay_xa_in_doubt_branches")
		if n == 0 {
			unset = at
		}
		// A scrape reads the two gauges in no set order: the age may still be the old 0.
		return n == 1 && age > 0
	}, "the second run to export the branch")
	// The pass that set the gauge ran after the last scrape that saw no branch (a second of slack:
	// the ages are measured on the server's clock).
	if low, high := unset.Sub(left).Seconds()-1, time.Since(prepared).Seconds(); age < low || age > high {
		t.Fatalf("second run's first in-doubt age %.1fs, want between %.1fs (since the first run found it) and %.1fs (since it was prepared)", age, low, high)
	}
	t.Logf("in-doubt age %.1fs at the second run's first pass, %.1fs after the prepare", age, time.Since(prepared).Seconds())

	zombie.Close() // now resolvable: the resolver rolls it back (no ledger row) and forgets it
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := scrapeMetrics(t, addr)
		return s.value(t, "relay_xa_in_doubt_branches") == 0 && s.value(t, "relay_xa_in_doubt_oldest_age_seconds") == 0
	}, "the in-doubt gauges back to 0")
	var rows int
	if err := e.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM relay_in_doubt WHERE job = ?", e.job).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("relay_in_doubt holds %d rows of the job after the branch was resolved (%v)", rows, err)
	}
	second.Kill()
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// `relay status` says running exactly when /readyz answers 200: it asks /readyz at the configured
// http_addr, so a relay whose checkpoints are stuck behind a lock shows as not ready in both.
func TestStatusAgreesWithReadyz(t *testing.T) {
	e := newEnv(t, 1, "RELAY_CHECKPOINT_READY_MAX_AGE=2s", "RELAY_MYSQL_LOCK_WAIT_TIMEOUT=30s", "RELAY_CHECKPOINT_TIMEOUT=40s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := freeAddr(t)
	httpEnv := "RELAY_HTTP_ADDR=" + addr
	p := e.start(httpEnv)
	testenv.Eventually(t, 60*time.Second, func() bool { code, _ := getQuick(addr, "/readyz"); return code == http.StatusOK }, "/readyz 200 on an idle job")
	// status reports what /readyz said when status asked; ask /readyz right before and after.
	agree := func(want bool) {
		t.Helper()
		stdout, stderr, code := e.cli([]string{httpEnv}, "status", "--json")
		var rep ops.StatusReport
		if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil || len(rep.Fences) != 1 {
			t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
		}
		f := rep.Fences[0]
		if !f.Held || f.Ready == nil || *f.Ready != want {
			t.Fatalf("status --json fence %s: held %v, ready %s (%q); want held and ready=%v like /readyz", f.Instance, f.Held, fmtBool(f.Ready), f.Readiness, want)
		}
		text, stderr, code := e.cli([]string{httpEnv}, "status")
		if code != 0 {
			t.Fatalf("status: exit %d\n%s%s", code, text, stderr)
		}
		if running := strings.Contains(text, "running, ready"); running != want {
			t.Fatalf("status says (ready %v, want %v):\n%s", running, want, text)
		}
		wantReady := 0.0
		if want {
			wantReady = 1
		}
		if got := scrapeMetrics(t, addr).value(t, "relay_ready"); got != wantReady {
			t.Fatalf("relay_ready = %v while /readyz and status say ready=%v", got, want)
		}
	}
	agree(true)

	// One key; an outside transaction locks its row, so the checkpoint waits and grows stale.
	opts := loadgen.Options{Orders: 100, Batch: 100, SKUs: 1, Windows: 1, StartTS: 1764000000000, Seed: 43}
	holder := e.lockKeyRow(ctx, opts)
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, opts); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { code, _ := getQuick(addr, "/readyz"); return code == http.StatusServiceUnavailable }, "/readyz 503 while the checkpoint waits for the lock")
	agree(false)
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { code, _ := getQuick(addr, "/readyz"); return code == http.StatusOK }, "/readyz 200 after the lock is released")
	agree(true)
	e.stopAll([]*proc{p})
	e.finish(totals)
}

func fmtBool(b *bool) string {
	if b == nil {
		return "null"
	}
	return strconv.FormatBool(*b)
}

// With a broker that refuses connections, librdkafka logs errors; they reach relay's log as zap
// JSON entries of the relay.consumer.librdkafka logger, never as librdkafka's "%3|..." lines.
func TestKafkaClientLogsAreJSON(t *testing.T) {
	e := newEnv(t, 1)
	dead := freeAddr(t)
	p := e.start("RELAY_KAFKA_BROKERS=" + dead)
	testenv.Eventually(t, 60*time.Second, func() bool {
		for _, ev := range jsonLines(t, p.Log) {
			if ev["logger"] == "relay.consumer.librdkafka" && ev["level"] == "error" && strings.Contains(ev["msg"].(string), dead) {
				return true
			}
		}
		return false
	}, "an error of librdkafka about "+dead+" in relay's log")
	p.Kill()
	jsonLines(t, p.Log)
}

// jsonLines parses every line of a relay log, failing the test on one that is no zap JSON entry
// (an object with level, logger and msg).
func jsonLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	lines, err := harness.ReadLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range lines {
		if l.Fields == nil {
			t.Fatalf("%s line %d is not a JSON object: %s", path, l.N, l.Text)
		}
		for _, k := range []string{"level", "logger", "msg"} {
			if _, ok := l.Fields[k].(string); !ok {
				t.Fatalf("%s line %d has no %s: %s", path, l.N, k, l.Text)
			}
		}
		out = append(out, l.Fields)
	}
	return out
}
