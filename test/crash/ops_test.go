package crash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/ops"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/internal/xa"
)

// cli runs an operator command of the binary with the job's configuration (as e.start does) and
// returns its stdout, its stderr and its exit code.
func (e *env) cli(extraEnv []string, args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, relayBin, args...)
	cmd.Env = e.environ(extraEnv)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		e.t.Fatalf("relay %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

func (e *env) lastCheckpoint() *ledger.Checkpoint {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ledger.New(e.db, e.job).LastDecided(ctx)
	if err != nil || c == nil {
		e.t.Fatalf("no decided checkpoint: %v", err)
	}
	return c
}

// offsets reset refuses while relay runs (exit 3, naming the holder) and, with the job stopped,
// moves the resume offsets: the next run reads only what came after them, so records produced in
// between never reach MySQL.
func TestOpsOffsetsReset(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	totals := loadgen.NewTotals()
	if err := e.produceAborting(ctx, totals, loadgen.Options{Orders: 1500, Batch: 100, AbortRate: 0.1, BadRate: 0.01, SKUs: 30, Windows: 3, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(logEvents(t, p.Log, "recovered")) > 0 }, "relay running")
	_, stderr, code := e.cli(nil, "offsets", "reset", "--to", "latest")
	if code != 3 || !strings.Contains(stderr, "running elsewhere") || !strings.Contains(stderr, fmt.Sprintf("pid %d", p.PID())) {
		t.Fatalf("reset while relay runs: exit %d, want 3 naming pid %d\n%s", code, p.PID(), stderr)
	}
	_ = p.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("relay did not stop cleanly: %v", err)
	}
	e.finish(totals)

	// Produced while the job is stopped, then skipped by the reset: never counted.
	if err := e.produce(ctx, loadgen.NewTotals(), loadgen.Options{Orders: 700, Batch: 100, SKUs: 30, Windows: 3, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	before := e.lastCheckpoint()
	type report struct {
		Applied    bool  `json:"applied"`
		Previous   int64 `json:"previous_checkpoint"`
		Checkpoint int64 `json:"checkpoint"`
		ReRead     int64 `json:"reread"`
		Skipped    int64 `json:"skipped"`
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Old, New  int64
			ReRead    int64 `json:"reread"`
			Skipped   int64 `json:"skipped"`
		} `json:"partitions"`
	}
	// Without --yes (and stdin not a terminal) a reset is its plan: exit 5, the ledger as it was.
	var counted int64
	for _, p := range before.Offsets[e.topic] {
		counted += p
	}
	stdout, stderr, code := e.cli(nil, "offsets", "reset", "--to", "earliest")
	if code != 5 || !strings.Contains(stdout, fmt.Sprintf("re-read: %d offsets", counted)) || !strings.Contains(stdout, "job "+e.job) ||
		!strings.Contains(stderr, "nothing changed; re-run with --yes") {
		t.Fatalf("reset to earliest without --yes: exit %d, want 5 and a plan reading all %d counted offsets again\n%s%s", code, counted, stdout, stderr)
	}
	stdout, stderr, code = e.cli(nil, "offsets", "reset", "--to", "latest", "--json")
	var plan report
	if err := json.Unmarshal([]byte(stdout), &plan); code != 5 || err != nil || plan.Applied || plan.Skipped < 700 || plan.ReRead != 0 {
		t.Fatalf("reset to latest without --yes: exit %d, %+v (%v); want 5 and a plan skipping the 700 records produced while stopped\n%s%s", code, plan, err, stdout, stderr)
	}
	if now := e.lastCheckpoint(); now.ID != before.ID || !now.Offsets.Equal(before.Offsets) {
		t.Fatalf("a reset without --yes changed the ledger: %+v, was %+v", now, before)
	}
	if offs, _, err := ledger.New(e.db, e.job).PartitionOffsets(ctx); err != nil || !offs.Equal(before.Offsets) {
		t.Fatalf("a reset without --yes changed the partition offsets: %v (%v), was %v", offs, err, before.Offsets)
	}
	stdout, stderr, code = e.cli(nil, "offsets", "reset", "--to", "latest", "--json", "--yes")
	if code != 0 {
		t.Fatalf("reset with the job stopped: exit %d\n%s%s", code, stdout, stderr)
	}
	var r report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || !r.Applied || r.Skipped != plan.Skipped {
		t.Fatalf("reset --json --yes: %+v, %v; want it applied, skipping the plan's %d\n%s", r, err, plan.Skipped, stdout)
	}
	after := e.lastCheckpoint()
	if r.Previous != before.ID || r.Checkpoint <= before.ID || after.ID != r.Checkpoint || after.State != ledger.Committed || len(r.Partitions) != 2 {
		t.Fatalf("reset report %+v, ledger %+v; want a new committed checkpoint after %d", r, after, before.ID)
	}
	skipped := int64(0)
	for _, pr := range r.Partitions {
		if old, _ := before.Offsets.Get(pr.Topic, pr.Partition); pr.Old != old {
			t.Fatalf("partition %d: old offset %d, the ledger had %d", pr.Partition, pr.Old, old)
		}
		if now, _ := after.Offsets.Get(pr.Topic, pr.Partition); pr.New != now {
			t.Fatalf("partition %d: new offset %d, the ledger has %d", pr.Partition, pr.New, now)
		}
		skipped += pr.New - pr.Old
		if pr.Skipped != pr.New-pr.Old || pr.ReRead != 0 {
			t.Fatalf("partition %d: %+v; want skipped = new - old, nothing read again", pr.Partition, pr)
		}
	}
	if skipped < 700 {
		t.Fatalf("the reset skipped %d offsets, want at least the 700 records produced while stopped", skipped)
	}

	if err := e.produceAborting(ctx, totals, loadgen.Options{Orders: 800, Batch: 100, AbortRate: 0.1, SKUs: 30, Windows: 3, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	e.finish(totals) // exactly the first and the last batch: nothing of the skipped one
	first := logEvents(t, e.logs[len(e.logs)-1], "recovered")[0]
	if id, _ := first["resume_checkpoint"].(float64); int64(id) <= after.ID {
		t.Fatalf("the run after the reset resumed at checkpoint %v, want one above the reset's %d", first["resume_checkpoint"], after.ID)
	}
	started, _ := first["offsets"].(map[string]any)[e.topic].(map[string]any)
	for _, pr := range r.Partitions {
		if got, _ := started[fmt.Sprint(pr.Partition)].(float64); int64(got) != pr.New {
			t.Fatalf("the run after the reset started partition %d at %v, want the reset's %d", pr.Partition, started[fmt.Sprint(pr.Partition)], pr.New)
		}
	}
}

// verify reports nothing after a clean run, and exactly the key an incident changed (exit 4), both
// recounting the topic and against the loadgen totals file.
func TestOpsVerify(t *testing.T) {
	e := newEnv(t, 3)
	totals := loadgen.NewTotals()
	if err := e.produceAborting(context.Background(), totals, loadgen.Options{Orders: 3000, Batch: 100, AbortRate: 0.1, BadRate: 0.01,
		SKUs: 40, Windows: 4, Seed: 11}); err != nil {
		t.Fatal(err)
	}
	e.finish(totals)
	file := filepath.Join(e.dir, "expected.json")
	if err := totals.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	_, bad, good := totals.Snapshot()
	stdout, stderr, code := e.cli(nil, "verify")
	if code != 0 || !strings.Contains(stdout, "no differences") || !strings.Contains(stdout, fmt.Sprintf("(%d good, %d bad)", good, len(bad))) {
		t.Fatalf("verify after a clean run: exit %d\n%s%s", code, stdout, stderr)
	}
	if stdout, stderr, code = e.cli(nil, "verify", "--expected", file); code != 0 || !strings.Contains(stdout, "no differences") {
		t.Fatalf("verify --expected after a clean run: exit %d\n%s%s", code, stdout, stderr)
	}

	var w time.Time
	var sku string
	if err := e.db.QueryRow(`SELECT window_start, sku FROM order_stats_minute ORDER BY sku DESC LIMIT 1`).Scan(&w, &sku); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(`UPDATE order_stats_minute SET amount_sum = amount_sum - 1 WHERE window_start = ? AND sku = ?`, w, sku); err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("order_stats_minute %s %q", w.UTC().Format("2006-01-02 15:04:05"), sku)
	for _, args := range [][]string{{"verify"}, {"verify", "--expected", file}} {
		stdout, stderr, code = e.cli(nil, args...)
		if code != 4 || !strings.Contains(stdout, "differs  "+key) || strings.Count(stdout, "differs ") != 1 {
			t.Fatalf("%s after changing %s: exit %d, want 4 and that key alone\n%s%s", strings.Join(args, " "), key, code, stdout, stderr)
		}
	}
	stdout, _, code = e.cli(nil, "verify", "--json")
	var r struct {
		Clean       bool
		Differences []struct {
			Table string
			Key   map[string]string
			Kind  string
		}
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 4 || r.Clean || len(r.Differences) != 1 || r.Differences[0].Table != "order_stats_minute" ||
		r.Differences[0].Key["sku"] != sku || r.Differences[0].Kind != "differs" || r.Differences[0].Key["window_start"] != w.UTC().Format("2006-01-02 15:04:05") {
		t.Fatalf("verify --json: exit %d, %+v (%v)\n%s", code, r, err, stdout)
	}
}

// txns list and resolve through the binary: the verdict shown, the refusal (exit 1), the forced
// and the ledger-following resolutions (exit 0), each recorded; status shows the same branches.
func TestOpsTxns(t *testing.T) {
	e := ranJob(t, 1, 5)
	last := e.lastCheckpoint()
	decided, undecided := commit.Tag(e.job, last.ID, 7), commit.Tag(e.job, last.ID+50, 0)
	for _, tag := range []string{decided, undecided} {
		e.prepareBranch(tag)
	}

	for _, args := range [][]string{{"txns", "list"}, {"status"}} {
		stdout, stderr, code := e.cli(nil, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
		for _, tag := range []string{decided, undecided} {
			verdict := map[string]string{decided: "commit", undecided: "rollback"}[tag]
			if !lineHas(stdout, tag, verdict) {
				t.Fatalf("%v does not show %s with verdict %s:\n%s", args, tag, verdict, stdout)
			}
		}
	}
	_, stderr, code := e.cli(nil, "txns", "resolve", undecided, "--commit")
	if code != 1 || !strings.Contains(stderr, "never decided") {
		t.Fatalf("commit of an undecided branch: exit %d, want 1 with the reason\n%s", code, stderr)
	}
	_, stderr, code = e.cli(nil, "txns", "resolve", decided, "--commit", "--rollback")
	if code != 2 {
		t.Fatalf("both --commit and --rollback: exit %d, want 2\n%s", code, stderr)
	}
	// Without --yes: the plan, exit 5, the branches as they were and nothing audited.
	for _, args := range [][]string{{undecided, "--rollback"}, {decided, "--rollback", "--force"}} {
		stdout, stderr, code := e.cli(nil, append([]string{"txns", "resolve"}, args...)...)
		if code != 5 || !strings.Contains(stdout, "plan: roll back "+args[0]) || !strings.Contains(stderr, "nothing changed; re-run with --yes") {
			t.Fatalf("resolve %v without --yes: exit %d, want 5 and the plan\n%s%s", args, code, stdout, stderr)
		}
	}
	if bs := e.branches(); len(bs) != 2 {
		t.Fatalf("resolve without --yes touched the branches: %v left, want both", bs)
	}
	if audited, err := ledger.New(e.db, e.job).AuditLog(context.Background(), 1000); err != nil || len(audited) != 0 {
		t.Fatalf("resolve without --yes left %d audit rows (%v)", len(audited), err)
	}
	stdout, stderr, code := e.cli(nil, "txns", "resolve", undecided, "--rollback", "--yes")
	if code != 0 || !strings.Contains(stdout, "rolled back "+undecided) || !strings.Contains(stderr, `"origin":"manual"`) {
		t.Fatalf("rollback of an undecided branch: exit %d\n%s%s", code, stdout, stderr)
	}
	if stdout, stderr, code = e.cli(nil, "txns", "resolve", decided, "--rollback", "--force", "--yes"); code != 0 || !strings.Contains(stdout, "AGAINST") ||
		!strings.Contains(stdout, "will never be counted") {
		t.Fatalf("forced rollback: exit %d, want 0 with a plan saying what is lost\n%s%s", code, stdout, stderr)
	}
	if bs := e.branches(); len(bs) != 0 {
		t.Fatalf("branches left: %v", bs)
	}
	audit, err := ledger.New(e.db, e.job).AuditLog(context.Background(), 1000)
	var n, forced int
	for _, a := range audit {
		if a.Origin == "manual" {
			n++
			if a.Forced {
				forced++
			}
		}
	}
	if err != nil || n != 2 || forced != 1 {
		t.Fatalf("audit rows: %d (%d forced), %v; want 2, 1 forced", n, forced, err)
	}
	// The next relay counts the two manual rollbacks, done while it was stopped, once; the one
	// after it finds nothing left to count.
	for run, want := range []float64{2, 0} {
		p := e.start("RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s")
		addr := httpAddr(t, p)
		if want > 0 {
			testenv.Eventually(t, 30*time.Second, func() bool {
				return scrapeMetrics(t, addr).value(t, "relay_transactions_total", "action", "rollback", "origin", "manual") == want
			}, "the manual rollbacks to be counted")
		} else {
			// The scenario: nothing may be counted over two resolver passes (1 s apart); an
			// absence has no event to wait for.
			time.Sleep(2500 * time.Millisecond)
		}
		s := scrapeMetrics(t, addr)
		if got := s.value(t, "relay_transactions_total", "action", "rollback", "origin", "manual"); got != want {
			t.Fatalf("run %d: manual rollbacks counted %v, want %v", run, got, want)
		}
		if got := s.value(t, "relay_transactions_total", "action", "commit", "origin", "manual"); got != 0 {
			t.Fatalf("run %d: manual commits counted %v, want 0", run, got)
		}
		p.Kill()
	}
}

// A branch of a job whose ledger is another database on the same server is unknown to this job's
// commands: txns list does not call it a rollback, resolve refuses it even with --force (that job
// decided it), preflight does not suggest rolling it back; the job's own configuration resolves it.
func TestOpsTxnsUnknownJob(t *testing.T) {
	other := ranJob(t, 1, 7)
	decided := commit.Tag(other.job, other.lastCheckpoint().ID, 5) // the other ledger says: commit
	other.prepareBranch(decided)
	e := newEnv(t, 1)
	dsn, err := mysql.ParseDSN(other.dsn)
	if err != nil {
		t.Fatal(err)
	}
	ledgerDB := dsn.DBName

	stdout, stderr, code := e.cli(nil, "txns", "list")
	if code != 0 || !lineHas(stdout, decided, "unknown_job", "unknown") || lineHas(stdout, decided, "rollback") {
		t.Fatalf("txns list in another job's database: exit %d, want %s as unknown_job, verdict unknown\n%s%s", code, decided, stdout, stderr)
	}
	for _, action := range []string{"--rollback", "--commit"} {
		stdout, stderr, code = e.cli(nil, "txns", "resolve", decided, action, "--force", "--yes")
		if code != 1 || !strings.Contains(stderr, "unknown job: resolve it from its own ledger") || !strings.Contains(stderr, "its ledger: database "+ledgerDB) {
			t.Fatalf("forced %s of another ledger's branch: exit %d, want 1 and the refusal\n%s%s", action, code, stdout, stderr)
		}
	}
	if bs := other.branches(); len(bs) != 1 {
		t.Fatalf("the refused resolutions touched %s: branches %v", decided, bs)
	}
	stdout, _, _ = e.cli(nil, "preflight")
	if !lineHas(stdout, "orphans", decided) || lineHas(stdout, "orphans", "--rollback") {
		t.Fatalf("preflight: want a warning naming %s that does not suggest a rollback\n%s", decided, stdout)
	}
	if stdout, stderr, code = other.cli(nil, "txns", "resolve", decided, "--commit", "--yes"); code != 0 || !strings.Contains(stdout, "committed "+decided) {
		t.Fatalf("commit of the branch by its own job: exit %d\n%s%s", code, stdout, stderr)
	}
}

// loadgen writes only where it is told: without --brokers and --topic it refuses (though the
// RELAY_KAFKA_* of a relay pod are set), and into a topic a job's ledger reads it refuses, whichever
// database of the server holds that ledger, unless --i-know-this-is-live. With no MySQL named it
// refuses a topic Kafka shows in use unless --force.
func TestOpsLoadgenGuards(t *testing.T) {
	e := ranJob(t, 2, 9)
	end := e.highWatermarks()
	for _, args := range [][]string{{"loadgen"}, {"loadgen", "--topic", e.topic}, {"loadgen", "--brokers", e.brokers}} {
		if stdout, stderr, code := e.cli(nil, args...); code != 2 || !strings.Contains(stderr, "--brokers and --topic are required") {
			t.Fatalf("%v with RELAY_KAFKA_* set: exit %d, want 2\n%s%s", args, code, stdout, stderr)
		}
	}
	lg := []string{"loadgen", "--brokers", e.brokers, "--topic", e.topic, "--orders", "10", "--transactional-id", ""}
	refused := func(extraEnv []string, extra ...string) {
		t.Helper()
		stdout, stderr, code := e.cli(extraEnv, append(lg, extra...)...)
		if code != 1 || !strings.Contains(stderr, "refusing to produce into "+e.topic) || !strings.Contains(stderr, "job "+e.job) {
			t.Fatalf("loadgen into the job's input (%v %v): exit %d, want 1 naming job %s\n%s%s", extraEnv, extra, code, e.job, stdout, stderr)
		}
	}
	refused(nil) // the ledger of RELAY_MYSQL_DSN
	// Another database of the same server: the job's ledger is found there too.
	refused([]string{"RELAY_MYSQL_DSN="}, "--ledger-dsn", testenv.AdminDSN(t))
	if got := e.highWatermarks(); !got.Equal(end) {
		t.Fatalf("a refused loadgen wrote to %s: end offsets %v, were %v", e.topic, got, end)
	}
	// No MySQL to ask: Kafka shows the topic in use (its records, relay's group offsets), so it is
	// refused, with what shows it and how to proceed.
	noDSN := []string{"RELAY_MYSQL_DSN=", "RELAY_LEDGER_DSN="}
	stdout, stderr, code := e.cli(noDSN, lg...)
	for _, want := range []string{"refusing to produce into " + e.topic, "no MySQL named", "it is not empty (",
		"consumer groups with offsets committed on it: relay-" + e.job, "--ledger-dsn", "--force"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Fatalf("loadgen without a MySQL into the job's input: exit %d, want 1 and %q\n%s%s", code, want, stdout, stderr)
		}
	}
	if got := e.highWatermarks(); !got.Equal(end) {
		t.Fatalf("a refused loadgen wrote to %s: end offsets %v, were %v", e.topic, got, end)
	}
	// A new topic shows no use: produced, with a note of what was not checked and progress lines.
	fresh := testenv.Topic(t, 1)
	stdout, stderr, code = e.cli(noDSN, "loadgen", "--brokers", e.brokers, "--topic", fresh, "--orders", "60", "--rate", "150", "--batch", "10",
		"--progress", "100ms", "--escape")
	if code != 0 || !strings.Contains(stdout, "60 records sent: 60 good orders committed") || !strings.Contains(stderr, "Kafka shows it unused") ||
		!strings.Contains(stderr, "records sent (") {
		t.Fatalf("loadgen without a MySQL into a new topic: exit %d, want 0 with a note and progress\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = e.cli(noDSN, append(lg, "--force")...)
	if code != 0 || !strings.Contains(stdout, "10 records sent: 10 good orders committed") || !strings.Contains(stderr, "--force: producing") {
		t.Fatalf("loadgen --force without a MySQL: exit %d\n%s%s", code, stdout, stderr)
	}
	// --force is no answer to a ledger that reads the topic.
	refused(nil, "--force")
	stdout, stderr, code = e.cli(nil, append(lg, "--i-know-this-is-live")...)
	if code != 0 || !strings.Contains(stdout, "loadgen: topic "+e.topic) || !strings.Contains(stdout, "10 records sent: 10 good orders committed") {
		t.Fatalf("loadgen --i-know-this-is-live: exit %d\n%s%s", code, stdout, stderr)
	}
}

// ranJob is a job whose relay committed 200 orders (stream seed) and stopped.
func ranJob(t *testing.T, partitions int, seed uint64) *env {
	e := newEnv(t, partitions)
	totals := loadgen.NewTotals()
	if err := e.produce(context.Background(), totals, loadgen.Options{Orders: 200, Batch: 50, SKUs: 5, Windows: 1, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	e.finish(totals)
	return e
}

// highWatermarks reads the end offset of every partition of the job's topic.
func (e *env) highWatermarks() partition.Offsets {
	e.t.Helper()
	stdout, stderr, code := e.cli(nil, "status", "--json")
	var rep ops.StatusReport
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		e.t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	out := partition.Offsets{}
	for _, p := range rep.Partitions {
		out.Set(p.Topic, p.Partition, p.HighWatermark)
	}
	return out
}

// preflight passes on the test setup; a session timeout shorter than checkpoint interval + timeout
// + restart allowance is refused with the numbers as a configuration error (exit 2), before MySQL
// or Kafka is checked.
func TestOpsPreflight(t *testing.T) {
	e := newEnv(t, 2)
	stdout, stderr, code := e.cli(nil, "preflight")
	if code != 0 || strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, "ok xa:") {
		t.Fatalf("preflight on the test setup: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = e.cli([]string{"RELAY_MYSQL_SESSION_TIMEOUT=90s"}, "preflight")
	if code != 2 || !lineHas(stdout, "FAIL config", "mysql.session_timeout", "2m20.2s (short by 51.2s)", "RELAY_MYSQL_SESSION_TIMEOUT") ||
		strings.Contains(stdout, "xa:") || !strings.Contains(stderr, "MySQL and Kafka were not checked") {
		t.Fatalf("preflight with a short session timeout: exit %d\n%s%s", code, stdout, stderr)
	}
}

// prepareBranch leaves a prepared branch named tag, its connection gone, as a killed relay would.
func (e *env) prepareBranch(tag string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := xa.NewBranch(ctx, e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(ctx, tag); err != nil {
		e.t.Fatal(err)
	}
	if err := b.Exec(ctx, "INSERT INTO order_stats_minute VALUES ('2025-01-01 00:00:00', '"+tag+"', 1, 1)"); err != nil {
		e.t.Fatal(err)
	}
	if err := b.Prepare(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// lineHas reports whether one line of out contains every part.
func lineHas(out string, parts ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// In held mode with the append sink, status shows the last commit and verify checks the detail
// rows too: clean after a run, exit 4 once one order's row is duplicated.
func TestOpsHeldAppendSink(t *testing.T) {
	e := newEnv(t, 2, "RELAY_MODE=held", "RELAY_MYSQL_DETAIL_TABLE=order_details")
	totals := loadgen.NewTotals()
	if err := e.produceAborting(context.Background(), totals, loadgen.Options{Orders: 1500, Batch: 100, AbortRate: 0.1, BadRate: 0.01,
		SKUs: 20, Windows: 2, Seed: 21}); err != nil {
		t.Fatal(err)
	}
	e.finish(totals)
	_, _, good := totals.Snapshot()
	stdout, stderr, code := e.cli(nil, "status")
	if code != 0 || !strings.Contains(stdout, "mode held") || strings.Contains(stdout, "last checkpoint  none") {
		t.Fatalf("status in held mode: exit %d\n%s%s", code, stdout, stderr)
	}
	// The JSON report says the same, field by field: what the ledger holds for every partition.
	stdout, stderr, code = e.cli(nil, "status", "--json")
	var rep ops.StatusReport
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	offs, maxID, err := ledger.New(e.db, e.job).PartitionOffsets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Job != e.job || rep.Mode != "held" || rep.LastCheckpoint == nil || rep.LastCheckpoint.ID != maxID ||
		len(rep.Partitions) != 2 || len(rep.Branches) != 0 || len(rep.Fences) != 1 || rep.Fences[0].Held {
		t.Fatalf("status --json: %+v; want job %s, held mode, last checkpoint %d, 2 partitions, no branch, one free fence", rep, e.job, maxID)
	}
	lagged := false
	for _, pl := range rep.Partitions {
		want, ok := offs.Get(pl.Topic, pl.Partition)
		if !ok || pl.Offset == nil || *pl.Offset != want || pl.Lag == nil || *pl.Lag != pl.HighWatermark-want || *pl.Lag < 0 {
			t.Fatalf("status --json partition %+v; ledger offset %d (found %v)", pl, want, ok)
		}
		// Caught up: whatever lag the transaction markers and aborted records make, nothing waits.
		if pl.Waiting == nil || *pl.Waiting != 0 {
			t.Fatalf("status --json partition %d: waiting %v with lag %d, want 0 after relay caught up", pl.Partition, pl.Waiting, *pl.Lag)
		}
		lagged = lagged || *pl.Lag > 0
	}
	if !lagged {
		t.Log("no partition ends in markers or aborted records: waiting = 0 was only checked against lag = 0")
	}
	// Records produced while relay is stopped are waiting, exactly that many.
	more := loadgen.NewTotals()
	if err := e.produce(context.Background(), more, loadgen.Options{Orders: 300, Batch: 300, Seed: 23, TxnID: "more-" + e.topic}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = e.cli(nil, "status", "--json")
	rep = ops.StatusReport{}
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	var waiting int64
	for _, pl := range rep.Partitions {
		if pl.Waiting == nil {
			t.Fatalf("status --json partition %+v: waiting not counted", pl)
		}
		waiting += *pl.Waiting
	}
	if waiting != 300 {
		t.Fatalf("status --json: %d records waiting, want the 300 produced since", waiting)
	}
	detail := fmt.Sprintf("append sink order_details: %d rows expected, %d found, 0 duplicated", good, good)
	stdout, stderr, code = e.cli(nil, "verify")
	if code != 0 || !strings.Contains(stdout, detail) || !strings.Contains(stdout, "no differences") {
		t.Fatalf("verify after a clean held run: exit %d, want 0 and %q\n%s%s", code, detail, stdout, stderr)
	}
	if _, err := e.db.Exec(`INSERT INTO order_details (order_id, sku, amount, event_time, src_topic, src_partition, src_offset)
		SELECT order_id, sku, amount, event_time, src_topic, src_partition, src_offset FROM order_details ORDER BY id LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = e.cli(nil, "verify")
	if code != 4 || !strings.Contains(stdout, fmt.Sprintf("%d rows for %d good records, 1 duplicated", good+1, good)) {
		t.Fatalf("verify with a duplicated detail row: exit %d, want 4\n%s%s", code, stdout, stderr)
	}
}

// verify while relay commits a checkpoint every 200ms under a steady stream: its snapshot is always
// of one commit, so it never reports a difference that is only a commit in flight.
func TestOpsVerifyWhileRunning(t *testing.T) {
	e := newEnv(t, 2)
	p := e.start()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(logEvents(t, p.Log, "recovered")) > 0 }, "relay running")
	totals := loadgen.NewTotals()
	produced := make(chan error, 1)
	go func() {
		produced <- e.produceAborting(context.Background(), totals, loadgen.Options{Orders: 6000, Rate: 1500, Batch: 50, AbortRate: 0.1,
			BadRate: 0.01, SKUs: 30, Windows: 2, Seed: 31})
	}()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(e.ledgerRows()) > 0 }, "a first checkpoint")
	for i := 0; ; i++ {
		stdout, stderr, code := e.cli(nil, "verify")
		if code != 0 || !strings.Contains(stdout, "no differences") {
			t.Fatalf("verify #%d while relay runs: exit %d\n%s%s", i, code, stdout, stderr)
		}
		select {
		case err := <-produced:
			if err != nil {
				t.Fatal(err)
			}
			_ = p.Signal(syscall.SIGTERM)
			if err := p.wait(t, 60*time.Second); err != nil {
				t.Fatalf("relay did not stop cleanly: %v", err)
			}
			if i == 0 {
				t.Fatal("the stream ended before a second verify: the test did not overlap verify with commits")
			}
			t.Logf("%d verifies while relay committed", i+1)
			return
		default:
		}
	}
}

// produceAborting is e.produce for streams with aborted transactions. The broker now and then
// answers an abort with an invalid-state error that is fatal to the producer; a new producer with
// the same transactional.id fences the old one (its open transaction is aborted), and totals
// already hold exactly what committed, so producing again keeps them exact.
func (e *env) produceAborting(ctx context.Context, totals *loadgen.Totals, o loadgen.Options) error {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = e.produce(ctx, totals, o); err == nil {
			return nil
		}
		e.t.Logf("producing, attempt %d: %v", attempt, err)
	}
	return err
}
