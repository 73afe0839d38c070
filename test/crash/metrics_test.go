package crash

// What the operator surface says after a crash and during recovery, read from the real binary's
// /metrics and /readyz.
//
// Invariant checked here: the series an operator alerts on tell the truth about the state in MySQL
// and the ledger: recovery counts exactly the branches XA RECOVER listed, records are counted once
// and only when committed, the last committed checkpoint id is the ledger's, nothing stays pending
// at rest; and /readyz says "not ready" for as long as recovery is held up, "ready" once it is done.

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/internal/xa"
)

// httpAddr waits for relay's "http listening" log line and returns the bound address.
func httpAddr(t *testing.T, p *proc) string {
	t.Helper()
	l, err := p.WaitLog(func(l harness.LogLine) bool { return l.Msg == "http listening" }, 60*time.Second)
	if err != nil {
		t.Fatalf("relay's http listener: %v\n%s", err, tail(p.Log, 20))
	}
	addr, _ := l.Fields["addr"].(string)
	return addr
}

// get fetches path from relay and returns the status and the body.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// scrape is one parsed /metrics page.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, addr string) scrape {
	t.Helper()
	code, body := get(t, addr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return scrape(mfs)
}

// value returns the sample of family name whose labels include want (relay_job is implied).
// It fails the test when no series or several series match: a missing series is itself a bug.
func (s scrape) value(t *testing.T, name string, want ...string) float64 {
	t.Helper()
	if _, ok := s[name]; !ok {
		t.Fatalf("/metrics has no %s", name)
	}
	found := s.matching(name, want...)
	if len(found) != 1 {
		t.Fatalf("%s%v: %d matching series, want 1", name, want, len(found))
	}
	return found[0]
}

// matching returns the samples of family name whose labels include want.
func (s scrape) matching(name string, want ...string) []float64 {
	mf := s[name]
	var found []float64
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			match = match && labels[want[i]] == want[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			found = append(found, m.GetCounter().GetValue())
		case m.Gauge != nil:
			found = append(found, m.GetGauge().GetValue())
		case m.Untyped != nil:
			found = append(found, m.GetUntyped().GetValue())
		}
	}
	return found
}

func (e *env) maxLedgerID() int64 {
	e.t.Helper()
	last, err := ledger.New(e.db, e.job).LastDecided(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	if last == nil {
		return 0
	}
	return last.ID
}

func (e *env) committedOrders() int64 {
	e.t.Helper()
	var n int64
	if err := e.db.QueryRow(`SELECT COALESCE(SUM(order_count), 0) FROM order_stats_minute`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// After a crash between the ledger decision and the commits, the restarted relay's metrics agree
// with XA RECOVER, the ledger and the sink table.
func TestMetricsAfterCrash(t *testing.T) {
	e := newEnv(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	// No bad records before the crash: the crashed checkpoint's ledger record count is then exactly
	// its good orders, which the restarted process must not count again.
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 3000, Batch: 100, AbortRate: 0.2, Seed: 21}); err != nil {
		t.Fatal(err)
	}
	e.crashAt(crashpoint.AfterDecide)
	k := len(e.branches())
	if k == 0 {
		t.Fatal("no prepared branch of the job after the after-decide crash")
	}
	decided, err := ledger.New(e.db, e.job).LastDecided(ctx)
	if err != nil || decided == nil || decided.State != ledger.Committing {
		t.Fatalf("after the crash: last decided checkpoint %+v (%v), want one in COMMITTING", decided, err)
	}
	_, _, goodA := totals.Snapshot()
	// Orders the restarted process itself commits: all good ones except the crashed checkpoint's,
	// which recovery commits from the crashed run's decision.
	wantOK := goodA - decided.Records

	p := e.start()
	addr := httpAddr(t, p)
	// Recovery's counters are final once it logged its outcome.
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, p.Log, "recovered")) > 0 }, "recovery to finish")
	var first scrape
	testenv.Eventually(t, 90*time.Second, func() bool {
		first = scrapeMetrics(t, addr)
		return first.value(t, "relay_records_total", "result", "ok") >= float64(wantOK)
	}, "relay to commit the orders produced before the crash")
	if got := first.value(t, "relay_records_total", "result", "ok"); got != float64(wantOK) {
		t.Fatalf("relay_records_total{result=ok} = %v, want %d (%d good orders, %d committed by recovery)", got, wantOK, goodA, decided.Records)
	}
	if got := first.value(t, "relay_transactions_total", "action", "commit", "origin", "recovery"); got != float64(k) {
		t.Errorf("relay_transactions_total{commit,recovery} = %v, want %d: the branches XA RECOVER listed", got, k)
	}
	if got := first.value(t, "relay_transactions_total", "action", "rollback", "origin", "recovery"); got != 0 {
		t.Errorf("relay_transactions_total{rollback,recovery} = %v, want 0: the crashed checkpoint was decided", got)
	}
	// Zero when the crashed checkpoint already held every order produced so far.
	committed1 := first.value(t, "relay_checkpoints_total", "result", "committed")
	if (committed1 == 0) != (wantOK == 0) {
		t.Fatalf("relay_checkpoints_total{committed} = %v after committing %d orders itself", committed1, wantOK)
	}
	t.Logf("crashed checkpoint %d held %d of %d good orders; %d branches in doubt; %v checkpoints committed since",
		decided.ID, decided.Records, goodA, k, committed1)
	if got := e.committedOrders(); got != goodA {
		t.Fatalf("MySQL holds %d orders, want %d", got, goodA)
	}

	// More orders while it runs, some bad this time: the counters move by exactly what commits.
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 1500, Batch: 100, AbortRate: 0.2, BadRate: 0.02, Seed: 22}); err != nil {
		t.Fatal(err)
	}
	_, bad, good := totals.Snapshot()
	if len(bad) == 0 {
		t.Fatal("the second batch produced no bad records; the dlq check would prove nothing")
	}
	wantOK = good - decided.Records
	var last scrape
	testenv.Eventually(t, 90*time.Second, func() bool {
		last = scrapeMetrics(t, addr)
		return last.value(t, "relay_records_total", "result", "ok") >= float64(wantOK) &&
			last.value(t, "relay_records_total", "result", "dlq") >= float64(len(bad))
	}, "relay to commit the second batch")
	// Settle: once caught up nothing is in flight, so the gauges must be at rest and agree with the ledger.
	testenv.Eventually(t, 10*time.Second, func() bool {
		last = scrapeMetrics(t, addr)
		return last.value(t, "relay_xa_pending_transactions") == 0 &&
			last.value(t, "relay_last_committed_checkpoint_id") == float64(e.maxLedgerID())
	}, "pending transactions to drain and the last committed id to match the ledger")
	// The topic ends in transaction markers, some after aborted transactions: a caught-up relay
	// shows no lag (refreshed every 5 s).
	testenv.Eventually(t, 15*time.Second, func() bool {
		last = scrapeMetrics(t, addr)
		for _, part := range []string{"0", "1"} {
			if v := last.matching("relay_consumer_lag_records", "partition", part); len(v) != 1 || v[0] != 0 {
				return false
			}
		}
		return true
	}, "the consumer lag of both partitions to read 0")
	if got := last.value(t, "relay_records_total", "result", "ok"); got != float64(wantOK) {
		t.Errorf("relay_records_total{result=ok} = %v, want %d", got, wantOK)
	}
	if got := last.value(t, "relay_records_total", "result", "dlq"); got != float64(len(bad)) {
		t.Errorf("relay_records_total{result=dlq} = %v, want %d", got, len(bad))
	}
	// Bad records are counted by reason as they are read; this process read each once.
	wantReasons := map[string]float64{}
	for _, b := range bad {
		wantReasons[b.Reason]++
	}
	for _, m := range last["relay_bad_records_total"].GetMetric() {
		var reason string
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "reason" {
				reason = lp.GetValue()
			}
		}
		if got := m.GetCounter().GetValue(); got != wantReasons[reason] {
			t.Errorf("relay_bad_records_total{reason=%q} = %v, want %v (loadgen's bad records: %v)", reason, got, wantReasons[reason], wantReasons)
		}
		delete(wantReasons, reason)
	}
	if len(wantReasons) > 0 {
		t.Errorf("relay_bad_records_total has no series for %v", wantReasons)
	}
	// Every committed checkpoint observed each phase once; the sink pool holds the subtasks'
	// connections; the server counts at least those; the build is identified.
	committedSoFar := last.value(t, "relay_checkpoints_total", "result", "committed")
	for _, m := range last["relay_checkpoint_phase_duration_seconds"].GetMetric() {
		if n := float64(m.GetHistogram().GetSampleCount()); n != committedSoFar {
			t.Errorf("relay_checkpoint_phase_duration_seconds%v: %v samples, want one per committed checkpoint (%v)", m.GetLabel(), n, committedSoFar)
		}
	}
	// Threads_connected is sampled every 5 s while the pool gauge is read at each scrape: the
	// subtasks may have opened their connections after the last sample, so wait for the next one.
	open, threads := 0.0, 0.0
	testenv.Poll(15*time.Second, func() bool {
		s := scrapeMetrics(t, addr)
		open = s.value(t, "relay_mysql_pool_connections", "pool", "sink", "state", "open")
		threads = s.value(t, "relay_mysql_threads_connected")
		return open >= 2 && threads >= open
	})
	if open < 2 || threads < open {
		t.Errorf("sink pool %v open connections (2 subtasks), server Threads_connected %v", open, threads)
	}
	if got := last.value(t, "relay_build_info"); got != 1 {
		t.Errorf("relay_build_info = %v, want 1", got)
	}
	if got := e.committedOrders(); got != good {
		t.Errorf("MySQL holds %d orders, want %d", got, good)
	}
	if committed2 := last.value(t, "relay_checkpoints_total", "result", "committed"); committed2 <= committed1 {
		t.Errorf("relay_checkpoints_total{committed} went from %v to %v across a second batch", committed1, committed2)
	}
	if got := last.value(t, "relay_transactions_total", "action", "commit", "origin", "recovery"); got != float64(k) {
		t.Errorf("relay_transactions_total{commit,recovery} = %v later, want still %d", got, k)
	}
	if got := last.value(t, "relay_transactions_total", "action", "commit", "origin", "normal"); got < 1 {
		t.Errorf("relay_transactions_total{commit,normal} = %v after committing checkpoints", got)
	}
	if got, want := last.value(t, "relay_last_committed_checkpoint_id"), float64(e.maxLedgerID()); got != want {
		t.Errorf("relay_last_committed_checkpoint_id = %v, ledger max checkpoint id %v", got, want)
	}
	if age := float64(time.Now().Unix()) - last.value(t, "relay_last_committed_checkpoint_timestamp_seconds"); age < -5 || age > 30 {
		t.Errorf("last committed checkpoint timestamp is %.0fs old while checkpoints run every 200ms", age)
	}
	// Every committed checkpoint observes both latencies; the end-to-end one starts at the Kafka
	// timestamp of its oldest record, no later than that record was polled, so it is never smaller.
	vis, e2e := last["relay_visibility_latency_seconds"], last["relay_end_to_end_latency_seconds"]
	if vis == nil || e2e == nil || len(vis.GetMetric()) != 1 || len(e2e.GetMetric()) != 1 {
		t.Fatal("/metrics lacks the latency histograms")
	}
	vh, eh := vis.GetMetric()[0].GetHistogram(), e2e.GetMetric()[0].GetHistogram()
	if vh.GetSampleCount() == 0 || eh.GetSampleCount() != vh.GetSampleCount() || eh.GetSampleSum() < vh.GetSampleSum() {
		t.Errorf("latency histograms: visibility %d samples sum %.3fs, end to end %d samples sum %.3fs",
			vh.GetSampleCount(), vh.GetSampleSum(), eh.GetSampleCount(), eh.GetSampleSum())
	}
	_ = p.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, tail(p.Log, 20))
	}
	e.finish(totals)
}

// /readyz answers 503 while recovery waits for a prepared branch of the job that another session
// still holds, and 200 once that session ends and recovery rolled the branch back (no ledger row).
func TestReadyzDuringRecovery(t *testing.T) {
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := e.db.ExecContext(ctx, "CREATE TABLE readyz_probe (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	// A branch with the job's tag for a checkpoint that has no ledger row: the verdict is rollback.
	// MariaDB refuses to resolve it from another session while this connection lives, so relay's
	// recovery has to wait.
	tag := commit.Tag(e.job, 5, 0)
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			database.Discard(conn)
		}
	}()
	for _, q := range []string{"XA START " + xa.XID(tag), "INSERT INTO readyz_probe VALUES (1)", "XA END " + xa.XID(tag), "XA PREPARE " + xa.XID(tag)} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	p := e.start()
	addr := httpAddr(t, p)
	testenv.Eventually(t, 30*time.Second, func() bool {
		return len(logEvents(t, p.Log, "branch still attached to a session, waiting")) > 0
	}, "recovery to find the held branch")
	code, body := get(t, addr, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "recovery") {
		t.Fatalf("/readyz while recovery waits: %d %q, want 503 naming recovery", code, body)
	}
	if got := scrapeMetrics(t, addr).value(t, "relay_ready"); got != 0 {
		t.Fatalf("relay_ready = %v while /readyz answers 503", got)
	}
	if len(logEvents(t, p.Log, "recovered")) != 0 {
		t.Fatal("relay logged recovered while the branch was still held")
	}

	// End the session without handing the connection back to the pool: the prepared branch
	// outlives it, now resolvable by relay.
	if err := conn.Raw(func(any) error { return driver.ErrBadConn }); err != driver.ErrBadConn {
		t.Fatalf("discarding the connection: %v", err)
	}
	_ = conn.Close()
	closed = true

	testenv.Eventually(t, 60*time.Second, func() bool {
		code, _ := get(t, addr, "/readyz")
		return code == http.StatusOK
	}, "/readyz to answer 200 after recovery")
	if left := logEvents(t, p.Log, "in-doubt branch left to the resolver"); len(left) != 0 {
		t.Fatalf("recovery gave up on the branch before the session ended (the test closed it too late): %v", left)
	}
	if bs := e.branches(); len(bs) != 0 {
		t.Fatalf("XA RECOVER still lists %v", bs)
	}
	var rows int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM readyz_probe").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("the undecided branch's row is visible: it was committed, not rolled back")
	}
	resolved := logEvents(t, p.Log, "in-doubt branch resolved")
	if len(resolved) != 1 || resolved[0]["tag"] != tag || resolved[0]["action"] != "rollback" {
		t.Fatalf("recovery resolved %v, want one rollback of %s", resolved, tag)
	}
	s := scrapeMetrics(t, addr)
	for _, c := range []struct {
		action, origin string
		want           float64
	}{{"rollback", "recovery", 1}, {"commit", "recovery", 0}, {"rollback", "resolver", 0}} {
		if got := s.value(t, "relay_transactions_total", "action", c.action, "origin", c.origin); got != c.want {
			t.Errorf("relay_transactions_total{%s,%s} = %v, want %v", c.action, c.origin, got, c.want)
		}
	}
	// relay_ready follows the readiness rule at every scrape, whether or not anything polls /readyz.
	testenv.Eventually(t, 15*time.Second, func() bool { return scrapeMetrics(t, addr).value(t, "relay_ready") == 1 }, "relay_ready to become 1")
	_ = p.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, tail(p.Log, 20))
	}
}

// /readyz turns 503 when checkpoints stop succeeding — here a session outside relay holds a row
// lock on the only key, the "hanging transaction" of the runbook — and 200 again once the lock is
// released and a checkpoint commits. Meanwhile relay's log names the blocking connection.
func TestReadyzStaleCheckpoint(t *testing.T) {
	e := newEnv(t, 1, "RELAY_CHECKPOINT_READY_MAX_AGE=2s", "RELAY_MYSQL_LOCK_WAIT_TIMEOUT=30s", "RELAY_CHECKPOINT_TIMEOUT=40s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := e.start()
	addr := httpAddr(t, p)
	testenv.Eventually(t, 30*time.Second, func() bool { code, _ := get(t, addr, "/readyz"); return code == http.StatusOK }, "/readyz 200 on an idle job")

	// One key only (one sku, one window); an outside transaction locks its row first.
	opts := loadgen.Options{Orders: 200, Batch: 100, SKUs: 1, Windows: 1, StartTS: 1764000000000, Seed: 31}
	holder := e.lockKeyRow(ctx, opts)
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, opts); err != nil {
		t.Fatal(err)
	}
	var body string
	testenv.Eventually(t, 20*time.Second, func() bool {
		var code int
		code, body = get(t, addr, "/readyz")
		return code == http.StatusServiceUnavailable
	}, "/readyz 503 while the checkpoint waits for the lock")
	if !strings.Contains(body, "last successful checkpoint") {
		t.Fatalf("/readyz says %q, want the age of the last successful checkpoint", body)
	}
	// While the wait lasts relay names the blocker (after a fifth of the lock wait timeout).
	var holderConn int64
	if err := holder.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&holderConn); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		for _, ev := range logEvents(t, p.Log, "waiting for a row lock") {
			if ev["blocker_connection"] == float64(holderConn) && ev["blocker_detached"] == false {
				return true
			}
		}
		return false
	}, fmt.Sprintf("relay to log that it waits for a lock held by connection %d", holderConn))
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { code, _ := get(t, addr, "/readyz"); return code == http.StatusOK }, "/readyz 200 after the lock is released")
	_ = p.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, tail(p.Log, 20))
	}
	e.finish(totals)
}

// relay_upserted_rows_total counts one row per key per committed checkpoint: with every order on
// one (window, sku), each checkpoint upserts exactly one row, so the counter equals the committed
// checkpoints (counting the rows of a table twice, or not at all, breaks the equality).
func TestUpsertedRowsPerCheckpoint(t *testing.T) {
	e := newEnv(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	totals := loadgen.NewTotals()
	p := e.start()
	addr := httpAddr(t, p)
	testenv.Eventually(t, 60*time.Second, func() bool { return len(logEvents(t, p.Log, "recovered")) > 0 }, "recovery to finish")
	// Paced over about a second, so the orders span several 200 ms checkpoints.
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 600, Batch: 50, Rate: 600, SKUs: 1, Windows: 1, Seed: 31}); err != nil {
		t.Fatal(err)
	}
	_, _, good := totals.Snapshot()
	var s scrape
	testenv.Eventually(t, 60*time.Second, func() bool {
		s = scrapeMetrics(t, addr)
		return s.value(t, "relay_records_total", "result", "ok") >= float64(good)
	}, "relay to commit every order")
	// A scrape is no snapshot: it may fall between the last checkpoint's counter updates. Nothing
	// commits once every order has, so two scrapes that agree are at rest.
	var cps, rows float64
	testenv.Eventually(t, 10*time.Second, func() bool {
		prevCps, prevRows := cps, rows
		s = scrapeMetrics(t, addr)
		cps = s.value(t, "relay_checkpoints_total", "result", "committed")
		rows = s.value(t, "relay_upserted_rows_total", "table", "order_stats_minute")
		return cps == prevCps && rows == prevRows
	}, "two scrapes with the same checkpoint and row counts")
	if cps < 2 {
		t.Fatalf("%d orders fit in %v checkpoint(s): the count would prove little", good, cps)
	}
	if rows != cps {
		t.Errorf("relay_upserted_rows_total = %v after %v committed checkpoints of one key each", rows, cps)
	}
	t.Logf("%d orders in %v checkpoints, %v rows upserted", good, cps, rows)
	_ = p.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, tail(p.Log, 20))
	}
	e.finish(totals)
}
