package main

// The flink step: relay XA against Apache Flink's exactly-once (XA) JDBC sink, on one topic, each
// run on a fresh database, timed from process start until order_stats_minute holds every order.
// The Flink side is bench/flink (FlinkOrders.java), built here with Maven; not in the default
// steps, since it needs Maven and ≈85 MB of Flink jars (BENCH_STEPS=flink).

import (
	"bytes"
	"context"
	"crypto/md5"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/xa"
)

// FlinkResult compares relay with Flink's XA JDBC sink in two variants.
type FlinkResult struct {
	Orders      int64                 `json:"orders"`
	Partitions  int                   `json:"partitions"`
	SKUs        int                   `json:"skus"`
	Windows     int                   `json:"windows"`
	Subtasks    int                   `json:"relay_subtasks"`
	Parallelism int                   `json:"flink_parallelism"`
	Interval    string                `json:"interval"`
	Loadgen     string                `json:"loadgen_command"`
	Versions    string                `json:"versions"`
	Build       string                `json:"build_command"`
	Kinds       []string              `json:"kinds,omitempty"` // run (BENCH_FLINK_KINDS); empty: all of flinkKinds
	Commands    map[string]string     `json:"commands"`        // by kind
	Runs        []FlinkRun            `json:"runs"`
	Summary     map[string]FlinkStats `json:"summary"` // by kind
}

// FlinkRun is one run; CPU seconds (self, kafka, mysql) are read when the totals are reached.
type FlinkRun struct {
	Kind     string             `json:"kind"`
	Rep      int                `json:"rep"`
	Seconds  float64            `json:"seconds"`     // process start → the table holds every order
	First    float64            `json:"first_secs"`  // process start → first record (Flink) / `state running` (relay)
	CPU      map[string]float64 `json:"cpu"`         //
	Checksum string             `json:"checksum"`    // rows, SUM(order_count), SUM(amount_sum), BIT_XOR of row CRC32s
	Ratio    float64            `json:"relay_ratio"` // Seconds / the same repetition's relay Seconds
}

// FlinkStats are the medians of one kind.
type FlinkStats struct {
	Seconds  float64 `json:"median_seconds"`
	Rate     float64 `json:"median_rate"` // orders over the median time
	First    float64 `json:"median_first_secs"`
	CPU      float64 `json:"median_cpu_secs"`
	KafkaCPU float64 `json:"median_kafka_cpu_secs"`
	MySQLCPU float64 `json:"median_mysql_cpu_secs"`
	Ratio    float64 `json:"median_relay_ratio"`
}

// flinkKinds run in this order in every repetition.
var flinkKinds = []string{"relay", "per-record", "pre-aggregated"}

// flinkFormatID is the XA formatID of Flink's JDBC sink (TransactionId.FORMAT_ID).
const flinkFormatID = 202

// kinds are the configurations run, in flinkKinds' order.
func (r *FlinkResult) kinds() []string {
	if len(r.Kinds) == 0 {
		return flinkKinds
	}
	return r.Kinds
}

// runFlink runs the comparison at each size of BENCH_FLINK_SIZES (orders, comma-separated; default
// BENCH_FLINK_ORDERS, 1 000 000), in one sitting: a topic each, the sizes in the order given.
func runFlink(e *kit.Env) ([]*FlinkResult, error) {
	var kinds []string
	for _, k := range strings.Split(kit.EnvString("BENCH_FLINK_KINDS", strings.Join(flinkKinds, ",")), ",") {
		if !slices.Contains(flinkKinds, k) {
			return nil, fmt.Errorf("BENCH_FLINK_KINDS: unknown kind %q (known: %s)", k, strings.Join(flinkKinds, ","))
		}
		kinds = append(kinds, k)
	}
	if !slices.Contains(kinds, "relay") {
		return nil, fmt.Errorf("BENCH_FLINK_KINDS must name relay: each Flink table is checked against relay's")
	}
	if len(kinds) == len(flinkKinds) {
		kinds = nil
	}
	var out []*FlinkResult
	for _, size := range strings.Split(kit.EnvString("BENCH_FLINK_SIZES", strconv.Itoa(kit.EnvInt("BENCH_FLINK_ORDERS", 1000000))), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(size))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("BENCH_FLINK_SIZES: %q is not a number of orders", size)
		}
		r, err := runFlinkSize(e, int64(n), kinds)
		if err != nil {
			return out, fmt.Errorf("%d orders: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func runFlinkSize(e *kit.Env, orders int64, kinds []string) (*FlinkResult, error) {
	r := &FlinkResult{Orders: orders, Partitions: 4, SKUs: kit.EnvInt("BENCH_SKUS", 1000), Kinds: kinds,
		Windows: kit.EnvInt("BENCH_WINDOWS", 10), Subtasks: kit.EnvInt("BENCH_SUBTASKS", 2), Parallelism: 4,
		Interval: kit.EnvDuration("BENCH_TP_INTERVAL", time.Second).String(), Commands: map[string]string{}, Summary: map[string]FlinkStats{}}
	out := filepath.Join(e.Root, ".cache/bench/flink")
	r.Build = "mvn -q -B -f bench/flink/pom.xml package -Dbench.out=.cache/bench/flink"
	kit.Logf("building bench/flink (Maven)")
	if b, err := exec.Command("mvn", "-q", "-B", "-f", filepath.Join(e.Root, "bench/flink/pom.xml"), "package", "-Dbench.out="+out).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("maven: %w: %s", err, b)
	}
	versions, err := pomVersions(filepath.Join(e.Root, "bench/flink/pom.xml"))
	if err != nil {
		return nil, err
	}
	jv, _ := exec.Command("java", "-version").CombinedOutput()
	r.Versions = versions + "; " + strings.SplitN(string(jv), "\n", 2)[0]
	topic, err := e.CreateTopic("bench_flink", r.Partitions)
	if err != nil {
		return nil, err
	}
	lg := harness.Loadgen{Topic: topic, Orders: int(r.Orders), SKUs: r.SKUs, Windows: r.Windows, Seed: 1}
	r.Loadgen = "bin/relay " + strings.Join(quoteEmpty(lg.Args("…")), " ")
	kit.Logf("producing %d orders into %s", r.Orders, topic)
	if end, _, err := e.Produce(lg, "flink-loadgen.log"); err != nil || harness.Total(end) != r.Orders {
		return nil, fmt.Errorf("produce: %v (topic holds %d records, want %d)", err, harness.Total(end), r.Orders)
	}
	for rep := 1; rep <= kit.EnvInt("BENCH_REPS", 3); rep++ {
		var relay FlinkRun
		for _, kind := range r.kinds() {
			run, err := runFlinkOne(e, r, topic, kind, rep, out)
			if err != nil {
				return nil, fmt.Errorf("%s rep %d: %w", kind, rep, err)
			}
			if kind == "relay" {
				relay = run
			} else if run.Checksum != relay.Checksum {
				return nil, fmt.Errorf("%s rep %d: table %s, relay's %s", kind, rep, run.Checksum, relay.Checksum)
			}
			run.Ratio = run.Seconds / relay.Seconds
			kit.Logf("flink/%s rep %d: %.2fs from process start (first record, relay: consuming, %.2fs), CPU %.1fs, kafka %.1fs, mysql %.1fs; %s",
				kind, rep, run.Seconds, run.First, run.CPU["self"], run.CPU["kafka"], run.CPU["mysql"], run.Checksum)
			r.Runs = append(r.Runs, run)
		}
	}
	for _, kind := range r.kinds() {
		var x [6][]float64 // seconds, first, ratio, CPU self, kafka, mysql
		for _, run := range r.Runs {
			if run.Kind == kind {
				for i, v := range []float64{run.Seconds, run.First, run.Ratio, run.CPU["self"], run.CPU["kafka"], run.CPU["mysql"]} {
					x[i] = append(x[i], v)
				}
			}
		}
		m := func(i int) float64 { return kit.Median(x[i]) }
		r.Summary[kind] = FlinkStats{Seconds: m(0), Rate: float64(r.Orders) / m(0), First: m(1), Ratio: m(2), CPU: m(3), KafkaCPU: m(4), MySQLCPU: m(5)}
	}
	return r, nil
}

// runFlinkOne runs relay or one Flink variant on a fresh database until the table holds every order.
func runFlinkOne(e *kit.Env, r *FlinkResult, topic, kind string, rep int, out string) (FlinkRun, error) {
	run := FlinkRun{Kind: kind, Rep: rep}
	job, dsn, db, err := e.CreateJob()
	if err != nil {
		return run, err
	}
	defer e.DropNow(job)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	logName := fmt.Sprintf("flink-%s-%d.log", kind, rep)
	var p *harness.Relay
	var cpu *kit.CPUMeter
	jobID := fmt.Sprintf("%x", md5.Sum([]byte(job))) // Flink's job id: the gtrid of its XA branches starts with it
	if kind == "relay" {
		interval, _ := time.ParseDuration(r.Interval)
		o := kit.RelayOpts{Job: job, Topic: topic, DSN: dsn, Mode: "xa", Subtasks: r.Subtasks, Interval: interval, LogLevel: "info"}
		r.Commands[kind] = strings.Join(o.Vars(), " ") + " RELAY_KAFKA_BROKERS=… RELAY_MYSQL_DSN=… bin/relay run"
		cpu = e.StartCPU(nil)
		rp, err := e.StartRelay(o, logName)
		if err != nil {
			return run, err
		}
		p = rp.Relay
	} else {
		f, _, err := sink.DetectFlavor(ctx, db)
		if err != nil {
			return run, err
		}
		if _, err := db.ExecContext(ctx, loadgen.DefaultPlan().SinkTable(0).CreateSQL(f)); err != nil {
			return run, err
		}
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return run, err
		}
		args := flinkArgs(r, kind, out, e.Brokers, topic, job, jdbcURL(cfg, f, cfg.Addr, cfg.DBName), cfg.User, jobID)
		shown := flinkArgs(r, kind, ".cache/bench/flink", "…", "<topic>", "<group>", jdbcURL(cfg, f, "…", "<db>"), cfg.User, "<job id>")
		for i, a := range shown {
			if strings.ContainsAny(a, "*&'") {
				shown[i] = `"` + a + `"`
			}
		}
		r.Commands[kind] = "RELAY_BENCH_JDBC_PASSWORD=… java " + strings.Join(shown, " ")
		e.OnCleanup(func() { rollbackFlink(db, jobID) }) // runs after the kill below, before the database is dropped
		cpu = e.StartCPU(nil)
		if p, err = harness.Start(harness.Options{Bin: "java", Args: args, Env: append(os.Environ(), "RELAY_BENCH_JDBC_PASSWORD="+cfg.Passwd), Log: filepath.Join(e.OutDir, logName)}); err != nil {
			return run, err
		}
		e.OnCleanup(p.Kill)
	}
	defer p.Kill()
	doneAt, err := waitOrders(db, r.Orders, p)
	self, _ := kit.ProcCPU(p.PID())
	run.CPU = cpu.Stop()
	run.CPU["self"] = self.Seconds()
	if err != nil {
		return run, err
	}
	run.Seconds = doneAt.Sub(p.Start).Seconds()
	if kind == "relay" {
		l, _ := p.WaitLog(kit.IsRunning, 5*time.Second)
		run.First = l.TS.Sub(p.Start).Seconds()
		if err := p.Stop(time.Minute); err != nil {
			return run, err
		}
	} else {
		b, _ := os.ReadFile(p.Log)
		if _, after, ok := bytes.Cut(b, []byte("first-record-unix-ms ")); ok {
			ms, _ := strconv.ParseInt(string(bytes.Fields(after)[0]), 10, 64)
			run.First = time.UnixMilli(ms).Sub(p.Start).Seconds()
		}
		_ = p.Stop(30 * time.Second) // SIGTERM: the JVM exits 143
		rollbackFlink(db, jobID)
	}
	var rows, orders, crc int64
	var amount string
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), SUM(order_count), SUM(amount_sum), BIT_XOR(CRC32(CONCAT_WS('|', window_start, sku, order_count, amount_sum))) FROM order_stats_minute`).Scan(&rows, &orders, &amount, &crc); err != nil {
		return run, err
	}
	run.Checksum = fmt.Sprintf("rows=%d orders=%d amount=%s crc=%08x", rows, orders, amount, crc)
	return run, nil
}

// waitOrders polls SUM(order_count) every 25 ms until it is orders; more is an error (a duplicate).
func waitOrders(db *sql.DB, orders int64, p *harness.Relay) (time.Time, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var n int64
		err := db.QueryRow(`SELECT COALESCE(SUM(order_count), 0) FROM order_stats_minute`).Scan(&n) // missing until relay made it
		now := time.Now()
		switch {
		case err == nil && n == orders:
			return now, nil
		case n > orders:
			return now, fmt.Errorf("table counts %d orders, the topic holds %d", n, orders)
		case !p.Alive():
			return now, fmt.Errorf("process exited (%v) with %d of %d orders in the table: %s", p.Err(), n, orders, harness.Tail(p.Log, 20))
		case now.After(deadline):
			return now, fmt.Errorf("%d of %d orders after 10 minutes (%v)", n, orders, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// flinkArgs are java's arguments for one Flink variant.
func flinkArgs(r *FlinkResult, kind, out, brokers, topic, group, url, user, jobID string) []string {
	return []string{"-Xmx2g", "-cp", out + "/target/relay-flink-bench-1.jar:" + out + "/lib/*", "sh.relay.bench.FlinkOrders", "--variant", kind,
		"--parallelism", strconv.Itoa(r.Parallelism), "--interval-ms", strconv.FormatInt(kit.EnvDuration("BENCH_TP_INTERVAL", time.Second).Milliseconds(), 10),
		"--brokers", brokers, "--topic", topic, "--group", group, "--jdbc-url", url, "--user", user, "--job-id", jobID}
}

// jdbcURL is Connector/J's URL for a Go MySQL DSN: sessions at READ COMMITTED, as relay's, and batches
// rewritten into multi-row statements.
func jdbcURL(cfg *mysql.Config, f sink.Flavor, addr, db string) string {
	ssl, iso := "DISABLED", "transaction_isolation"
	if cfg.TLSConfig != "" && cfg.TLSConfig != "false" {
		ssl = "REQUIRED"
	}
	if f == sink.MariaDB {
		iso = "tx_isolation" // MariaDB 10.11 has no transaction_isolation
	}
	return fmt.Sprintf("jdbc:mysql://%s/%s?sslMode=%s&rewriteBatchedStatements=true&sessionVariables=%s='READ-COMMITTED'", addr, db, ssl, iso)
}

// rollbackFlink rolls back the XA branches Flink left prepared (their gtrid starts with the job id),
// so DROP DATABASE does not wait for them.
func rollbackFlink(db *sql.DB, jobID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := xa.ListPrepared(ctx, db)
	if err != nil {
		return
	}
	for _, b := range rs {
		if b.FormatID == flinkFormatID && strings.HasPrefix(fmt.Sprintf("%x", b.GTRID), jobID) {
			_, _ = db.ExecContext(ctx, fmt.Sprintf("XA ROLLBACK X'%x',X'%x',%d", b.GTRID, b.BQual, flinkFormatID))
		}
	}
}

// pomVersions lists bench/flink's dependencies as "artifact version".
func pomVersions(path string) (string, error) {
	b, err := os.ReadFile(path)
	flink := regexp.MustCompile(`<flink.version>(.*)</flink.version>`).FindSubmatch(b)
	var out []string
	for _, m := range regexp.MustCompile(`<artifactId>(.*)</artifactId>\s*<version>(.*)</version>`).FindAllSubmatch(b, -1) {
		if !bytes.Contains(m[1], []byte("plugin")) && flink != nil {
			out = append(out, string(m[1])+" "+strings.ReplaceAll(string(m[2]), "${flink.version}", string(flink[1])))
		}
	}
	return strings.Join(out, ", "), err
}
