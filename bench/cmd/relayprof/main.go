// Command relayprof runs one relay job in-process under runtime/pprof, wired exactly as `relay run`
// wires it (cmd/relay/run.go runJob: pools, schema, ledger, fence, consumer, pipeline; no HTTP
// server), until the ledger's committed offsets reach the topic's end offsets; then it drains the
// pipeline and writes a CPU profile and an allocation profile.
//
// Configuration is relay's own (RELAY_* variables, internal/config), so the job runs with the same
// settings as the binary; --cpu and --allocs name the profile files.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/pipeline"
	"github.com/relay-sh/relay/internal/sink"
)

func main() {
	cpuPath := flag.String("cpu", "cpu.pprof", "CPU profile output")
	allocPath := flag.String("allocs", "allocs.pprof", "allocation profile output")
	tracePath := flag.String("trace", "", "also write a runtime/trace execution trace here (scheduling: who waits for what)")
	limit := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*cpuPath, *allocPath, *tracePath, *limit); err != nil {
		fmt.Fprintln(os.Stderr, "relayprof:", err)
		os.Exit(1)
	}
}

func run(cpuPath, allocPath, tracePath string, limit time.Duration) error {
	cfg, err := config.Load("", os.Environ())
	if err != nil {
		return err
	}
	if len(cfg.Kafka.Topics) != 1 {
		return fmt.Errorf("relayprof reads exactly one topic")
	}
	topic := cfg.Kafka.Topics[0]
	log := zap.NewNop()
	ctx := context.Background()
	end, err := harness.EndOffsets(cfg.Kafka.Brokers.String(), topic)
	if err != nil {
		return err
	}

	// --- as cmd/relay/run.go runJob
	m := metrics.New(cfg.Job.Name)
	db, err := database.Open(cfg.MySQL.DSN, cfg.SinkSession())
	if err != nil {
		return err
	}
	defer db.Close()
	flavor, _, err := sink.DetectFlavor(ctx, db)
	if err != nil {
		return err
	}
	plan, err := cfg.Plan()
	if err != nil {
		return err
	}
	if err := plan.Schema(cfg.MySQL.DLQTable, cfg.MySQL.DetailTable).Create(ctx, db, flavor); err != nil {
		return err
	}
	if err := ledger.EnsureSchema(ctx, db); err != nil {
		return err
	}
	led := ledger.New(db, cfg.Job.Name)
	copts := consumer.Options{Brokers: cfg.Kafka.Brokers.String(), Topics: cfg.Kafka.Topics, GroupID: cfg.Kafka.GroupID,
		StartOffset: cfg.Kafka.StartOffset, Properties: cfg.Kafka.Properties}
	decs, err := cfg.Decoders(plan)
	if err != nil {
		return err
	}
	p := pipeline.New(pipeline.Deps{Config: cfg, Plan: plan, Decoders: decs, Log: log, Metrics: m, Sink: db, Ledger: led, Fence: ledger.FenceConfig{Owner: "relayprof"},
		NewConsumer: func() (*consumer.Consumer, error) { return consumer.New(copts, log) }})
	// --- end of runJob's wiring

	cf, err := os.Create(cpuPath)
	if err != nil {
		return err
	}
	defer cf.Close()
	if err := pprof.StartCPUProfile(cf); err != nil {
		return err
	}
	if tracePath != "" {
		tf, err := os.Create(tracePath)
		if err != nil {
			return err
		}
		defer tf.Close()
		if err := trace.Start(tf); err != nil {
			return err
		}
		defer trace.Stop()
	}
	start := time.Now()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	alive := func() bool {
		select {
		case err := <-done:
			done <- err
			return false
		default:
			return true
		}
	}
	at, werr := committed.Wait(db, cfg.Job.Name, topic, cfg.Mode == commit.ModeHeld, end, 25*time.Millisecond, limit, alive)
	cancel()
	rerr := <-done
	pprof.StopCPUProfile()
	if werr != nil {
		return werr
	}
	if rerr != nil {
		return rerr
	}
	af, err := os.Create(allocPath)
	if err != nil {
		return err
	}
	defer af.Close()
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(af, 0); err != nil {
		return err
	}
	n := harness.Total(end)
	secs := at.Sub(start).Seconds()
	fmt.Printf("{\"records\":%d,\"seconds\":%.3f,\"rate\":%.0f}\n", n, secs, float64(n)/secs)
	return nil
}
