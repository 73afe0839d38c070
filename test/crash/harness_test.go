// Package crash kills the real relay binary (built with the crashpoints tag) against real Kafka and
// MariaDB, restarts it, and compares exact totals. It is the proof of exactly-once.
//
// Invariant of every test here: what MySQL holds at the end equals, to the last 0.0001, what the
// committed Kafka transactions carried; no branch of the job is left in XA RECOVER; the ledger's
// offsets leave nothing unread; each bad record sits in the dead-letter table once.
package crash

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/internal/xa"
	"github.com/relay-sh/relay/test/oracle"
)

var relayBin string

// TestMain builds relay once for every test. Most tests run one after another; those whose time is
// spent waiting (a lease to lapse, a fault schedule to play out, a service kept away) call
// t.Parallel, so that they wait beside each other once the others are done, go test's -parallel
// (GOMAXPROCS) at a time. Each has its own job, topic, database and proxies; none stops a shared
// server. What they assert does not depend on running alone: liveness bounds, never timings.
func TestMain(m *testing.M) { testenv.MainWithRelay(m, &relayBin) }

// env is one job's test environment.
type env struct {
	t       *testing.T
	job     string
	topic   string
	dsn     string
	db      *sql.DB
	brokers string
	extra   []string
	logs    []string // one log file per relay run, in order
	dir     string
	held    bool // RELAY_MODE=held
	detail  bool // the append sink is on (table order_details)
	// oracle is the spec the test runs, as test/oracle reads it; nil is the default spec.
	oracle  *oracle.Spec
	skipBad bool // bad_input_policy=skip: bad records are counted, never dead-lettered
	// format is the topic's registry format ("" for JSON) and registry the Schema Registry its
	// writer schemas are in: the oracle reads the records through it (oracle.FoldAvro,
	// FoldProtobuf).
	format, registry string
	// flags are command-line flags every run gets (a spec file: --config=...).
	flags []string
}

func newEnv(t *testing.T, partitions int, extra ...string) *env {
	e := &env{t: t, job: "j" + testenv.Suffix(), topic: testenv.Topic(t, partitions), dsn: testenv.Database(t),
		brokers: testenv.Brokers(t), extra: extra}
	e.db = testenv.Open(t, e.dsn)
	e.dir = t.TempDir()
	t.Cleanup(e.keepLogsIfFailed)
	for _, x := range extra {
		e.held = e.held || x == "RELAY_MODE=held"
		e.detail = e.detail || x == "RELAY_MYSQL_DETAIL_TABLE=order_details"
		e.skipBad = e.skipBad || x == "RELAY_INPUT_BAD_INPUT_POLICY=skip"
	}
	t.Cleanup(e.rollbackLeftovers)
	return e
}

// rollbackLeftovers keeps a failed test from leaving prepared branches (and their locks) behind.
func (e *env) rollbackLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bs, _ := commit.JobBranches(ctx, e.db, e.job)
	for _, b := range bs {
		_, _ = e.db.ExecContext(ctx, "XA ROLLBACK X'"+fmt.Sprintf("%x", b.Tag)+"'")
	}
}

// keepLogsIfFailed copies a failed test's relay logs (every test's with RELAY_TEST_KEEP_LOGS set)
// out of its temporary directory, which the testing package removes, and says where.
func (e *env) keepLogsIfFailed() {
	if (!e.t.Failed() && os.Getenv("RELAY_TEST_KEEP_LOGS") == "") || len(e.logs) == 0 {
		return
	}
	dst := filepath.Join(os.TempDir(), "relay-crash-logs", strings.NewReplacer("/", "_").Replace(e.t.Name())+"-"+e.job)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		e.t.Logf("keeping logs: %v", err)
		return
	}
	for _, l := range e.logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(l)), b, 0o644)
		}
	}
	e.t.Logf("relay logs of the failed test kept in %s", dst)
}

// proc is one running relay.
type proc struct{ *harness.Relay }

// start runs relay run; extra holds RELAY_* variables and, starting with "--", command-line flags.
func (e *env) start(extra ...string) *proc {
	flags := append([]string(nil), e.flags...)
	var extraEnv []string
	for _, x := range extra {
		if strings.HasPrefix(x, "--") {
			flags = append(flags, x)
		} else {
			extraEnv = append(extraEnv, x)
		}
	}
	logPath := filepath.Join(e.dir, fmt.Sprintf("relay-%d.log", len(e.logs)+1))
	e.logs = append(e.logs, logPath)
	r, err := harness.Start(harness.Options{Bin: relayBin, Args: append([]string{"run"}, flags...), Log: logPath,
		Env: e.environ(append([]string{"RELAY_HTTP_ADDR=127.0.0.1:0", "RELAY_LOG_LEVEL=info"}, extraEnv...))})
	if err != nil {
		e.t.Fatal(err)
	}
	// A test that fails before it stops relay must not leave it running.
	e.t.Cleanup(r.Kill)
	return &proc{r}
}

// environ is the environment of a relay process (run or another command) for this job: the test's
// defaults, then the env's extras, then extraEnv (later entries win).
func (e *env) environ(extraEnv []string) []string {
	env := append(os.Environ(),
		"RELAY_JOB_NAME="+e.job,
		"RELAY_KAFKA_BROKERS="+e.brokers,
		"RELAY_KAFKA_TOPICS="+e.topic,
		"RELAY_MYSQL_DSN="+e.dsn,
		"RELAY_SUBTASKS=2",
		"RELAY_CHECKPOINT_INTERVAL=200ms",
		"RELAY_CHECKPOINT_TIMEOUT=20s",
		"RELAY_MYSQL_LOCK_WAIT_TIMEOUT=10s",
		"RELAY_INPUT_DECODERS="+e.decoders(),
	)
	env = append(env, e.extra...)
	return append(env, extraEnv...)
}

// decoders is the test's input.decoders: 1 (the poll decodes) or 3 (three helpers, more than the
// default on 2 cores), by the test's name, so that both ways of decoding meet every fault the suite
// makes; a test's extras may set it.
func (e *env) decoders() string {
	h := fnv.New32a()
	h.Write([]byte(e.t.Name()))
	return []string{"1", "3"}[h.Sum32()%2]
}

// wait returns the exit error, failing the test if relay does not exit in time.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	err := p.Wait(d)
	if errors.Is(err, harness.ErrNoExit) {
		t.Fatalf("%v; log:\n%s", err, tail(p.Log, 30))
	}
	return err
}

// exited fails the test if relay has exited.
func (p *proc) exited(t *testing.T) {
	t.Helper()
	if !p.Alive() {
		t.Fatalf("relay exited early: %v\n%s", p.Err(), tail(p.Log, 30))
	}
}

func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
	}
	return false
}

func tail(path string, n int) string { return harness.Tail(path, n) }

// setting is a test's knob from the environment variable name: def when it is unset, parsed by
// parse otherwise (a value parse refuses fails the test).
func setting[T any](t *testing.T, name string, def T, parse func(string) (T, error)) T {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return x
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// logEvents returns the JSON log entries with the given message.
func logEvents(t *testing.T, path, msg string) []map[string]any {
	t.Helper()
	lines, err := harness.Events(path, msg)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]map[string]any, len(lines))
	for i, l := range lines {
		out[i] = l.Fields
	}
	return out
}

// lockKeyRow inserts, in a transaction it leaves open, the sink row of SKU-0 in the window of
// opts.StartTS: the one key of a load with one sku and one window. relay's checkpoint then waits
// for that row lock until the test rolls the transaction back (or the test ends).
func (e *env) lockKeyRow(ctx context.Context, opts loadgen.Options) *sql.Tx {
	e.t.Helper()
	holder, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = holder.Rollback() })
	if _, err := holder.ExecContext(ctx, "INSERT INTO order_stats_minute VALUES (?, 'SKU-0', 0, 0)", time.UnixMilli(opts.StartTS).UTC()); err != nil {
		e.t.Fatal(err)
	}
	return holder
}

// attachedBranch prepares a branch of the job for checkpoint id (one row in a new table) on a
// connection of the test: MariaDB lets no other session resolve it until Close ends that session.
// A failed test closes it too, before the database is dropped: DROP DATABASE would wait for the
// branch's metadata lock forever.
func (e *env) attachedBranch(ctx context.Context, table string, id int64) (*xa.Branch, string) {
	e.t.Helper()
	if _, err := e.db.ExecContext(ctx, "CREATE TABLE "+table+" (x INT)"); err != nil {
		e.t.Fatal(err)
	}
	b, err := xa.NewBranch(ctx, e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(b.Close)
	tag := commit.Tag(e.job, id, 0)
	if err := b.Start(ctx, tag); err != nil {
		e.t.Fatal(err)
	}
	if err := b.Exec(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
		e.t.Fatal(err)
	}
	if err := b.Prepare(ctx); err != nil {
		e.t.Fatal(err)
	}
	return b, tag
}

// produce writes n orders in Kafka transactions (some aborted, some bad records) and returns what
// must land. The records are escaped (loadgen.Options.Escape): every crash test feeds relay
// non-ASCII and \u-escaped strings, escaped member names and every spelling of numbers and times,
// which the plain records never had (issue 23: escaped strings were counted under another
// record's key). A test that needs the plain records calls loadgen.Run itself. In a registry
// format (e.format) the records are written in it, under a schema loadgen registers.
func (e *env) produce(ctx context.Context, totals *loadgen.Totals, o loadgen.Options) error {
	o.Brokers, o.Topic, o.Escape = e.brokers, e.topic, true
	if e.format != "" {
		o.Format, o.Escape = e.format, false
		o.Registry = newRegistry(e.t, e.registry)
	}
	if o.TxnID == "" {
		o.TxnID = "lg-" + e.topic + fmt.Sprint(o.Seed)
	}
	return loadgen.Run(ctx, o, totals)
}

// branches lists the job's prepared branches.
func (e *env) branches() []commit.Branch {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bs, err := commit.JobBranches(ctx, e.db, e.job)
	if err != nil {
		e.t.Fatal(err)
	}
	return bs
}

// serverState describes what the server holds right now (every prepared branch, every open
// InnoDB transaction), for the message of a failure that may be a lock left behind.
func (e *env) serverState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	all, err := xa.ListPrepared(ctx, e.db)
	fmt.Fprintf(&b, "XA RECOVER (err %v):\n", err)
	for _, r := range all {
		fmt.Fprintf(&b, "  %q %q\n", r.GTRID, r.BQual)
	}
	rows, err := e.db.QueryContext(ctx, `SELECT trx_id, trx_state, COALESCE(trx_mysql_thread_id, 0), trx_started,
		trx_rows_locked, COALESCE(trx_query, '') FROM information_schema.INNODB_TRX`)
	if err != nil {
		fmt.Fprintf(&b, "INNODB_TRX: %v\n", err)
		return b.String()
	}
	defer rows.Close()
	b.WriteString("INNODB_TRX (id, state, thread, started, rows locked, query):\n")
	for rows.Next() {
		var id, state, started, query string
		var thread, locked int64
		if err := rows.Scan(&id, &state, &thread, &started, &locked, &query); err != nil {
			fmt.Fprintf(&b, "  %v\n", err)
			break
		}
		fmt.Fprintf(&b, "  %s %s %d %s %d %.200q\n", id, state, thread, started, locked, query)
	}
	return b.String()
}

// ledgerRows returns checkpoint id → state.
func (e *env) ledgerRows() map[int64]string {
	e.t.Helper()
	rows, err := committed.States(context.Background(), e.db, e.job)
	if err != nil {
		e.t.Fatal(err)
	}
	return rows
}

// actual reads every aggregate table of plan (a table not created yet is empty).
func (e *env) actual(plan *spec.Plan) loadgen.Tables {
	got := loadgen.Tables{Plan: plan, Rows: make([][]spec.Row, len(plan.Tables()))}
	for a := range got.Rows {
		rows, err := plan.Read(context.Background(), e.db, a)
		if err != nil && !fault.IsMySQL(err, 1146) { // 1146: no table yet, relay has not started once
			e.t.Fatal(err)
		}
		got.Rows[a] = rows
	}
	return got
}

// diff describes how got differs from want, table by table ("" when equal).
func diff(want, got loadgen.Tables) string {
	var lines []string
	p := want.Plan
	for a, table := range p.Tables() {
		key, _ := p.ColumnNames(a)
		// show is a row as its key columns and its measures, as MySQL prints them.
		show := func(r *spec.Row) (string, string) {
			cols, err := p.Format(a, *r)
			if err != nil {
				return fmt.Sprintf("%q", r.Key), err.Error()
			}
			return fmt.Sprintf("%s %q", table, cols[:len(key)]), fmt.Sprint(cols[len(key):])
		}
		spec.Compare(want.Rows[a], got.Rows[a], func(w, g *spec.Row) {
			switch {
			case g == nil:
				k, m := show(w)
				lines = append(lines, fmt.Sprintf("%s: missing, want %s", k, m))
			case w == nil:
				k, m := show(g)
				lines = append(lines, fmt.Sprintf("%s: unexpected row %s", k, m))
			default:
				k, wm := show(w)
				_, gm := show(g)
				lines = append(lines, fmt.Sprintf("%s: want %s, got %s", k, wm, gm))
			}
		})
	}
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("... and %d more", len(lines)-10))
	}
	return strings.Join(lines, "\n")
}

// finish runs relay until MySQL matches the totals (or a deadline), stops it with SIGTERM, and
// checks every end-state invariant.
func (e *env) finish(totals *loadgen.Totals) { e.finishInstances(totals, 1) }

// startLayout starts instances 0..m-1 of the job (one plain process when m is 1) and waits until
// each finished recovery: until then SIGTERM would hit a process that has not installed its handler.
func (e *env) startLayout(m int, extraEnv ...string) []*proc {
	t := e.t
	var ps []*proc
	for i := 0; i < m; i++ {
		env := extraEnv
		if m > 1 {
			env = append([]string{fmt.Sprintf("RELAY_INSTANCE=%d/%d", i, m), "RELAY_SUBTASKS=1"}, extraEnv...)
		}
		ps = append(ps, e.start(env...))
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, p := range ps {
		if _, err := p.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, time.Until(deadline)); err != nil {
			t.Fatalf("relay did not finish recovery: %v\n%s", err, tail(p.Log, 30))
		}
	}
	return ps
}

// stopAll sends SIGTERM to every process and requires each to drain and exit 0.
func (e *env) stopAll(ps []*proc) {
	for _, p := range ps {
		_ = p.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		if err := p.wait(e.t, 60*time.Second); err != nil {
			e.t.Fatalf("relay did not stop cleanly on SIGTERM: %v\n%s", err, tail(p.Log, 30))
		}
	}
}

// finishInstances runs the job as m instances until MySQL matches what the oracle computes from
// the committed records, stops them, and checks every end-state invariant.
func (e *env) finishInstances(totals *loadgen.Totals, m int) {
	t := e.t
	t.Helper()
	x := e.expected(totals)
	ps := e.startLayout(m)
	testenv.Poll(90*time.Second, func() bool {
		for _, p := range ps {
			p.exited(t)
		}
		return e.diffOracle(x) == ""
	})
	e.stopAll(ps)
	e.checkEnd(totals, x, nil)
}

// checkEnd checks every end-state invariant once the job's processes stopped: MySQL holds what the
// oracle computes from the committed records, no branch is left, each bad record was dead-lettered
// once, the ledger's offsets leave nothing unread and every checkpoint row is committed, but those
// stuck accepts in state COMMITTING (nil: none).
func (e *env) checkEnd(totals *loadgen.Totals, x expectation, stuck func(id int64) bool) {
	t := e.t
	t.Helper()
	if d := e.diffOracle(x); d != "" {
		t.Fatalf("totals differ from the oracle's fold of what Kafka committed (%d records):\n%s", x.records, d)
	}
	if bs := e.branches(); len(bs) != 0 {
		t.Fatalf("XA RECOVER still lists %d branches of the job: %v", len(bs), bs)
	}
	e.checkDLQ(x.bad)
	e.checkOffsetsAtEnd()
	if e.detail {
		want, _, _ := totals.Snapshot()
		e.checkDetails(want)
	}
	for id, st := range e.ledgerRows() {
		if st != string(ledger.Committed) && !(st == string(ledger.Committing) && stuck != nil && stuck(id)) {
			t.Fatalf("ledger checkpoint %d is %s after a clean stop", id, st)
		}
	}
}

// checkDetails requires the append sink to hold each source offset once, and to add up to the
// totals of the default spec's table in every (window, sku): its rows, grouped by the default
// plan's one-minute window and sku, read as that table's columns (spec.Plan.ParseRow).
func (e *env) checkDetails(want loadgen.Tables) {
	t := e.t
	var dups int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM (SELECT 1 FROM order_details GROUP BY src_topic, src_partition, src_offset HAVING COUNT(*) > 1) d`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups != 0 {
		t.Fatalf("%d source offsets appear more than once in the detail table", dups)
	}
	rows, err := e.db.Query(`SELECT DATE_FORMAT(event_time, '%Y-%m-%d %H:%i:00'), sku, COUNT(*), CAST(SUM(amount) AS CHAR) FROM order_details GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := loadgen.Tables{Plan: want.Plan, Rows: make([][]spec.Row, 1)}
	cols := make([][]byte, 4)
	for rows.Next() {
		if err := rows.Scan(&cols[0], &cols[1], &cols[2], &cols[3]); err != nil {
			t.Fatal(err)
		}
		r, err := want.Plan.ParseRow(0, cols)
		if err != nil {
			t.Fatal(err)
		}
		got.Rows[0] = append(got.Rows[0], r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got.Rows[0], func(x, y spec.Row) int { return strings.Compare(x.Key, y.Key) })
	if d := diff(want, got); d != "" {
		t.Fatalf("the detail table does not add up to the totals:\n%s", d)
	}
}

// checkDLQ requires each bad record once: counts per reason match and no source offset repeats.
// dlqPayloadBytes is relay's default bound on the payload copy a dead-letter row keeps.
const dlqPayloadBytes = 4096

func (e *env) checkDLQ(bad []loadgen.Bad) {
	t := e.t
	want := map[string]int{}
	for _, b := range bad {
		want[b.Reason]++
	}
	got := map[string]int{}
	rows, err := e.db.Query(`SELECT reason, COUNT(*) FROM relay_dlq WHERE job = ? GROUP BY reason`, e.job)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			t.Fatal(err)
		}
		got[r] = n
	}
	rows.Close()
	for r, n := range want {
		if got[r] != n {
			t.Errorf("dead-letter reason %s: %d rows, want %d", r, got[r], n)
		}
	}
	for r, n := range got {
		if _, ok := want[r]; !ok {
			t.Errorf("dead-letter reason %s: %d unexpected rows", r, n)
		}
	}
	// Each row holds its record's payload (a bounded prefix of it) under that record's reason.
	kinds := map[string]string{} // payload -> reason
	for _, b := range bad {
		kinds[b.Payload] = b.Reason
	}
	rows, err = e.db.Query(`SELECT reason, payload, payload_bytes, koffset FROM relay_dlq WHERE job = ?`, e.job)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var reason, payload string
		var size int
		var off int64
		if err := rows.Scan(&reason, &payload, &size, &off); err != nil {
			t.Fatal(err)
		}
		matched := false
		for p, r := range kinds {
			if strings.HasPrefix(p, payload) && len(p) == size && (len(payload) == size || len(payload) == dlqPayloadBytes) {
				matched = r == reason
				break
			}
		}
		if !matched {
			t.Errorf("dead-letter row at offset %d: reason %s, %d of %d payload bytes %.60q: no bad record of that reason and payload", off, reason, len(payload), size, payload)
		}
	}
	rows.Close()
	var dups int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM (SELECT 1 FROM relay_dlq WHERE job = ? GROUP BY topic, kpartition, koffset HAVING COUNT(*) > 1) d`, e.job).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups != 0 {
		t.Fatalf("%d source offsets appear more than once in the dead-letter table", dups)
	}
}

// checkOffsetsAtEnd requires the ledger's resume offsets to leave no committed record unread:
// reading on from them finds nothing.
func (e *env) checkOffsetsAtEnd() {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	final, _, err := ledger.New(e.db, e.job).PartitionOffsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(consumer.Options{Brokers: e.brokers, Topics: []string{e.topic}, GroupID: "check-" + e.job, StartOffset: "earliest"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts[e.topic] {
		if _, ok := final.Get(e.topic, p); !ok {
			t.Fatalf("ledger has no offset for partition %d", p)
		}
	}
	if _, err := c.Assign(ctx, final); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(2 * time.Second)
	b := consumer.NewBatch(16, 64<<10)
	for time.Now().Before(until) {
		if err := c.Read(100*time.Millisecond, b); err != nil {
			t.Fatal(err)
		}
		for _, m := range b.Records {
			t.Fatalf("record at %s/%d@%d lies past the ledger's final offsets", m.Topic, m.Partition, m.Offset)
		}
	}
}
