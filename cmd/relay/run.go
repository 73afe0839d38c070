// relay run: wire the components of one job and supervise them.

package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/gctuner"
	"github.com/relay-sh/relay/internal/httpserver"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/membership"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/ops"
	"github.com/relay-sh/relay/internal/pipeline"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/startup"
	"github.com/relay-sh/relay/internal/supervisor"
)

const runAbout = `Runs the job: reads the configured topics (which must exist: relay never creates them) from the
offsets in the ledger (a first run from kafka.start_offset, earliest by default), folds each
record into the spec's aggregate tables, and commits a checkpoint every checkpoint.interval,
exactly once. It creates its tables if missing and refuses ones that differ. It starts in any
order: until MySQL (a primary Galera component), Kafka and the topics answer, it waits with
back-off, for as long as startup_wait_timeout allows (default: forever), /readyz saying what for;
a wrong password, an unknown database or a refused setting ends it at once. On start, and after
any failure, it first settles whatever an earlier run left prepared, from the ledger. SIGTERM or
SIGINT drains: the open checkpoint is committed or rolled back, then it exits 0. From its start,
/metrics, /healthz and /readyz are served on http_addr (default :8080); logs are JSON on stderr.
Check a configuration first with relay preflight; watch the job with relay status.
`

func cmdRun(ctx context.Context, args []string) error {
	fs, path := opsFlags("run", "[--config FILE] [--instance i/M]", runAbout,
		`  RELAY_JOB_NAME=orders_eu RELAY_KAFKA_BROKERS=kafka:9092 RELAY_KAFKA_TOPICS=orders \
    RELAY_MYSQL_DSN='relay:secret@tcp(mysql:3306)/relay' relay run
  RELAY_PIPELINE_FILE=sales.yaml relay run --config relay.yaml
  relay run --config relay.yaml --instance 0/2      # instance 0 of 2 (RELAY_SUBTASKS=1)
`)
	path.instanceFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	database.SetLogger(log.Named("mysql"))
	err = runJob(ctx, cfg, log)
	if err != nil {
		log.Error("relay stopped", zap.Error(err))
	}
	return err
}

func newLogger(level string) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.EncoderConfig.TimeKey = "ts"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	zc.Sampling = nil
	zc.DisableStacktrace = true
	zc.EncoderConfig.EncodeDuration = zapcore.StringDurationEncoder
	l, err := zc.Build()
	if err != nil {
		return nil, err
	}
	return l.Named("relay"), nil
}

// openDBs opens the sink pool and the ledger pool (the same pool when the ledger shares the sink).
// With track, the pools' server sessions are tracked, one ledger.Pool each.
func openDBs(cfg config.Config, track bool) (sinkDB, ledgerDB *sql.DB, pools []ledger.Pool, err error) {
	open := func(name, dsn string) (*sql.DB, error) {
		s := cfg.LedgerSession()
		if name == "sink" {
			s = cfg.SinkSession()
		}
		if track {
			s.Track = database.NewTracker()
		}
		db, err := database.Open(dsn, s)
		if err == nil && track {
			pools = append(pools, ledger.Pool{Name: name, DB: db, Sessions: s.Track})
		}
		return db, err
	}
	if sinkDB, err = open("sink", cfg.MySQL.DSN); err != nil {
		return nil, nil, nil, fmt.Errorf("mysql.dsn: %w", err)
	}
	if cfg.MySQL.LedgerDSN == "" {
		return sinkDB, sinkDB, pools, nil
	}
	if ledgerDB, err = open("ledger", cfg.MySQL.LedgerDSN); err != nil {
		sinkDB.Close()
		return nil, nil, nil, fmt.Errorf("mysql.ledger_dsn: %w", err)
	}
	return sinkDB, ledgerDB, pools, nil
}

// memberID names a member of a dynamic group: a new one per process (its ledger key, fence and
// lease are its own; a dead member's branches are resolved by the others' resolvers).
func memberID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func owner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}

func runJob(ctx context.Context, cfg config.Config, log *zap.Logger) error {
	log.Info("starting", zap.String("job", cfg.Job.Name), zap.String("instance", cfg.Instance), zap.String("mode", string(cfg.Mode)),
		zap.Int("subtasks", cfg.Subtasks), zap.Int("decoders", cfg.DecodeGoroutines()), zap.Duration("checkpoint_interval", cfg.Checkpoint.Interval),
		zap.String("mysql", database.Redact(cfg.MySQL.DSN)), zap.Int("gc_heap_floor_mib", cfg.GCFloorMiB),
		zap.String("gogc_env", os.Getenv("GOGC")), zap.String("version", metrics.Version))
	plan, err := cfg.Plan()
	if err != nil {
		return err
	}
	decs, err := cfg.Decoders(plan)
	if err != nil {
		return err
	}
	m := metrics.New(cfg.Job.Name)
	sinkDB, ledgerDB, pools, err := openDBs(cfg, true)
	if err != nil {
		return err
	}
	defer sinkDB.Close()
	if ledgerDB != sinkDB {
		defer ledgerDB.Close()
		m.WatchPool(cfg.Job.Name, "ledger", ledgerDB)
	}
	m.WatchPool(cfg.Job.Name, "sink", sinkDB)
	led := ledger.NewInstance(ledgerDB, cfg.Job.Name, cfg.InstanceIndex(), cfg.InstanceCount())
	if cfg.Group() {
		id := cfg.Kafka.GroupInstanceID
		if id == "" {
			id = memberID()
		}
		led = ledger.NewMember(ledgerDB, cfg.Job.Name, id)
		log.Info("membership group", zap.String("group", cfg.Kafka.GroupID), zap.String("member", led.Key()),
			zap.Bool("static", cfg.Kafka.GroupInstanceID != ""))
	}
	copts := consumer.Options{Brokers: cfg.Kafka.Brokers.String(), Topics: cfg.Kafka.Topics, GroupID: cfg.Kafka.GroupID,
		StartOffset: cfg.Kafka.StartOffset, Properties: cfg.Kafka.Properties,
		Instance: cfg.InstanceIndex(), Instances: cfg.InstanceCount()}

	// Serve before anything is dialled: a sidecar starts in any order, so while MySQL or Kafka is
	// not up yet /healthz answers (the process is fine) and /readyz says what the start waits for;
	// the pipeline answers /readyz once it exists. The fence records where this process answers
	// /readyz (relay status asks the current owner there).
	gate := startup.New(log.Named("startup"), m, cfg.MySQL.StatementTimeout)
	var pipe atomic.Pointer[pipeline.Pipeline]
	ready := func() (bool, string) {
		if p := pipe.Load(); p != nil {
			return p.Ready()
		}
		return gate.Ready()
	}
	srv, err := httpserver.Listen(cfg.HTTPAddr, m.Registry, ready, cfg.HTTPPprof, log.Named("http"))
	if err != nil {
		return err
	}
	m.SetReadiness(func() bool { ok, _ := ready(); return ok })
	g := supervisor.New(context.Background())
	g.Go("http", srv.Serve)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWatching := context.AfterFunc(g.Context(), cancel) // the HTTP server failed: stop waiting
	drift, galera, err := waitForServices(wctx, &cfg, plan, decs[0], sinkDB, led, copts, gate, log)
	stopWatching()
	if err != nil {
		g.Stop()
		if serr := g.Wait(); serr != nil {
			return serr
		}
		if ctx.Err() != nil {
			// SIGTERM while starting (a rolling restart): nothing is taken or decided yet, so
			// this is a clean stop, not a failure.
			log.Info("stopped cleanly before the job started", zap.NamedError("interrupted", err))
			return nil
		}
		return err
	}

	host, _ := os.Hostname()
	var member *membership.Member
	if cfg.Group() {
		// A revoke waits for the session's drain, as long as one can take (DrainBound derives it).
		drain := cfg.Checkpoint.DrainBound()
		// A quarter of a checkpoint interval, within 100 ms to 250 ms: the second round of a
		// graceful join, and the only one of a leave, start at a member's next heartbeat, so
		// partitions moved wait about one heartbeat (at half a 1 s interval that was half the
		// hand-over: docs/BENCHMARKS.md, "Hand-over"). A heartbeat is one small request to the
		// group coordinator.
		heartbeat := min(max(cfg.Checkpoint.Interval/4, 100*time.Millisecond), 250*time.Millisecond)
		if member, err = membership.Join(membership.Options{Kafka: copts, InstanceID: cfg.Kafka.GroupInstanceID, Drain: drain, Heartbeat: heartbeat,
			SessionTimeout: cfg.GroupSessionTimeout(), Discovery: cfg.Kafka.DiscoveryInterval, Regrant: 2 * cfg.GroupSessionTimeout()},
			log.Named("membership"), m); err != nil {
			g.Stop()
			_ = g.Wait()
			return err
		}
	}
	for _, dec := range decs {
		format.Observe(dec, format.Observer{Resolved: m.SchemasResolved.Inc, Evicted: m.SchemasEvicted.Inc})
	}
	p := pipeline.New(pipeline.Deps{Config: cfg, Plan: plan, Decoders: decs, Log: log.Named("pipeline"), Metrics: m, Sink: sinkDB,
		Ledger: led, Fence: ledger.FenceConfig{Owner: owner(), Lease: cfg.Job.Lease, Pools: pools, TakeOver: true,
			Readyz: ops.AdvertisedReadyz(srv.Addr(), host), Cluster: galera.On},
		Fenced:      func(ctx context.Context) error { return recordSpec(ctx, drift, led, log.Named("spec")) },
		NewConsumer: func() (*consumer.Consumer, error) { return consumer.New(copts, log.Named("consumer")) },
		Member:      member})
	pipe.Store(p)

	g.Go("gctuner", func(gctx context.Context) error {
		gctuner.Run(gctx, uint64(cfg.GCFloorMiB)<<20)
		return nil
	})
	g.Go("resolver", p.ResolveLoop)
	g.Go("watch", func(gctx context.Context) error { return watch(gctx, sinkDB, m) })
	g.Go("pipeline", func(gctx context.Context) error {
		// The pipeline drains on SIGTERM (ctx) but stops at once when a sibling fails (gctx).
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-gctx.Done():
				cancel()
			case <-pctx.Done():
			}
		}()
		err := p.Run(pctx)
		g.Stop()
		return err
	})
	err = g.Wait()
	if err == nil {
		log.Info("stopped cleanly")
	}
	return err
}

// waitForServices waits until MySQL answers and is ready for the job (prepareServer: a Galera
// node in the primary component, relay's tables created or checked), then until Kafka answers
// for every topic, then (a registry format) until the schema registry answers for every topic's
// subject, for as long as startup_wait_timeout allows (0: until ctx ends). It returns what
// prepareServer found; an error no wait cures (access denied, a refused setting, a spec the
// subject's schemas cannot give) at once.
func waitForServices(ctx context.Context, cfg *config.Config, plan *spec.Plan, dec format.Decoder, sinkDB *sql.DB, led *ledger.Ledger,
	copts consumer.Options, gate *startup.Gate, log *zap.Logger) (*ops.SpecReport, database.Galera, error) {
	wctx := ctx
	if cfg.StartupWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, cfg.StartupWait)
		defer cancel()
	}
	var drift *ops.SpecReport
	var galera database.Galera
	err := gate.Wait(wctx, startup.MySQL, func(actx context.Context) error {
		var err error
		drift, galera, err = prepareServer(actx, cfg, plan, sinkDB, led, log)
		return err
	})
	if err == nil {
		err = gate.Wait(wctx, startup.Kafka, func(actx context.Context) error {
			return consumer.CheckTopics(actx, copts, log.Named("consumer"))
		})
	}
	if err == nil {
		err = gate.Wait(wctx, startup.Registry, func(actx context.Context) error {
			return registryWait(format.CheckTopics(actx, dec, cfg.Kafka.Topics))
		})
	}
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return nil, galera, fmt.Errorf("gave up waiting at start after startup_wait_timeout %s: %w", cfg.StartupWait, err)
	}
	return drift, galera, err
}

// registryWait marks a registry that could not be asked, or that has no schema under a topic's
// subject yet, as a dependency to wait for; the other errors (a spec the subjects' schemas cannot
// give) end the start.
func registryWait(err error) error {
	if errors.Is(err, format.ErrUnavailable) || errors.Is(err, format.ErrNoSubject) {
		return fault.Transient(err)
	}
	return err
}

// prepareServer checks the server against the configuration (and fixes an unset mode for it:
// held on a Galera node, which it reports) and the spec against the meanings the ledger records,
// creates (or checks) what relay writes and claims the sink tables for the job. The comparison it
// returns is only read here (a refusal before anything is created); the meanings are recorded
// under the fence (recordSpec).
func prepareServer(ctx context.Context, cfg *config.Config, plan *spec.Plan, sinkDB *sql.DB, led *ledger.Ledger, log *zap.Logger) (*ops.SpecReport, database.Galera, error) {
	flavor, version, err := sink.DetectFlavor(ctx, sinkDB)
	if err != nil {
		return nil, database.Galera{}, fmt.Errorf("connect sink: %w", err)
	}
	galera, err := database.ReadGalera(ctx, sinkDB)
	if err != nil {
		return nil, galera, err
	}
	// A node outside the primary component (joining, or quorum lost) answers SHOW only: the
	// start waits for it (fault.NotPrimary) rather than fail its first query.
	if err := galera.Err(); err != nil {
		return nil, galera, err
	}
	picked, err := cfg.ResolveMode(galera.On)
	log.Info("mysql", zap.String("server_version", version), zap.Bool("galera", galera.On), zap.Stringer("server", galera),
		zap.String("mode", string(cfg.Mode)))
	if err != nil {
		return nil, galera, err
	}
	if picked {
		log.Info("mode unset: held, since this is a Galera node (no XA); sessions use causal reads",
			zap.String("mode", string(cfg.Mode)), zap.Int("wsrep_sync_wait", database.SyncWaitReads))
	}
	binlog, err := database.ReadBinlog(ctx, sinkDB)
	if err != nil {
		return nil, galera, err
	}
	if err := binlog.CheckReadCommitted(); err != nil {
		return nil, galera, err
	}
	maxConn, err := database.ServerVar(ctx, sinkDB, "SHOW GLOBAL VARIABLES LIKE 'max_connections'")
	if err != nil {
		return nil, galera, fmt.Errorf("read max_connections: %w", err)
	}
	threads, err := database.ServerVar(ctx, sinkDB, "SHOW GLOBAL STATUS LIKE 'Threads_connected'")
	if err != nil {
		return nil, galera, fmt.Errorf("read Threads_connected: %w", err)
	}
	if err := cfg.CheckServer(maxConn, threads); err != nil {
		return nil, galera, err
	}
	// Before a table is created or claimed: the owner's refusal, then a spec that changes what a
	// table holds (a new window would mix with the old one's rows, and a column's DDL check
	// could not tell the YAML key). Both read the ledger as it is: on a first start it does not
	// exist yet and records nothing, and it is still created after the sink tables.
	schema := plan.Schema(cfg.MySQL.DLQTable, cfg.MySQL.DetailTable)
	if _, err := led.CheckSchema(ctx, sinkDB, schema); err != nil && !fault.IsMySQL(err, fault.ErNoSuchTable) {
		return nil, galera, err
	}
	drift, err := ops.CompareSpec(ctx, plan, sinkDB, led)
	if err != nil {
		return nil, galera, err
	}
	if err := drift.Refusal(); err != nil {
		return nil, galera, err
	}
	if err := schema.Create(ctx, sinkDB, flavor); err != nil {
		return nil, galera, err
	}
	if err := ledger.EnsureSchema(ctx, led.DB()); err != nil {
		return nil, galera, err
	}
	if err := led.ClaimSchema(ctx, sinkDB, schema); err != nil {
		return nil, galera, err
	}
	return drift, galera, nil
}

// recordSpec records the spec's meanings once the fence is held: a process refused by the fence
// records nothing, and "the job committed nothing" is read under lock where no commit of this
// instance can race it. Another meaning recorded first ends the start.
func recordSpec(ctx context.Context, drift *ops.SpecReport, led *ledger.Ledger, log *zap.Logger) error {
	err := ops.RecordSpec(ctx, drift, led, log)
	if errors.Is(err, ledger.ErrMeaningChanged) {
		return fault.Permanent(err)
	}
	return err
}

// watch samples what no request drives: the server's Threads_connected, where connection
// explosions show first.
func watch(ctx context.Context, db *sql.DB, m *metrics.Metrics) error {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		if n, err := database.ServerVar(qctx, db, "SHOW GLOBAL STATUS LIKE 'Threads_connected'"); err == nil {
			m.ThreadsConnected.Set(float64(n))
		}
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
