// relay loadgen: synthetic records of the configured spec with known totals, only where the
// operator names it.
//
// Invariant: loadgen writes only to the brokers and topic given on its command line, never into a
// topic that a job's ledger (as far as the named MySQL shows) reads, unless told it is live, and
// with no MySQL named never into a topic Kafka shows in use, unless forced; its records and totals
// are those of the spec relay run would run with the same configuration.

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
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/spec"
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

const loadgenAbout = `Produces synthetic records of the configured spec (the pipeline: block of --config or
RELAY_PIPELINE_FILE, or the default spec) into --topic on --brokers, in Kafka transactions (some
aborted with --abort-rate, some bad input with --bad-rate), and prints what it wrote; --totals FILE
writes every aggregate table's expected rows, for relay verify --expected FILE. The same --seed
gives the same records.

--format avro writes each record in Confluent's wire format under an Avro schema of the spec's
fields (dotted paths as nested records; string, long, a bytes decimal of the field's scale,
timestamp-millis) that it registers under TOPIC-value in the Schema Registry (--schema-registry,
else schema_registry.url); its bad records are JSON (bad_header) or name a schema id no registry
has (unknown_schema). --format protobuf does the same under a proto3 schema (string, int64,
google.type.Decimal, google.protobuf.Timestamp; dotted paths as nested messages). --format
json_schema registers a draft-07 JSON Schema of the spec's fields (nested objects for dotted
paths) and writes each JSON record after the wire format's header; its bad records are also the
generator's bad JSON under the registered id.

--escape writes what real producers write, with the same meaning: non-ASCII strings (é, ü, CJK,
emoji; one key in NFC and one in NFD, distinct), raw or \u-escaped (surrogate pairs, "\/",
escaped ASCII letters), escaped member names, decimals as numbers or strings with exponents and
leading or trailing zeros, RFC 3339 times in any offset, members in any order, any whitespace.

It writes only where it is told: --brokers and --topic are never taken from RELAY_KAFKA_*. Before
producing it checks that no job reads the topic. With a MySQL (--ledger-dsn, else relay's
RELAY_MYSQL_DSN / RELAY_LEDGER_DSN) it refuses a topic that a job's ledger there reads. Without one
it cannot know, so it asks Kafka and refuses a topic that already holds records, or on which a
consumer group committed offsets (relay's kafka.group_id does) or has members; then name the MySQL
of the jobs with --ledger-dsn, use a new topic (--create-partitions N), or pass --force if no job
reads it. --i-know-this-is-live skips every check.

While it produces, a progress line goes to stderr every --progress (records sent, committed,
aborted, the rate, the time left).
`

const loadgenExamples = `  relay loadgen --brokers localhost:9092 --topic orders_test --create-partitions 4 --orders 100000 \
      --totals expected.json            # a new topic: nothing reads it
  relay loadgen --brokers B --topic orders_avro --create-partitions 4 --format avro \
      --schema-registry http://127.0.0.1:18081/apis/ccompat/v7
  relay loadgen --brokers B --topic orders_js --create-partitions 4 --format json_schema \
      --schema-registry http://127.0.0.1:18081/apis/ccompat/v7
  relay loadgen --brokers B --topic T --ledger-dsn 'user:pw@tcp(db:3306)/relay' --escape
`

// cmdLoadgen produces only where it is told to: --brokers and --topic are required (every relay pod
// has RELAY_KAFKA_* set, so a default from them would write into a job's input), a topic that a
// job's ledger reads is refused unless --i-know-this-is-live, and with no ledger to ask a topic
// Kafka shows in use is refused unless --force. The records are of the configuration's spec (its
// pipeline block, or the default spec from input.*).
func cmdLoadgen(ctx context.Context, args []string) error {
	fs, src := opsFlags("loadgen", "--brokers HOST:PORT,... --topic TOPIC [flags]", loadgenAbout, loadgenExamples)
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
	fs.BoolVar(&o.Escape, "escape", false, "write non-ASCII and escaped strings, numbers and times in every accepted spelling, any member order and whitespace (same meaning, see above)")
	fs.StringVar(&o.Format, "format", "", "json, avro, protobuf or json_schema (Confluent's wire format; the schema is registered under TOPIC-value); default: the spec's input.format")
	registry := fs.String("schema-registry", "", "Schema Registry URL for a registry --format (default: schema_registry.url of --config / RELAY_SCHEMA_REGISTRY_URL)")
	fs.DurationVar(&o.ProgressEvery, "progress", 5*time.Second, "print progress to stderr this often (0: never)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "random seed (same seed, same stream)")
	txn := fs.String("transactional-id", "relay-loadgen", "transactional.id (empty: no transactions)")
	out := fs.String("totals", "", "write the expected totals (every aggregate table of the spec) to this JSON file")
	partitions := fs.Int("create-partitions", 0, "create the topic with this many partitions if it is missing")
	ledgerDSN := fs.String("ledger-dsn", "", "MySQL whose ledgers must not read --topic (every ledger database the user can see on that server is searched; default: relay's mysql.dsn and mysql.ledger_dsn from --config / RELAY_MYSQL_DSN / RELAY_LEDGER_DSN)")
	force := fs.Bool("force", false, "with no MySQL to check, produce even into a topic Kafka shows in use (records, consumer groups)")
	live := fs.Bool("i-know-this-is-live", false, "produce even into a topic a job's ledger reads, without any check: its synthetic orders become that job's totals")
	if err := parse(fs, args); err != nil {
		return err
	}
	o.Seed, o.TxnID = *seed, *txn
	if o.ProgressEvery > 0 {
		o.Progress = os.Stderr
	}
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
	if o.Format == "" {
		o.Format = o.Plan.InputFormat()
	}
	if o.Format != spec.FormatJSON {
		rc := cfg.Registry()
		if *registry != "" {
			rc = format.RegistryConfig{URL: *registry}
		}
		if o.Registry, err = format.NewRegistry(rc); err != nil {
			return fmt.Errorf("loadgen: %w", err)
		}
	}
	if !*live {
		if err := notReadByAJob(ctx, cfg, *ledgerDSN, o.Brokers, o.Topic, *force); err != nil {
			return err
		}
	}
	if *partitions > 0 {
		if err := loadgen.EnsureTopic(ctx, o.Brokers, o.Topic, *partitions); err != nil {
			return err
		}
	}
	totals := loadgen.NewTotals()
	totals.Keep(0) // only the fold: a long run must not hold every payload
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
// MySQL named there is no ledger to search: it refuses, unless force, a topic that Kafka shows in
// use (records, or consumer groups on it), and says what it could not check.
func notReadByAJob(ctx context.Context, cfg config.Config, dsn, brokers, topic string, force bool) error {
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
		readers, err := ledger.TopicReaders(ctx, db, topic)
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
	if checked {
		return nil
	}
	const none = "no MySQL named (--ledger-dsn, RELAY_MYSQL_DSN, RELAY_LEDGER_DSN), so no ledger tells whether a relay job reads"
	if force {
		fmt.Fprintf(os.Stderr, "loadgen: %s %s; --force: producing without asking Kafka\n", none, topic)
		return nil
	}
	use, err := loadgen.CheckTopicUse(ctx, brokers, topic)
	if err != nil {
		return fmt.Errorf("loadgen: %s %s, and Kafka could not say whether anything does (%w); name the jobs' MySQL with --ledger-dsn, or --force", none, topic, err)
	}
	if use.InUse() {
		return fmt.Errorf("loadgen: refusing to produce into %s: %s it, and it is in use: %s. A job reading it would count the synthetic orders in its totals. "+
			"Name the MySQL of the jobs with --ledger-dsn (loadgen then refuses only a topic a ledger there reads), produce into a new topic (--create-partitions N), or --force if no job reads %s",
			topic, none, use, topic)
	}
	fmt.Fprintf(os.Stderr, "loadgen: %s %s; Kafka shows it unused (%s)\n", none, topic, use)
	return nil
}
