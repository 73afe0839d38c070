package ops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/internal/xa"
)

// newEnv gives a test its own job, topic and database, with relay's tables created and the pool
// opened with the configuration's session settings (as relay's openDBs does).
func newEnv(t *testing.T, partitions int, mutate ...func(*config.Config)) (*Env, context.Context) {
	t.Helper()
	cfg := config.Default()
	cfg.Job.Name = "j" + testenv.Suffix()
	cfg.Kafka.Brokers = config.List{testenv.Brokers(t)}
	cfg.Kafka.Topics = []string{testenv.Topic(t, partitions)}
	cfg.MySQL.DSN = testenv.Database(t)
	for _, m := range mutate {
		m(&cfg)
	}
	db, err := database.Open(cfg.MySQL.DSN, cfg.SinkSession())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := testenv.Context(t, 3*time.Minute)
	flavor, _, err := sink.DetectFlavor(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(plan.Schema(cfg.MySQL.DLQTable, "").Create(ctx, db, flavor),
		ledger.EnsureSchema(ctx, db)); err != nil {
		t.Fatal(err)
	}
	e := &Env{Config: cfg, Sink: db, Ledger: ledger.New(db, cfg.Job.Name), Log: zaptest.NewLogger(t), Operator: "tester@testhost pid 1"}
	// As relay's commands do (cmd/relay openEnv): an unset mode is xa on a server without Galera.
	if e.Galera, err = database.ReadGalera(ctx, db); err != nil {
		t.Fatal(err)
	}
	if e.ModePicked, err = e.Config.ResolveMode(e.Galera.On); err != nil {
		t.Fatal(err)
	}
	return e, ctx
}

// prepare leaves a prepared branch named tag that inserts one row, its connection discarded (as a
// relay killed after XA PREPARE leaves it). The branch is rolled back when the test ends, before
// its database is dropped.
func prepare(t *testing.T, ctx context.Context, e *Env, tag string) {
	t.Helper()
	b := prepareAttached(t, ctx, e, tag)
	b.Close()
}

// prepareAttached is prepare with the preparing session still alive.
func prepareAttached(t *testing.T, ctx context.Context, e *Env, tag string) *xa.Branch {
	t.Helper()
	return prepareWriting(t, ctx, e, tag, fmt.Sprintf("INSERT INTO order_stats_minute VALUES ('2025-01-01 00:00:00', '%s', 1, 1.5)", tag))
}

// prepareWriting is prepareAttached running stmt in the branch; "" leaves it empty (MariaDB then
// answers its commit with XA_RBROLLBACK).
func prepareWriting(t *testing.T, ctx context.Context, e *Env, tag, stmt string) *xa.Branch {
	t.Helper()
	b, err := xa.NewBranch(ctx, e.Sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx, tag); err != nil {
		t.Fatal(err)
	}
	if stmt != "" {
		if err := b.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Until the server reaped the discarded session the branch is still its own (XAER_NOTA).
		if !testenv.Poll(20*time.Second, func() bool {
			if listed(t, cctx, e, tag) {
				_ = xa.Resolve(cctx, e.Sink, tag, false)
			}
			return !listed(t, cctx, e, tag)
		}) {
			t.Errorf("could not roll back %s when the test ended", tag)
		}
	})
	return b
}

func listed(t *testing.T, ctx context.Context, e *Env, tag string) bool {
	t.Helper()
	all, err := xa.ListPrepared(ctx, e.Sink)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.GTRID == tag {
			return true
		}
	}
	return false
}

// decide writes a decided ledger row for checkpoint id, as the owner of the job would.
func decide(t *testing.T, ctx context.Context, e *Env, id int64, offs partition.Offsets, tags ...string) {
	t.Helper()
	f, err := ledger.Acquire(ctx, e.Ledger, ledger.FenceConfig{Owner: "test owner"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	if err := e.Ledger.Decide(ctx, f.Epoch(), nil, ledger.Checkpoint{ID: id, Tags: tags, Offsets: offs}); err != nil {
		t.Fatal(err)
	}
}

func tag(e *Env, checkpoint int64, subtask int) string {
	return commit.Tag(e.Config.Job.Name, checkpoint, subtask)
}

func byTag(txns []Txn) map[string]Txn {
	m := map[string]Txn{}
	for _, t := range txns {
		m[t.Tag] = t
	}
	return m
}

// status and txns list show the job's prepared branches with the ledger's verdict: a decided
// checkpoint's branch must commit, an undecided one's must roll back; list adds branches of jobs
// not in the ledger, as unknown.
func TestStatusAndListShowVerdicts(t *testing.T) {
	e, ctx := newEnv(t, 2)
	topic := e.Config.Kafka.Topics[0]
	decide(t, ctx, e, 5, partition.Offsets{topic: {0: 0}}, tag(e, 5, 0))
	decided, undecided, orphan := tag(e, 5, 0), tag(e, 6, 1), "gone"+testenv.Suffix()+"-3-0"
	for _, tg := range []string{decided, undecided, orphan} {
		prepare(t, ctx, e, tg)
	}

	st, err := Status(ctx, e, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastCheckpoint == nil || st.LastCheckpoint.ID != 5 || st.LastCheckpoint.State != string(ledger.Committing) {
		t.Fatalf("last checkpoint %+v, want 5 COMMITTING", st.LastCheckpoint)
	}
	if len(st.Committing) != 1 || st.Committing[0].ID != 5 {
		t.Fatalf("committing rows %+v, want checkpoint 5", st.Committing)
	}
	if len(st.Fences) != 1 || st.Fences[0].Instance != e.Config.Job.Name || st.Fences[0].Held || st.Fences[0].OwnerEpoch != 1 || st.Fences[0].Owner != "test owner" {
		t.Fatalf("fences %+v, want the job's, not held, last owner 'test owner' at epoch 1", st.Fences)
	}
	if len(st.Partitions) != 2 || st.Partitions[0].Offset == nil || *st.Partitions[0].Offset != 0 || st.Partitions[1].Offset != nil {
		t.Fatalf("partitions %+v: want partition 0 at offset 0 and partition 1 not in the ledger", st.Partitions)
	}
	if len(st.Branches) != 2 {
		t.Fatalf("status lists %d branches of the job, want 2: %+v", len(st.Branches), st.Branches)
	}
	got := byTag(st.Branches)
	if b := got[decided]; b.Verdict != VerdictCommit || b.LedgerState != string(ledger.Committing) || b.AgeSeconds == nil {
		t.Fatalf("decided branch %+v: want verdict commit with a ledger state and an age", b)
	}
	if b := got[undecided]; b.Verdict != VerdictRollback || b.LedgerState != "" || b.AgeSeconds != nil || b.Checkpoint != 6 || b.Subtask != 1 {
		t.Fatalf("undecided branch %+v: want verdict rollback, no ledger row, unknown age", b)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{decided, undecided, "COMMITTING", "rollback", "unknown", "not running"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("status text lacks %q:\n%s", want, text.String())
		}
	}

	// Run as two instances, the job has two fences; status shows who holds each.
	one, err := ledger.Acquire(ctx, ledger.NewInstance(e.Sink, e.Config.Job.Name, 1, 2), ledger.FenceConfig{Owner: "instance one"})
	if err != nil {
		t.Fatal(err)
	}
	st, err = Status(ctx, e, "")
	one.Release()
	if err != nil || len(st.Fences) != 2 || st.Fences[0].Held || !st.Fences[1].Held ||
		st.Fences[1].Instance != e.Config.Job.Name+"/1" || st.Fences[1].Owner != "instance one" {
		t.Fatalf("fences of a job run as two instances: %+v, %v", st.Fences, err)
	}

	l, err := ListTxns(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	all := byTag(l.Branches)
	if all[decided].Verdict != VerdictCommit || all[undecided].Verdict != VerdictRollback {
		t.Fatalf("list verdicts: %+v", l.Branches)
	}
	if o := all[orphan]; o.Kind != KindUnknown || o.Verdict != VerdictUnknown || o.AgeSeconds != nil {
		t.Fatalf("branch of a job not in the ledger %+v: want kind unknown_job, verdict unknown (never rollback), unknown age", o)
	}
	text.Reset()
	if err := l.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if l := lineOf(text.String(), orphan); !strings.Contains(l, "unknown_job") || strings.Contains(l, "rollback") {
		t.Fatalf("list text does not show %s as unknown_job with verdict unknown:\n%s", orphan, text.String())
	}
}

// resolve refuses to contradict the ledger without --force, does it with --force, follows the
// ledger without it, never touches a branch of a job this ledger does not know (forced or not),
// rolls back a preflight probe, records every action once in relay_audit, and counts each once for
// the running relay's metric.
func TestResolve(t *testing.T) {
	e, ctx := newEnv(t, 1)
	decided, undecided, unknown := tag(e, 5, 0), tag(e, 6, 0), "gone"+testenv.Suffix()+"-3-0"
	// A job of another ledger may be named like the probes; its checkpoint ids give it away.
	probe, notProbe := fmt.Sprintf("%s-%d-7", probeJob, time.Now().UnixNano()), probeJob+"-3-0"
	decide(t, ctx, e, 5, partition.Offsets{}, decided)
	for _, tg := range []string{decided, undecided, unknown, probe, notProbe} {
		prepare(t, ctx, e, tg)
	}

	if _, err := Resolve(ctx, e, decided, false, false, yes); !errors.Is(err, ErrContradiction) || !strings.Contains(err.Error(), "decided checkpoint 5") {
		t.Fatalf("rollback of a decided branch: %v, want a refusal naming the decision", err)
	}
	if _, err := Resolve(ctx, e, undecided, true, false, yes); !errors.Is(err, ErrContradiction) || !strings.Contains(err.Error(), "never decided") {
		t.Fatalf("commit of an undecided branch: %v, want a refusal", err)
	}
	for _, tg := range []string{unknown, notProbe} {
		for _, commit := range []bool{false, true} {
			if _, err := Resolve(ctx, e, tg, commit, true, yes); !errors.Is(err, ErrUnknownJob) || !strings.Contains(err.Error(), "no database on this server") {
				t.Fatalf("forced resolution (commit %v) of %s, a branch of an unknown job: %v, want ErrUnknownJob", commit, tg, err)
			}
		}
	}
	for _, tg := range []string{decided, undecided, unknown, probe, notProbe} {
		if !listed(t, ctx, e, tg) {
			t.Fatalf("a refused resolution touched %s", tg)
		}
	}

	r, err := Resolve(ctx, e, decided, false, true, yes)
	if err != nil || !r.Forced || r.Action != VerdictRollback || r.Verdict != VerdictCommit || !strings.Contains(r.Effect, "never be counted") {
		t.Fatalf("forced rollback of a decided branch: %+v, %v", r, err)
	}
	if r, err = Resolve(ctx, e, undecided, false, false, yes); err != nil || r.Forced {
		t.Fatalf("rollback of an undecided branch: %+v, %v", r, err)
	}
	if r, err = Resolve(ctx, e, probe, false, false, yes); err != nil || r.Kind != KindProbe {
		t.Fatalf("rollback of a preflight probe: %+v, %v", r, err)
	}
	for _, tg := range []string{decided, undecided, probe} {
		if listed(t, ctx, e, tg) {
			t.Fatalf("%s is still prepared after its resolution", tg)
		}
	}
	var rows int
	if err := e.Sink.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_stats_minute WHERE sku NOT IN (?, ?)`, unknown, notProbe).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("rolled-back branches left %d rows (%v)", rows, err)
	}
	if _, err := Resolve(ctx, e, undecided, false, false, yes); !errors.Is(err, ErrNoBranch) {
		t.Fatalf("resolving a resolved branch: %v, want ErrNoBranch", err)
	}

	log, err := e.Ledger.AuditLog(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0].Target != undecided || log[0].Forced || log[1].Target != decided || !log[1].Forced ||
		log[0].Action != ledger.AuditRollback || log[0].Origin != "manual" || log[0].Operator != e.Operator {
		t.Fatalf("audit rows %+v: want the forced rollback of %s, then the rollback of %s", log, decided, undecided)
	}
	probeLog, err := ledger.New(e.Sink, probeJob).AuditLog(ctx, 10)
	if err != nil || len(probeLog) != 1 || probeLog[0].Target != probe {
		t.Fatalf("probe audit rows %+v, %v; want the probe's rollback", probeLog, err)
	}
	counts, err := e.Ledger.ClaimManualResolves(ctx)
	if err != nil || len(counts) != 1 || counts[ledger.AuditRollback] != 2 {
		t.Fatalf("claimed %v, %v; want 2 rollbacks", counts, err)
	}
	if counts, err = e.Ledger.ClaimManualResolves(ctx); err != nil || len(counts) != 0 {
		t.Fatalf("second claim %v, %v; want nothing (each action counts once)", counts, err)
	}
}

// While a relay runs (it holds the fence), resolve may only commit a decided branch; and a branch
// whose preparing session is alive is reported as attached, not resolved.
func TestResolveWhileRunningAndAttached(t *testing.T) {
	e, ctx := newEnv(t, 1)
	decided, undecided := tag(e, 5, 0), tag(e, 6, 0)
	decide(t, ctx, e, 5, partition.Offsets{}, decided)
	prepare(t, ctx, e, decided)
	prepare(t, ctx, e, undecided)

	running, err := ledger.Acquire(ctx, e.Ledger, ledger.FenceConfig{Owner: "a running relay"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(ctx, e, undecided, false, false, yes); !errors.Is(err, ledger.ErrFenced) || !strings.Contains(err.Error(), "a running relay") {
		t.Fatalf("rollback while the job runs: %v, want ErrFenced naming the holder", err)
	}
	if _, err := Resolve(ctx, e, decided, false, true, yes); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("forced rollback while the job runs: %v, want ErrFenced", err)
	}
	if r, err := Resolve(ctx, e, decided, true, false, yes); err != nil || r.Forced {
		t.Fatalf("commit of a decided branch while the job runs: %+v, %v", r, err)
	}
	var n int
	if err := e.Sink.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_stats_minute WHERE sku = ?`, decided).Scan(&n); err != nil || n != 1 {
		t.Fatalf("committed branch's row: %d (%v), want 1", n, err)
	}
	if listed(t, ctx, e, decided) {
		t.Fatalf("%s is still prepared after its commit", decided)
	}
	running.Release()

	live := tag(e, 7, 0)
	b := prepareAttached(t, ctx, e, live)
	_, err = Resolve(ctx, e, live, false, false, yes)
	if !errors.Is(err, ErrAttached) {
		t.Fatalf("rollback of a branch attached to a live session: %v, want ErrAttached", err)
	}
	if !listed(t, ctx, e, live) {
		t.Fatal("the attached branch is gone")
	}
	if err := b.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if listed(t, ctx, e, live) {
		t.Fatalf("%s is still prepared after its session rolled it back", live)
	}
	if err := e.Sink.QueryRowContext(ctx, `SELECT COUNT(*) FROM order_stats_minute WHERE sku = ?`, live).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rolled-back branch's row: %d (%v), want 0", n, err)
	}
}

// lineOf is the first line of out that contains s ("" when none does).
func lineOf(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// yes confirms every plan, as --yes does.
func yes(Plan) (bool, error) { return true, nil }

// A plan that is not confirmed changes nothing: the branch stays prepared, no audit row is written.
func TestResolveNotConfirmed(t *testing.T) {
	e, ctx := newEnv(t, 1)
	undecided := tag(e, 6, 0)
	prepare(t, ctx, e, undecided)
	var shown bytes.Buffer
	r, err := Resolve(ctx, e, undecided, false, false, func(p Plan) (bool, error) { return false, p.WriteText(&shown) })
	if !errors.Is(err, ErrNotConfirmed) || r == nil || r.Action != VerdictRollback {
		t.Fatalf("unconfirmed rollback: %+v, %v; want ErrNotConfirmed with the plan", r, err)
	}
	if l := lineOf(shown.String(), "plan: roll back "+undecided); !strings.Contains(l, "job "+e.Config.Job.Name+", checkpoint 6") {
		t.Fatalf("plan shown:\n%s", shown.String())
	}
	if !listed(t, ctx, e, undecided) {
		t.Fatal("an unconfirmed rollback rolled the branch back")
	}
	if log, err := e.Ledger.AuditLog(ctx, 10); err != nil || len(log) != 0 {
		t.Fatalf("an unconfirmed rollback left audit rows %+v (%v)", log, err)
	}
}
