package main

// The group step (issue 26): one job's throughput as today's single instance, as one member of its
// consumer group, and as two members sharing the topic, alternating on one pre-produced topic,
// each run on a fresh database and job. Not in the default steps (BENCH_STEPS=group): it produces a
// topic of its own and runs every configuration BENCH_REPS times per mode.
//
// Invariant: every configuration is timed the same way (process start and first `running` line →
// the first ledger poll at which relay_offsets covers the topic's end and, in XA mode, no
// checkpoint is still COMMITTING), so the only difference between runs is membership.

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
	"github.com/relay-sh/relay/internal/ledger"
)

// GroupResult compares membership instances (one process) with membership group (one and two
// members).
type GroupResult struct {
	Host        string              `json:"host,omitempty"` // CPU, cores and kernel of the run (hosts change between sittings)
	Orders      int64               `json:"orders"`
	Partitions  int                 `json:"partitions"`
	SKUs        int                 `json:"skus"`
	Windows     int                 `json:"windows"`
	Interval    string              `json:"interval"`
	ProduceSecs float64             `json:"produce_secs"`
	Loadgen     string              `json:"loadgen_command"`
	Modes       []string            `json:"modes"`
	Kinds       []string            `json:"kinds"`
	Commands    map[string]string   `json:"commands"` // by kind: the environment of each process
	Runs        []GroupRun          `json:"runs"`
	Summary     map[string]GroupSum `json:"summary"` // by "mode/kind"
}

// GroupRun is one measured run. Rates are orders over Seconds; the ratios compare it with the
// single instance of the same mode and repetition.
type GroupRun struct {
	Mode     string  `json:"mode"`
	Kind     string  `json:"kind"` // single | member | two
	Rep      int     `json:"rep"`
	Seconds  float64 `json:"seconds"`      // first `state … running` of any process → end
	ProcSecs float64 `json:"process_secs"` // first process start → end
	Rate     float64 `json:"rate"`
	// JoinSecs is first process start → the last of the run's processes to be assigned
	// partitions (its first "rebalance" of kind assigned; the single instance: its `running`).
	// SteadyRate is the orders committed after that moment over the time from it to the end: the
	// rate once every process reads (from the first ledger poll at or after it).
	JoinSecs   float64 `json:"join_secs"`
	SteadyRate float64 `json:"steady_rate"`
	Ratio      float64 `json:"ratio"` // Rate / the single instance's Rate, same mode and repetition
	// SteadyRatio is SteadyRate / the single instance's SteadyRate, same mode and repetition.
	SteadyRatio float64 `json:"steady_ratio"`
	// StepRate is the rate between checkpoints (stepRate): unlike Rate and SteadyRate it does not
	// include the wait for the checkpoint that covers the end, whose length depends on where in
	// its interval the reading ended. StepRatio is its ratio to the single instance's.
	StepRate  float64   `json:"step_rate"`
	StepRatio float64   `json:"step_ratio"`
	RelayCPU  []float64 `json:"relay_cpu"`
	MySQLCPU  float64   `json:"mysql_cpu"`
	KafkaCPU  float64   `json:"kafka_cpu"`
	// RelayWait is how long each relay process's threads waited on a run queue (runnable, not
	// running) over its life; MySQLWait the same for MariaDB's threads over the run.
	RelayWait []float64 `json:"relay_runqueue_secs"`
	// RelayRdkCPU is the part of each process's CPU its librdkafka threads ran (kit.Threads, at
	// the end, before it stops): a member has a second client, the group's.
	RelayRdkCPU []float64 `json:"relay_librdkafka_cpu"`
	MySQLWait   float64   `json:"mysql_runqueue_secs"`
	// Busy is the machine's busy CPU time over the run (every process, others' tests too), in
	// cores: at 2 the box was full.
	Busy float64 `json:"machine_busy_cores"`
	// InnoDB's global counters over the run (first process start → end): waits for a row lock,
	// the time spent in them and deadlocks, server-wide (other sessions' tests count too).
	LockWaits  int64 `json:"lock_waits"`
	LockTimeMs int64 `json:"lock_time_ms"`
	Deadlocks  int64 `json:"deadlocks"`
	// Sampled every 20 ms: transactions of the run's own database waiting for a row lock
	// (information_schema.INNODB_TRX in LOCK WAIT), so only relay's connections of this job count.
	// Waits is how many distinct waits were seen (shorter ones may fall between samples), by the
	// table locked; WaitMs estimates their time as waiting samples × 20 ms.
	Waits   map[string]int `json:"sampled_waits"`
	WaitMs  float64        `json:"sampled_wait_ms"`
	Samples int            `json:"samples"`
	// PhaseMs (XA, two members): the median over the run's checkpoints of the time from one
	// member's decision to the other member's nearest decision. Near 0 the members cut and flush
	// together (their flushes meet on the same rows); near half the interval they alternate.
	PhaseMs    float64 `json:"phase_ms,omitempty"`
	Rebalances float64 `json:"rebalances"` // relay_rebalances_total over the processes
	Fenced     float64 `json:"fenced"`     // relay_fenced_decisions_total over the processes
	Parts      []int   `json:"assigned"`   // relay_assigned_partitions of each process at the end
	// Checkpoints each process completed (relay_checkpoint_phase_duration_seconds{phase="total"}
	// count) and the mean time of their flush and prepare phases (where a member waits for a row
	// another member's open branch holds).
	Checkpoints []int     `json:"checkpoints"`
	FlushMs     []float64 `json:"flush_prepare_ms"`
	LoadAvg     string    `json:"loadavg"`
}

// GroupSum is the medians of one mode/kind, and the spread of its rates.
type GroupSum struct {
	Rate, MinRate, MaxRate, Ratio, Seconds, ProcSecs, RelayCPU, MySQLCPU, KafkaCPU, Busy                   float64
	LockWaits, LockTimeMs, SampledWaits, SampledMs, JoinSecs, SteadyRate, SteadyRatio, StepRate, StepRatio float64
	RelayWait, MySQLWait                                                                                   float64
}

// groupKinds are the configurations, in run and report order.
var groupKinds = []string{"single", "member", "two"}

var groupKindNames = map[string]string{
	"single": "one instance (membership instances)",
	"member": "one group member",
	"two":    "two group members",
}

func runGroup(e *kit.Env) (*GroupResult, error) {
	r := &GroupResult{Orders: int64(kit.EnvInt("BENCH_GROUP_ORDERS", 25000000)), Partitions: kit.EnvInt("BENCH_GROUP_PARTITIONS", 16),
		SKUs: kit.EnvInt("BENCH_SKUS", 1000), Windows: kit.EnvInt("BENCH_WINDOWS", 10),
		Interval: kit.EnvDuration("BENCH_TP_INTERVAL", time.Second).String(),
		Modes:    strings.Split(kit.EnvString("BENCH_GROUP_MODES", "xa,held"), ","),
		Kinds:    strings.Split(kit.EnvString("BENCH_GROUP_KINDS", strings.Join(groupKinds, ",")), ","),
		Commands: map[string]string{}, Summary: map[string]GroupSum{}}
	for _, k := range r.Kinds {
		if !slices.Contains(groupKinds, k) {
			return nil, fmt.Errorf("BENCH_GROUP_KINDS: unknown kind %q (known: %s)", k, strings.Join(groupKinds, ","))
		}
	}
	for _, m := range r.Modes {
		if m != "xa" && m != "held" {
			return nil, fmt.Errorf("BENCH_GROUP_MODES: unknown mode %q (xa, held)", m)
		}
	}
	reps := kit.EnvInt("BENCH_REPS", 3)
	topic, err := e.CreateTopic("bench_group", r.Partitions)
	if err != nil {
		return nil, err
	}
	if err := waitLeaders(e, topic, r.Partitions); err != nil {
		return nil, err
	}
	lg := harness.Loadgen{Topic: topic, Orders: int(r.Orders), SKUs: r.SKUs, Windows: r.Windows, Seed: 1}
	r.Loadgen = "bin/relay " + strings.Join(quoteEmpty(lg.Args("…")), " ")
	kit.Logf("producing %d orders into %s (%d partitions)", r.Orders, topic, r.Partitions)
	end, took, err := e.Produce(lg, "group-loadgen.log")
	if err != nil {
		return nil, err
	}
	r.ProduceSecs = took.Seconds()
	if harness.Total(end) != r.Orders {
		return nil, fmt.Errorf("topic holds %d records, want %d", harness.Total(end), r.Orders)
	}
	for rep := 1; rep <= reps; rep++ {
		for _, mode := range r.Modes {
			for _, kind := range r.Kinds {
				run, err := runGroupOnce(e, r, topic, end, mode, kind, rep)
				if err != nil {
					return nil, fmt.Errorf("%s/%s rep %d: %w", mode, kind, rep, err)
				}
				r.Runs = append(r.Runs, run)
			}
		}
	}
	r.pairRatios()
	for _, mode := range r.Modes {
		for _, kind := range r.Kinds {
			var rate, ratio, secs, psecs, cpu, mcpu, kcpu, busy, waits, wtime, swaits, sms, join, steady, sratio, step, stepRatio, rwait, mwait []float64
			for _, run := range r.Runs {
				if run.Mode != mode || run.Kind != kind {
					continue
				}
				rate = append(rate, run.Rate)
				join = append(join, run.JoinSecs)
				steady = append(steady, run.SteadyRate)
				if run.SteadyRatio > 0 {
					sratio = append(sratio, run.SteadyRatio)
				}
				if run.StepRate > 0 {
					step = append(step, run.StepRate)
				}
				if run.StepRatio > 0 {
					stepRatio = append(stepRatio, run.StepRatio)
				}
				if run.Ratio > 0 {
					ratio = append(ratio, run.Ratio)
				}
				secs = append(secs, run.Seconds)
				psecs = append(psecs, run.ProcSecs)
				var c float64
				for _, x := range run.RelayCPU {
					c += x
				}
				cpu = append(cpu, c)
				var rw float64
				for _, x := range run.RelayWait {
					rw += x
				}
				rwait = append(rwait, rw)
				mwait = append(mwait, run.MySQLWait)
				mcpu = append(mcpu, run.MySQLCPU)
				kcpu = append(kcpu, run.KafkaCPU)
				busy = append(busy, run.Busy)
				waits = append(waits, float64(run.LockWaits))
				wtime = append(wtime, float64(run.LockTimeMs))
				n := 0
				for _, c := range run.Waits {
					n += c
				}
				swaits = append(swaits, float64(n))
				sms = append(sms, run.WaitMs)
			}
			if len(rate) == 0 {
				continue
			}
			r.Summary[mode+"/"+kind] = GroupSum{Rate: kit.Median(rate), MinRate: slices.Min(rate), MaxRate: slices.Max(rate),
				Ratio: kit.Median(ratio), Seconds: kit.Median(secs), ProcSecs: kit.Median(psecs), RelayCPU: kit.Median(cpu),
				MySQLCPU: kit.Median(mcpu), KafkaCPU: kit.Median(kcpu), Busy: kit.Median(busy), LockWaits: kit.Median(waits),
				LockTimeMs: kit.Median(wtime), SampledWaits: kit.Median(swaits), SampledMs: kit.Median(sms),
				JoinSecs: kit.Median(join), SteadyRate: kit.Median(steady), SteadyRatio: kit.Median(sratio),
				StepRate: kit.Median(step), StepRatio: kit.Median(stepRatio),
				RelayWait: kit.Median(rwait), MySQLWait: kit.Median(mwait)}
		}
	}
	return r, nil
}

// waitLeaders waits (30 s at most) until the broker answers for every partition of a new topic:
// loadgen refuses a topic whose offsets Kafka cannot give yet ("Not leader for partition"), which a
// topic of 16 partitions hits for a moment after its creation.
func waitLeaders(e *kit.Env, topic string, partitions int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		end, err := harness.EndOffsets(e.Brokers, topic)
		if err == nil && len(end) == partitions {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: %d of %d partitions answer after 30 s: %v", topic, len(end), partitions, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pairRatios compares each run with the single instance of its mode and repetition, whichever
// ran first (BENCH_GROUP_KINDS=member,single reverses the order within a repetition).
func (r *GroupResult) pairRatios() {
	for i, run := range r.Runs {
		for _, base := range r.Runs {
			if base.Kind == "single" && base.Mode == run.Mode && base.Rep == run.Rep {
				r.Runs[i].Ratio = run.Rate / base.Rate
				r.Runs[i].SteadyRatio = run.SteadyRate / base.SteadyRate
				if base.StepRate > 0 {
					r.Runs[i].StepRatio = run.StepRate / base.StepRate
				}
			}
		}
	}
}

// groupOpts is the configuration of kind's processes: one subtask each (group mode's only
// setting), membership group for the members.
func groupOpts(r *GroupResult, job, topic, dsn, mode, kind string) kit.RelayOpts {
	interval, _ := time.ParseDuration(r.Interval)
	o := kit.RelayOpts{Job: job, Topic: topic, DSN: dsn, Mode: mode, Subtasks: 1, Interval: interval, LogLevel: "info"}
	if kind != "single" {
		o.Extra = append(o.Extra, "RELAY_MEMBERSHIP=group")
	}
	return o
}

func runGroupOnce(e *kit.Env, r *GroupResult, topic string, end map[int32]int64, mode, kind string, rep int) (GroupRun, error) {
	run := GroupRun{Mode: mode, Kind: kind, Rep: rep, LoadAvg: loadAvg()}
	job, dsn, db, err := e.CreateJob()
	if err != nil {
		return run, err
	}
	defer e.DropNow(job)
	o := groupOpts(r, job, topic, dsn, mode, kind)
	r.Commands[mode+"/"+kind] = strings.Join(o.Vars(), " ")
	n := 1
	if kind == "two" {
		n = 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	before, err := lockStatus(ctx, db)
	if err != nil {
		return run, err
	}
	busy0, err := kit.MachineBusy()
	if err != nil {
		return run, err
	}
	_, mysqlPID := e.ServicePIDs()
	var mysqlWait0 time.Duration
	if mysqlPID > 0 {
		th, _ := kit.ReadThreads(mysqlPID)
		mysqlWait0 = th.Wait
	}
	cpu := e.StartCPU(nil)
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan lockWaits, 1)
	go func() { sampled <- sampleLockWaits(sctx, db, 20*time.Millisecond) }()
	defer stopSampling()
	var ps []*kit.Relay
	for i := range n {
		p, err := e.StartRelay(o, fmt.Sprintf("group-%s-%s-%d-%d.log", mode, kind, rep, i))
		if err != nil {
			return run, err
		}
		defer p.Kill()
		ps = append(ps, p)
	}
	doneAt, timeline, err := waitCovered(ctx, db, job, topic, mode == "xa", end, ps)
	if err != nil {
		return run, err
	}
	busy1, err := kit.MachineBusy()
	if err != nil {
		return run, err
	}
	run.Busy = (busy1 - busy0).Seconds() / doneAt.Sub(ps[0].Start).Seconds()
	if mysqlPID > 0 {
		th, _ := kit.ReadThreads(mysqlPID)
		run.MySQLWait = (th.Wait - mysqlWait0).Seconds()
	}
	for _, p := range ps {
		th, err := kit.ReadThreads(p.PID())
		if err != nil {
			return run, err
		}
		run.RelayWait = append(run.RelayWait, th.Wait.Seconds())
		run.RelayRdkCPU = append(run.RelayRdkCPU, th.Rdk.Seconds())
	}
	stopSampling()
	lw := <-sampled
	run.Waits, run.WaitMs, run.Samples = lw.byTable, float64(lw.hits)*20, lw.samples
	after, err := lockStatus(ctx, db)
	if err != nil {
		return run, err
	}
	c := cpu.Stop()
	run.MySQLCPU, run.KafkaCPU = c["mysql"], c["kafka"]
	run.LockWaits = after["Innodb_row_lock_waits"] - before["Innodb_row_lock_waits"]
	run.LockTimeMs = after["Innodb_row_lock_time"] - before["Innodb_row_lock_time"]
	run.Deadlocks = after["Innodb_deadlocks"] - before["Innodb_deadlocks"]
	var first time.Time
	for _, p := range ps {
		for name, v := range map[string]*float64{"relay_rebalances_total": &run.Rebalances, "relay_fenced_decisions_total": &run.Fenced} {
			got, err := p.ScrapeCounter(name, "")
			if err != nil {
				return run, err
			}
			*v += got[""]
		}
		got, err := p.ScrapeCounter("relay_assigned_partitions", "")
		if err != nil {
			return run, err
		}
		run.Parts = append(run.Parts, int(got[""]))
		phases, err := p.ScrapeHistograms("relay_checkpoint_phase_duration_seconds", "phase")
		if err != nil {
			return run, err
		}
		n := phases["total"].Count
		run.Checkpoints = append(run.Checkpoints, int(n))
		run.FlushMs = append(run.FlushMs, 1e3*(phases["flush"].Sum+phases["prepare"].Sum)/max(n, 1))
		l, err := p.WaitLog(kit.IsRunning, 5*time.Second)
		if err != nil {
			return run, err
		}
		if first.IsZero() || l.TS.Before(first) {
			first = l.TS
		}
	}
	for _, p := range ps {
		if err := p.Stop(time.Minute); err != nil {
			return run, err
		}
		run.RelayCPU = append(run.RelayCPU, p.CPU().Seconds())
	}
	joined := first
	if kind != "single" {
		joined = time.Time{}
		for _, p := range ps {
			evs, err := harness.Events(p.Log, "rebalance")
			if err != nil {
				return run, err
			}
			// A member the group assigned nothing before the end (a short run) did no work: it is
			// not waited for.
			l, ok := harness.Find(evs, func(l harness.LogLine) bool { return l.Fields["kind"] == "assigned" })
			if ok && l.TS.After(joined) {
				joined = l.TS
			}
		}
	}
	if joined.IsZero() {
		return run, fmt.Errorf("no process logged an assignment")
	}
	run.JoinSecs = joined.Sub(ps[0].Start).Seconds()
	for _, s := range timeline {
		if !s.at.Before(joined) {
			run.SteadyRate = float64(r.Orders-s.total) / doneAt.Sub(s.at).Seconds()
			break
		}
	}
	run.StepRate = stepRate(timeline, joined)
	run.Seconds = doneAt.Sub(first).Seconds()
	run.ProcSecs = doneAt.Sub(ps[0].Start).Seconds()
	run.Rate = float64(r.Orders) / run.Seconds
	if mode == "xa" && n > 1 {
		cps, err := ledger.New(db, job).CommittedCheckpoints(ctx)
		if err != nil {
			return run, err
		}
		run.PhaseMs = decisionPhase(cps)
	}
	var orders int64
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(order_count), 0) FROM order_stats_minute`).Scan(&orders); err != nil {
		return run, err
	}
	if orders != r.Orders {
		return run, fmt.Errorf("verification failed: sum(order_count)=%d, want %d", orders, r.Orders)
	}
	kit.Logf("%s/%s rep %d: %.2fs = %.0f/s (from process start %.2fs; all reading %.2fs after start, %.0f/s after; relay CPU %v s (librdkafka threads %v s), mysql %.1f s, kafka %.1f s, machine %.2f cores busy; run queue: relay %.1f s, mysql %.1f s; "+
		"row lock waits %d, %d ms, deadlocks %d; rebalances %.0f, fenced %.0f, assigned %v; checkpoints %v, flush+prepare %v ms, decisions %.0f ms apart; sampled waits %v, ~%.0f ms in %d samples)", mode, kind, rep,
		run.Seconds, run.Rate, run.ProcSecs, run.JoinSecs, run.SteadyRate, run.RelayCPU, run.RelayRdkCPU, run.MySQLCPU, run.KafkaCPU, run.Busy, run.RelayWait, run.MySQLWait, run.LockWaits, run.LockTimeMs, run.Deadlocks,
		run.Rebalances, run.Fenced, run.Parts, run.Checkpoints, run.FlushMs, run.PhaseMs, run.Waits, run.WaitMs, run.Samples)
	return run, nil
}

// stepRate is the rate between the checkpoints decided after from: the orders the ledger's
// offsets advanced from the first poll that saw a new checkpoint after from to the first poll that
// saw the last checkpoint before the final one, over the time between those polls. Both ends are
// checkpoint boundaries (±1 poll), so the rate is that of whole checkpoint intervals of reading;
// the final checkpoint, which waits for its interval after the reading ended, is left out. 0 when
// fewer than three checkpoints were decided after from.
func stepRate(timeline []polled, from time.Time) float64 {
	var steps []polled
	for i := 1; i < len(timeline); i++ {
		if timeline[i].total != timeline[i-1].total && !timeline[i].at.Before(from) {
			steps = append(steps, timeline[i])
		}
	}
	if len(steps) < 3 {
		return 0
	}
	a, b := steps[0], steps[len(steps)-2]
	return float64(b.total-a.total) / b.at.Sub(a.at).Seconds()
}

// polled is one ledger poll: the orders relay_offsets covered at that time.
type polled struct {
	at    time.Time
	total int64
}

// waitCovered polls the ledger every 25 ms until relay_offsets covers end on every partition
// (whichever process wrote them) and, in XA mode, no checkpoint is still COMMITTING (its data
// committed); it returns the time of that poll and every poll's total. A process that exits ends
// the wait.
func waitCovered(ctx context.Context, db *sql.DB, job, topic string, xa bool, end map[int32]int64, ps []*kit.Relay) (time.Time, []polled, error) {
	led := ledger.New(db, job)
	var timeline []polled
	for {
		offs, _, err := led.PartitionOffsets(ctx)
		now := time.Now()
		if err == nil {
			timeline = append(timeline, polled{at: now, total: harness.Total(offs[topic])})
		}
		if err == nil && committed.Reached(offs[topic], end) {
			if !xa {
				return now, timeline, nil
			}
			open, err := led.Committing(ctx)
			if err == nil && len(open) == 0 {
				return now, timeline, nil
			}
		}
		for _, p := range ps {
			if !p.Alive() {
				return now, nil, fmt.Errorf("relay (%s) exited before the ledger covered %s: %s", p.Log, topic, harness.Tail(p.Log, 5))
			}
		}
		select {
		case <-ctx.Done():
			return now, nil, fmt.Errorf("ledger did not cover the end of %s (last error: %v): %w", topic, err, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// lockStatus reads InnoDB's row-lock and deadlock counters (server-wide).
func lockStatus(ctx context.Context, db *sql.DB) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_row_lock_waits', 'Innodb_row_lock_time', 'Innodb_deadlocks')`)
	if err != nil {
		return nil, fmt.Errorf("lock status: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k], _ = strconv.ParseInt(v, 10, 64)
	}
	return out, rows.Err()
}

// lockWaits is what sampleLockWaits saw.
type lockWaits struct {
	samples int            // samples taken
	hits    int            // waiting transactions summed over the samples
	byTable map[string]int // distinct waits (transaction, wait start) by the table of the lock waited for
}

// sampleLockWaits samples, every interval until ctx ends, the transactions of db's current
// database that wait for a row lock, and which table that lock is on.
func sampleLockWaits(ctx context.Context, db *sql.DB, every time.Duration) lockWaits {
	out := lockWaits{byTable: map[string]int{}}
	seen := map[string]bool{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		rows, err := db.QueryContext(ctx, `SELECT t.trx_id, COALESCE(t.trx_wait_started, ''), COALESCE(l.lock_table, '')
			FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
			LEFT JOIN information_schema.INNODB_LOCKS l ON l.lock_trx_id = t.trx_id AND l.lock_id = t.trx_requested_lock_id
			WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()`)
		if err != nil {
			continue // ctx ended mid-query, or a transient error: the next sample counts
		}
		out.samples++
		for rows.Next() {
			var id, started, table string
			if rows.Scan(&id, &started, &table) != nil {
				continue
			}
			out.hits++
			if k := id + "@" + started; !seen[k] {
				seen[k] = true
				out.byTable[table]++
			}
		}
		rows.Close()
	}
}

// decisionPhase is the median, over checkpoints with records, of the time from a decision to the
// nearest decision of another process (the instance column names the member), in milliseconds.
func decisionPhase(cps []ledger.Checkpoint) float64 {
	by := map[string][]time.Time{}
	for _, c := range cps {
		if c.Records > 0 {
			by[c.Instance] = append(by[c.Instance], c.DecidedAt)
		}
	}
	var gaps []float64
	for m, own := range by {
		for _, t := range own {
			best := -1.0
			for o, other := range by {
				if o == m {
					continue
				}
				for _, u := range other {
					if d := math.Abs(t.Sub(u).Seconds() * 1e3); best < 0 || d < best {
						best = d
					}
				}
			}
			if best >= 0 {
				gaps = append(gaps, best)
			}
		}
	}
	return kit.Median(gaps)
}
