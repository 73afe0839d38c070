package crash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/harness/committed"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// refused starts relay run and requires it to exit with status 1 before it writes anything,
// its last log lines containing every part of want.
func (e *env) refused(want ...string) {
	e.t.Helper()
	p := e.start()
	err := p.wait(e.t, 60*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		e.t.Fatalf("relay run: %v, want exit status 1\n%s", err, tail(p.Log, 10))
	}
	out := tail(p.Log, 3)
	for _, w := range want {
		if !strings.Contains(out, w) {
			e.t.Fatalf("relay run's refusal lacks %q:\n%s", w, out)
		}
	}
	if len(logEvents(e.t, p.Log, "recovered")) > 0 {
		e.t.Fatalf("relay consumed before refusing:\n%s", tail(p.Log, 10))
	}
}

// relay run and preflight refuse an aggregate table that is MyISAM (a rolled-back epoch would stay
// in it: totals doubled after a crash) or whose sku compares case-insensitively, naming the table
// and the difference, and leave the table as it was.
func TestRunRefusesSinkTable(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := e.db.Exec(`CREATE TABLE order_stats_minute (window_start DATETIME NOT NULL,
		sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, order_count BIGINT NOT NULL,
		amount_sum DECIMAL(38,4) NOT NULL, PRIMARY KEY (window_start, sku)) ENGINE=MyISAM`); err != nil {
		t.Fatal(err)
	}
	e.refused("order_stats_minute: engine MyISAM, not InnoDB", "relay never alters a table")
	stdout, stderr, code := e.cli(nil, "preflight")
	if code != 1 || !lineHas(stdout, "FAIL schema", "order_stats_minute: engine MyISAM, not InnoDB") || strings.Contains(stdout, "ok xa:") {
		t.Fatalf("preflight on a MyISAM table: exit %d, want 1 with FAIL schema and no probe\n%s%s", code, stdout, stderr)
	}
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM order_stats_minute`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the refused table holds %d rows (%v), want 0: preflight's probe left a row", n, err)
	}

	if _, err := e.db.Exec(`ALTER TABLE order_stats_minute ENGINE=InnoDB,
		MODIFY sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL`); err != nil {
		t.Fatal(err)
	}
	e.refused("order_stats_minute: column sku has collation utf8mb4_general_ci, want utf8mb4_nopad_bin")
	var coll string
	if err := e.db.QueryRow(`SELECT COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME = 'order_stats_minute' AND COLUMN_NAME = 'sku'`).Scan(&coll); err != nil || coll != "utf8mb4_general_ci" {
		t.Fatalf("sku collation after the refusal: %q (%v): relay must not alter the table", coll, err)
	}
}

// A second job configured on a table another job writes is refused by relay run, naming the
// first, while the first keeps running; its totals stay exactly its own.
func TestSecondJobOnTableRefused(t *testing.T) {
	e := newEnv(t, 2)
	totals := loadgen.NewTotals()
	if err := e.produce(context.Background(), totals, loadgen.Options{Orders: 600, Batch: 100, SKUs: 20, Windows: 2, Seed: 41}); err != nil {
		t.Fatal(err)
	}
	a := e.start()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(logEvents(t, a.Log, "recovered")) > 0 }, "the first job running")
	other := *e
	other.job = "k" + testenv.Suffix()
	other.refused("order_stats_minute is written by job "+e.job, "job "+other.job+" would add its totals into the same rows")
	stdout, stderr, code := other.cli(nil, "preflight")
	if code != 1 || !lineHas(stdout, "FAIL table_owner", "is written by job "+e.job) {
		t.Fatalf("preflight of the second job: exit %d\n%s%s", code, stdout, stderr)
	}
	select {
	case <-a.Done():
		err := a.Err()
		t.Fatalf("the first job stopped: %v\n%s", err, tail(a.Log, 10))
	default:
	}
	_ = a.Signal(syscall.SIGTERM)
	if err := a.wait(t, 60*time.Second); err != nil {
		t.Fatalf("the first job did not stop cleanly: %v", err)
	}
	e.finish(totals)
}

// recreateTopic deletes the topic and creates it again, empty, with the same name.
func (e *env) recreateTopic(partitions int) {
	t := e.t
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := a.DeleteTopics(ctx, []string{e.topic}); err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("delete topic: %v %v", err, res)
	}
	// The deletion completes in the background: creating the name again fails until it has.
	var res []kafka.TopicResult
	if !testenv.Poll(time.Minute, func() bool {
		res, err = a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: e.topic, NumPartitions: partitions, ReplicationFactor: 1}})
		return err == nil && res[0].Error.Code() == kafka.ErrNoError
	}) {
		t.Fatalf("create topic again: %v %v", err, res)
	}
}

// beyondEnd lists the partitions whose resume offset in the ledger lies beyond the partition's high
// watermark, read from the broker by a client of the test's own (not relay's status).
func (e *env) beyondEnd() []int32 {
	t := e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resume, err := committed.Offsets(ctx, e.db, e.job, e.topic, e.held)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "group.id": "beyond-end-" + e.job})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out []int32
	for p, off := range resume {
		_, high, err := c.QueryWatermarkOffsets(e.topic, p, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if off > high {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// A topic deleted and recreated under relay's feet: status shows the partitions OUT OF RANGE
// (not lag 0), preflight fails its topics check, relay run refuses to start and says what to do,
// and verify fails within seconds with the reason instead of waiting forever. The runbook's
// recovery (offsets reset to the new topic's start) then counts the new records exactly once,
// on top of what the old topic contributed.
func TestRecreatedTopic(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 1000, Batch: 100, SKUs: 20, Windows: 2, Seed: 51}); err != nil {
		t.Fatal(err)
	}
	e.finish(totals)
	e.recreateTopic(2)
	if err := e.produce(ctx, totals, loadgen.Options{Orders: 60, Batch: 20, SKUs: 20, Windows: 2, Seed: 52}); err != nil {
		t.Fatal(err)
	}

	// Which partitions resume beyond the new topic's end depends on how the producer spread the
	// records (its sticky partitioner may fill one partition), so the expectation is computed from
	// the ledger and the broker, not assumed: the first phase wrote far more offsets than the second,
	// so at least one partition is out of range.
	beyond := e.beyondEnd()
	if len(beyond) == 0 {
		t.Fatal("no partition resumes beyond the recreated topic's end: the scenario did not happen")
	}
	stdout, stderr, code := e.cli(nil, "status")
	if code != 0 || !strings.Contains(stdout, "OUT OF RANGE") || !strings.Contains(stdout, "beyond the high watermark") {
		t.Fatalf("status after the topic was recreated: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = e.cli(nil, "preflight")
	if code != 1 || !lineHas(stdout, "FAIL topics", "resume offset outside the partition") {
		t.Fatalf("preflight after the topic was recreated: exit %d, want 1 and a failed topics check\n%s%s", code, stdout, stderr)
	}
	for p := int32(0); p < 2; p++ {
		line := fmt.Sprintf("partition %d: the ledger resumes at offset", p)
		if got := lineHas(stdout, line, "beyond the high watermark"); got != slices.Contains(beyond, p) {
			t.Fatalf("preflight after the topic was recreated: partition %d reported %v, want %v (out of range: %v)\n%s%s",
				p, got, !got, beyond, stdout, stderr)
		}
	}
	e.refused(fmt.Sprintf("partition %d: the ledger resumes at offset", beyond[0]), "beyond the high watermark",
		fmt.Sprintf("relay offsets reset --to %s:%d=0", e.topic, beyond[0]))
	begin := time.Now()
	_, stderr, code = e.cli(nil, "verify", "--timeout", "90s")
	if code != 1 || !strings.Contains(stderr, "the range to recount is not in the topic") || !strings.Contains(stderr, "beyond the high watermark") ||
		time.Since(begin) > 60*time.Second {
		t.Fatalf("verify after the topic was recreated: exit %d after %s, want 1 with the reason, well within its timeout\n%s",
			code, time.Since(begin), stderr)
	}

	if stdout, stderr, code = e.cli(nil, "offsets", "reset", "--to", "earliest", "--yes"); code != 0 {
		t.Fatalf("offsets reset: exit %d\n%s%s", code, stdout, stderr)
	}
	e.finish(totals)
	if b, _ := os.ReadFile(e.logs[len(e.logs)-1]); strings.Contains(string(b), "Offset out of range") {
		t.Fatal("relay hit an out-of-range offset after the reset")
	}
}
