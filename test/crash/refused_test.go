package crash

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/testenv"
)

// MySQL refusing a checkpoint's rows for their values is not retried for ever: relay stops after
// three sessions in a row, exit status 6, naming the records not committed (topic/partition@first-
// last, from the ledger's offsets) and the row refused; relay_restarts_total counts the failures
// under cause data_refused; the refused checkpoints commit nothing, and once the row is repaired a
// restart commits every record exactly once. The refusal is real: a count at BIGINT's maximum, as an
// outside UPDATE (or a stored value grown past its column) leaves it, makes the upsert overflow
// (Error 1690); relay's own values all passed decoding.
func TestRefusedRowStopsRelay(t *testing.T) {
	for _, mode := range []string{"xa", "held"} {
		t.Run(mode, func(t *testing.T) {
			testRefusedRow(t, []string{"RELAY_MODE=" + mode}, func(ctx context.Context, e *env) (string, func()) {
				var window, sku string
				var count int64
				if err := e.db.QueryRowContext(ctx, `SELECT CAST(window_start AS CHAR), sku, order_count FROM order_stats_minute
					ORDER BY window_start, sku LIMIT 1`).Scan(&window, &sku, &count); err != nil {
					t.Fatal(err)
				}
				set := func(n int64) {
					if _, err := e.db.ExecContext(ctx, "UPDATE order_stats_minute SET order_count = ? WHERE window_start = ? AND sku = ?", n, window, sku); err != nil {
						t.Fatal(err)
					}
				}
				set(9223372036854775807)
				return regexp.QuoteMeta(fmt.Sprintf("order_stats_minute: MySQL refused row window_start=%q sku=%q (adding order_count=", window, sku)) +
					`.*Error 1690`, func() { set(count) }
			})
		})
	}
}

// A row of the append sink that MySQL refuses, here by a trigger (relay's table check does not
// look at triggers) raising Error 1406 for the first order of the second batch on partition 0, is
// named by its order_id and record.
func TestRefusedDetailRowStopsRelay(t *testing.T) {
	testRefusedRow(t, []string{"RELAY_MYSQL_DETAIL_TABLE=order_details"}, func(ctx context.Context, e *env) (string, func()) {
		end, err := harness.EndOffsets(e.brokers, e.topic)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, fmt.Sprintf(`CREATE TRIGGER refuse_order BEFORE INSERT ON order_details FOR EACH ROW
			IF NEW.src_partition = 0 AND NEW.src_offset >= %d THEN
				SIGNAL SQLSTATE '22001' SET MYSQL_ERRNO = 1406, MESSAGE_TEXT = 'refused by the test';
			END IF`, end[0])); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`detail rows: MySQL refused row order_id="[^"]+" of record %s/0@(\d+):.*Error 1406`, regexp.QuoteMeta(e.topic)),
			func() {
				if _, err := e.db.ExecContext(ctx, "DROP TRIGGER refuse_order"); err != nil {
					t.Fatal(err)
				}
			}
	})
}

// testRefusedRow commits a first batch of orders, lets refuse make MySQL refuse a row of a second
// batch (it returns a regular expression the error must match and how to repair the row), and
// checks the stop, the error, the metric and, after the repair, exactly-once totals.
func testRefusedRow(t *testing.T, extra []string, refuse func(ctx context.Context, e *env) (string, func())) {
	e := newEnv(t, 2, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	opts := loadgen.Options{Orders: 1000, Batch: 100, SKUs: 10, Windows: 1, StartTS: 1764000000000, Seed: 61}
	totals := loadgen.NewTotals()
	if err := e.produce(ctx, totals, opts); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	addr := httpAddr(t, p)
	want := e.expected(totals)
	testenv.Eventually(t, 60*time.Second, func() bool { return e.diffOracle(want) == "" }, "the first orders to commit")
	row, repair := refuse(ctx, e)
	// The same skus in the same window: the row gets orders again, and its count overflows.
	opts.Seed, opts.TxnID = 62, "lg2-"+e.topic
	if err := e.produce(ctx, totals, opts); err != nil {
		t.Fatal(err)
	}
	// The process is short-lived now: scrape often, keep the highest count seen.
	start := time.Now()
	var counted float64
	for p.Alive() && time.Since(start) < 90*time.Second {
		counted = max(counted, refusedRestarts(addr))
		time.Sleep(20 * time.Millisecond) // the sampling pace: the exit itself is awaited by the loop's condition
	}
	err := p.wait(t, 10*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 6 {
		t.Fatalf("relay exit: %v, want status 6 after %s\n%s", err, time.Since(start).Round(time.Millisecond), tail(p.Log, 10))
	}
	t.Logf("relay stopped %s after the second produce", time.Since(start).Round(time.Millisecond))
	stopped := logEvents(t, p.Log, "relay stopped")
	if len(stopped) != 1 {
		t.Fatalf("%d 'relay stopped' lines\n%s", len(stopped), tail(p.Log, 10))
	}
	msg, _ := stopped[0]["error"].(string)
	t.Logf("relay stopped: %s", msg)
	for _, part := range []string{"MySQL refused a checkpoint's data", "3 times in a row"} {
		if !strings.Contains(msg, part) {
			t.Fatalf("the error does not say %q:\n%s", part, msg)
		}
	}
	if !regexp.MustCompile(row).MatchString(msg) {
		t.Fatalf("the error does not name the row (%s):\n%s", row, msg)
	}
	// The records named are those after the ledger's offsets, up to at most the topic's end.
	offs, err := committed.Offsets(ctx, e.db, e.job, e.topic, e.held)
	if err != nil {
		t.Fatal(err)
	}
	end, err := harness.EndOffsets(e.brokers, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	ranges := regexp.MustCompile(regexp.QuoteMeta(e.topic)+`/(\d+)@(\d+)-(\d+)`).FindAllStringSubmatch(msg, -1)
	if len(ranges) == 0 {
		t.Fatalf("the error names no records of %s:\n%s", e.topic, msg)
	}
	for _, r := range ranges {
		part, _ := strconv.Atoi(r[1])
		first, _ := strconv.ParseInt(r[2], 10, 64)
		last, _ := strconv.ParseInt(r[3], 10, 64)
		if first != offs[int32(part)] || last < first || last >= end[int32(part)] {
			t.Fatalf("records %s: want from the committed offset %d to before the end %d", r[0], offs[int32(part)], end[int32(part)])
		}
	}
	var refused int
	for _, ev := range logEvents(t, p.Log, "session failed; restarting in-process through recovery") {
		if ev["cause"] == "data_refused" {
			refused++
		}
	}
	// Two restarts, then the exit; more only if a session committed records before the row's.
	if refused < 2 || counted < 1 {
		t.Fatalf("%d restarts logged with cause data_refused (want 2 or more), relay_restarts_total{cause=\"data_refused\"} seen at %v (want >= 1)", refused, counted)
	}
	if bs := e.branches(); len(bs) != 0 {
		t.Fatalf("the refused checkpoints left branches: %v", bs)
	}
	// Repaired, the row takes the orders once: nothing of the refused checkpoints was committed.
	repair()
	e.finish(totals)
}

// refusedRestarts reads relay_restarts_total{cause="data_refused"} from relay at addr, 0 when relay
// does not answer (it may be exiting).
func refusedRestarts(addr string) float64 {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "relay_restarts_total{") && strings.Contains(l, `cause="data_refused"`) {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			return v
		}
	}
	return 0
}
