package ops

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

func rowCount(t *testing.T, ctx context.Context, e *Env, table string) int {
	t.Helper()
	var n int
	if err := e.Sink.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"`").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// produceOrders writes n orders into the job's first topic and returns its high watermarks.
func produceOrders(t *testing.T, ctx context.Context, e *Env, n int) partition.Offsets {
	t.Helper()
	o := loadgen.Options{Brokers: e.Config.Kafka.Brokers.String(), Topic: e.Config.Kafka.Topics[0], Orders: n, Batch: 10, Seed: 3}
	if err := loadgen.Run(ctx, o, loadgen.NewTotals()); err != nil {
		t.Fatal(err)
	}
	return highWatermarks(t, e)
}

// Preflight refuses a non-transactional aggregate table and one whose definition differs, naming
// the table and the difference, and runs no probe; the probe (on the dead-letter table, which
// every pipeline spec has) leaves no row; a probe on a table that keeps rolled-back rows fails and
// still leaves nothing.
func TestPreflightRefusesSinkTable(t *testing.T) {
	e, ctx := newEnv(t, 1)
	cs := Preflight(ctx, e)
	if c := checkNamed(t, cs, "xa"); c.Status != CheckOK {
		t.Fatalf("xa on relay's table: %s", c)
	}
	if n := rowCount(t, ctx, e, "relay_dlq"); n != 0 {
		t.Fatalf("the probe left %d rows in relay_dlq", n)
	}

	for _, alter := range []string{"ENGINE=MyISAM", "MODIFY sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL"} {
		if _, err := e.Sink.ExecContext(ctx, "ALTER TABLE order_stats_minute "+alter); err != nil {
			t.Fatal(err)
		}
	}
	cs = Preflight(ctx, e)
	c := checkNamed(t, cs, "schema")
	if c.Status != CheckFail || !strings.Contains(c.Detail, ".order_stats_minute: engine MyISAM, not InnoDB") ||
		!strings.Contains(c.Detail, "column sku has collation utf8mb4_general_ci") {
		t.Fatalf("schema on a MyISAM table with a case-insensitive sku: %s", c)
	}
	for _, x := range cs {
		if x.Name == "xa" {
			t.Fatalf("a probe ran on a refused table: %s", x)
		}
	}
	// MyISAM keys are shorter: the copy has no source index.
	for _, q := range []string{"CREATE TABLE dlq_myisam LIKE relay_dlq", "ALTER TABLE dlq_myisam DROP KEY source_idx, ENGINE=MyISAM"} {
		if _, err := e.Sink.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := probeXA(ctx, e.Sink, "dlq_myisam"); err == nil || !strings.Contains(err.Error(), "not transactional") {
		t.Fatalf("probe on a MyISAM table: %v, want a failure saying it is not transactional", err)
	}
	if n := rowCount(t, ctx, e, "dlq_myisam"); n != 0 {
		t.Fatalf("the probe on a MyISAM table left %d rows", n)
	}
}

// Preflight names the job that owns the aggregate table when another job is configured on it, and
// warns about rows in an unowned table that the job cannot have written.
func TestPreflightTableOwner(t *testing.T) {
	e, ctx := newEnv(t, 1)
	if c := checkNamed(t, Preflight(ctx, e), "table_owner"); c.Status != CheckOK || !strings.Contains(c.Detail, "relay run claims it") {
		t.Fatalf("table_owner before any claim: %s", c)
	}
	// Rows nobody owns, in a table of a job that never committed: written by someone else.
	if _, err := e.Sink.ExecContext(ctx, `INSERT INTO order_stats_minute VALUES ('2025-01-01 00:00:00', 'x', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	if c := checkNamed(t, Preflight(ctx, e), "table_owner"); c.Status != CheckWarn || !strings.Contains(c.Detail, "holds rows, and job "+e.Config.Job.Name+" never committed") {
		t.Fatalf("table_owner with rows nobody owns: %s", c)
	}
	first := ledger.New(e.Sink, "first_"+testenv.Suffix())
	plan, err := e.Config.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.ClaimSchema(ctx, e.Sink, plan.Schema("relay_dlq", "")); err != nil {
		t.Fatal(err)
	}
	c := checkNamed(t, Preflight(ctx, e), "table_owner")
	if c.Status != CheckFail || !strings.Contains(c.Detail, "order_stats_minute is written by job "+first.Job()) {
		t.Fatalf("table_owner with the table claimed by %s: %s", first.Job(), c)
	}
}

// A resume offset beyond the high watermark (the topic was recreated after relay committed it) is
// reported by preflight, status and verify, each naming the partition, the offset and the
// watermarks; verify fails at once instead of waiting for offsets that never come.
func TestResumeOffsetBeyondTopic(t *testing.T) {
	e, ctx := newEnv(t, 2)
	topic := e.Config.Kafka.Topics[0]
	beyond, _ := produceOrders(t, ctx, e, 40).Get(topic, 1)
	beyond += 1000
	decide(t, ctx, e, 4, partition.Offsets{topic: {0: 0, 1: beyond}})
	if err := e.Ledger.MarkCommitted(ctx, 4); err != nil {
		t.Fatal(err)
	}
	want := "topic " + topic + " partition 1: the ledger resumes at offset "

	c := checkNamed(t, Preflight(ctx, e), "topics")
	if c.Status != CheckFail || !strings.Contains(c.Detail, want) || !strings.Contains(c.Detail, "beyond the high watermark") ||
		!strings.Contains(c.Detail, "relay offsets reset --to "+topic+":1=0") {
		t.Fatalf("topics: %s", c)
	}

	st, err := Status(ctx, e, "")
	if err != nil {
		t.Fatal(err)
	}
	p1 := st.Partitions[1]
	if p1.OutOfRange == nil || !strings.Contains(*p1.OutOfRange, want) || p1.Lag != nil || st.Partitions[0].OutOfRange != nil {
		t.Fatalf("status partitions %+v: want partition 1 out of range without a lag, partition 0 in range", st.Partitions)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "OUT OF RANGE") || !strings.Contains(text.String(), want) {
		t.Fatalf("status text does not show the partition out of range:\n%s", text.String())
	}

	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	begin := time.Now()
	_, err = Verify(vctx, e, VerifyOptions{From: "earliest"})
	if !errors.Is(err, ledger.ErrOutOfRange) || !strings.Contains(err.Error(), want) || vctx.Err() != nil {
		t.Fatalf("verify after %s: %v, want ErrOutOfRange naming partition 1, before its timeout", time.Since(begin), err)
	}
}

// A recount logs its progress (records read, offsets covered of the total), the first line at
// once, then every progressEvery.
func TestVerifyLogsProgress(t *testing.T) {
	e, ctx := newEnv(t, 2)
	core, logs := observer.New(zap.InfoLevel)
	e.Log = zap.New(core)
	hw := produceOrders(t, ctx, e, 200)
	decide(t, ctx, e, 2, hw)
	if err := e.Ledger.MarkCommitted(ctx, 2); err != nil {
		t.Fatal(err)
	}
	r, err := Verify(ctx, e, VerifyOptions{From: "earliest"})
	if err != nil || r.Records != 200 {
		t.Fatalf("verify: %d records, %v", r.Records, err)
	}
	var total int64
	for _, ps := range hw {
		for _, off := range ps {
			total += off
		}
	}
	lines := logs.FilterMessage("verify progress").All()
	if len(lines) == 0 {
		t.Fatal("no progress line")
	}
	if f := lines[0].ContextMap(); f["offsets_total"] != total || f["offsets_done"] != int64(0) || f["records_read"] != int64(0) {
		t.Fatalf("first progress line %v: want offsets_total %d, nothing read yet", f, total)
	}
}
