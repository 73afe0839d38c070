// relay loadgen: synthetic orders with known totals.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/metrics"
)

func cmdVersion(context.Context, []string) error {
	fmt.Println("relay", metrics.Version)
	return nil
}

func cmdLoadgen(ctx context.Context, args []string) error {
	fs, _ := flagSet("loadgen", "[flags]")
	o := loadgen.Options{}
	fs.StringVar(&o.Brokers, "brokers", envOr("RELAY_KAFKA_BROKERS", "127.0.0.1:19092"), "Kafka bootstrap servers")
	fs.StringVar(&o.Topic, "topic", firstTopic(), "topic to produce to")
	fs.IntVar(&o.Orders, "orders", 100000, "records to produce")
	fs.Float64Var(&o.Rate, "rate", 0, "records per second (0: as fast as possible)")
	fs.IntVar(&o.Batch, "batch", 500, "records per Kafka transaction")
	fs.Float64Var(&o.AbortRate, "abort-rate", 0, "fraction of transactions to abort on purpose")
	fs.Float64Var(&o.BadRate, "bad-rate", 0, "fraction of records that are bad input")
	fs.IntVar(&o.SKUs, "skus", 100, "distinct skus")
	fs.IntVar(&o.Windows, "windows", 10, "distinct one-minute windows")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "random seed (same seed, same stream)")
	txn := fs.String("transactional-id", "relay-loadgen", "transactional.id (empty: no transactions)")
	out := fs.String("totals", "", "write the expected totals to this JSON file")
	partitions := fs.Int("create-partitions", 0, "create the topic with this many partitions if it is missing")
	if err := parse(fs, args); err != nil {
		return err
	}
	o.Seed, o.TxnID = *seed, *txn
	if o.Topic == "" {
		return usageError{"loadgen: --topic is required"}
	}
	if *partitions > 0 {
		if err := loadgen.EnsureTopic(ctx, o.Brokers, o.Topic, *partitions); err != nil {
			return err
		}
	}
	totals := loadgen.NewTotals()
	start := time.Now()
	err := loadgen.Run(ctx, o, totals)
	_, bad, good := totals.Snapshot()
	fmt.Fprintf(os.Stderr, "loadgen: %d records in %s: %d good committed, %d bad, %d in aborted transactions\n",
		totals.Produced, time.Since(start).Round(time.Millisecond), good, len(bad), totals.Aborted)
	if *out != "" {
		if werr := totals.WriteFile(*out); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func firstTopic() string {
	t, _, _ := strings.Cut(os.Getenv("RELAY_KAFKA_TOPICS"), ",")
	return t
}
