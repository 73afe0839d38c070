// relay loadgen: synthetic records of the configured spec with known totals, only where the
// operator names it.
//
// Invariant: loadgen writes only to the brokers and topic given on its command line, never into a
// topic that a job's ledger (as far as the named MySQL shows) reads, unless told it is live; its
// records and totals are those of the spec relay run would run with the same configuration.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/ops"
)

func cmdVersion(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { fmt.Fprintf(helpOut, "usage: relay version\n\nPrints the version.\n\n%s", exitHelp("version")) }
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Println("relay", metrics.Version)
	return nil
}

// cmdLoadgen produces only where it is told to: --brokers and --topic are required (every relay pod
// has RELAY_KAFKA_* set, so a default from them would write into a job's input), and a topic that
// a job's ledger reads is refused unless --i-know-this-is-live. The records are of the
// configuration's spec (its pipeline block, or the default spec from input.*).
func cmdLoadgen(ctx context.Context, args []string) error {
	fs, src := flagSet("loadgen", "--brokers HOST:PORT,... --topic TOPIC [flags]")
	o := loadgen.Options{}
	fs.StringVar(&o.Brokers, "brokers", "", "Kafka bootstrap servers (required; never taken from RELAY_KAFKA_BROKERS)")
	fs.StringVar(&o.Topic, "topic", "", "topic to produce to (required; never taken from RELAY_KAFKA_TOPICS)")
	fs.IntVar(&o.Orders, "orders", 100000, "records to produce")
	fs.Float64Var(&o.Rate, "rate", 0, "records per second (0: as fast as possible)")
	fs.IntVar(&o.Batch, "batch", 500, "records per Kafka transaction")
	fs.Float64Var(&o.AbortRate, "abort-rate", 0, "fraction of transactions to abort on purpose")
	fs.Float64Var(&o.BadRate, "bad-rate", 0, "fraction of records that are bad input")
	fs.IntVar(&o.SKUs, "skus", 100, "distinct values of each field an aggregate groups by (skus, for the default spec)")
	fs.IntVar(&o.Windows, "windows", 10, "event times spread over this many minutes")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "random seed (same seed, same stream)")
	txn := fs.String("transactional-id", "relay-loadgen", "transactional.id (empty: no transactions)")
	out := fs.String("totals", "", "write the expected totals (every aggregate table of the spec) to this JSON file")
	partitions := fs.Int("create-partitions", 0, "create the topic with this many partitions if it is missing")
	ledgerDSN := fs.String("ledger-dsn", "", "MySQL whose ledgers must not read --topic (every ledger database the user can see on that server is searched; default: relay's mysql.dsn and mysql.ledger_dsn from --config / RELAY_MYSQL_DSN / RELAY_LEDGER_DSN)")
	live := fs.Bool("i-know-this-is-live", false, "produce even into a topic a job's ledger reads: its synthetic orders become that job's totals")
	if err := parse(fs, args); err != nil {
		return err
	}
	o.Seed, o.TxnID = *seed, *txn
	if o.Brokers == "" || o.Topic == "" {
		return usageError{"loadgen: --brokers and --topic are required (they are never taken from RELAY_KAFKA_*, which name a job's input)"}
	}
	cfg, err := src.load()
	if err != nil {
		return fmt.Errorf("loadgen: reading relay's configuration: %w", err)
	}
	if o.Plan, err = cfg.Plan(); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	if !*live {
		if err := notReadByAJob(ctx, cfg, *ledgerDSN, o.Topic); err != nil {
			return err
		}
	}
	if *partitions > 0 {
		if err := loadgen.EnsureTopic(ctx, o.Brokers, o.Topic, *partitions); err != nil {
			return err
		}
	}
	totals := loadgen.NewTotals()
	start := time.Now()
	err = loadgen.Run(ctx, o, totals)
	fmt.Printf("loadgen: topic %s on %s, %s: %s\n", o.Topic, o.Brokers, time.Since(start).Round(time.Millisecond), totals.Summary())
	if *out != "" {
		if werr := totals.WriteFile(*out); werr != nil && err == nil {
			err = werr
		}
		if err == nil {
			fmt.Printf("loadgen: expected totals written to %s\n", *out)
		}
	}
	return err
}

// notReadByAJob refuses topic when a job's ledger has resume offsets of it, searching the ledgers
// on the server of dsn, or else of relay's configured DSNs (in a relay pod: the job's own). With no
// MySQL named there is nothing to search, and it says so.
func notReadByAJob(ctx context.Context, cfg config.Config, dsn, topic string) error {
	dsns := []string{dsn}
	if dsn == "" {
		dsns = []string{cfg.MySQL.DSN, cfg.MySQL.LedgerDSN}
	}
	checked := false
	for _, d := range dsns {
		if d == "" {
			continue
		}
		db, err := database.Open(d, database.Session{TLS: cfg.MySQLTLS()})
		if err != nil {
			return fmt.Errorf("loadgen: ledger check: %w", err)
		}
		readers, err := ops.TopicReaders(ctx, db, topic)
		db.Close()
		if err != nil {
			return fmt.Errorf("loadgen: cannot check that no job reads %s (%w); --i-know-this-is-live produces without the check", topic, err)
		}
		if len(readers) > 0 {
			jobs := make([]string, len(readers))
			for i, r := range readers {
				jobs[i] = fmt.Sprintf("job %s (ledger database %s, %d partitions)", r.Job, r.Database, r.Partitions)
			}
			return fmt.Errorf("loadgen: refusing to produce into %s: it is the input of %s, whose totals would count the synthetic orders; use another topic, or --i-know-this-is-live",
				topic, strings.Join(jobs, ", "))
		}
		checked = true
	}
	if !checked {
		fmt.Fprintf(os.Stderr, "loadgen: no MySQL named (--ledger-dsn, RELAY_MYSQL_DSN, RELAY_LEDGER_DSN): not checked whether a job reads %s\n", topic)
	}
	return nil
}
