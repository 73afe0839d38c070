// Producing into Kafka: Run sends the generator's records in transactions. Invariant: a batch is
// added to the totals as committed only after its transaction's commit returned (without a
// transactional id: after every record was delivered), and as aborted otherwise, so Totals holds
// exactly what a read_committed reader can see.

package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/spec"
)

// reopens bounds how often one Run replaces a producer that failed fatally.
const reopens = 5

// Run produces o.Orders records into the topic, adding what commits to totals.
func Run(ctx context.Context, o Options, totals *Totals) error {
	p, err := newProducer(ctx, o)
	if err != nil {
		return err
	}
	defer func() { p.Close() }()
	g := NewGenerator(o)
	if err := totals.use(g.plan); err != nil {
		return err
	}
	enc, err := newEncoder(o, g.plan)
	if err != nil {
		return err
	}
	batch := max(o.Batch, 1)
	start := time.Now()
	var prog progress
	if o.Progress != nil {
		every := o.ProgressEvery
		if every <= 0 {
			every = 5 * time.Second
		}
		stop, done := make(chan struct{}), make(chan struct{})
		go prog.report(o.Progress, every, o.Orders, stop, done)
		defer func() { close(stop); <-done }()
	}
	reopened, evolved := 0, false
	for sent := 0; sent < o.Orders; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if enc != nil && o.EvolveAfter > 0 && sent >= o.EvolveAfter && !evolved {
			if err := enc.evolve(); err != nil {
				return err
			}
			evolved = true
		}
		n := min(batch, o.Orders-sent)
		recs, committed, err := sendBatch(ctx, p, o, g, enc, n, &prog.sent, func(i int) error { return pace(ctx, start, o.Rate, sent+i) })
		var ke kafka.Error
		if err != nil && o.TxnID != "" && errors.As(err, &ke) && ke.IsFatal() && reopened < reopens {
			// Seen on a broker whose transaction coordinator had just loaded: EndTxn answered
			// INVALID_TXN_STATE, which librdkafka makes fatal. The coordinator refused the
			// transaction, and the next producer's InitTransactions (same transactional.id) aborts
			// it for good, so its orders count as aborted.
			reopened++
			p.Close()
			if p, err = newProducer(ctx, o); err != nil {
				return fmt.Errorf("after a fatal producer error (%v): %w", ke, err)
			}
		} else if err != nil {
			return err
		}
		if err := totals.record(recs, committed); err != nil {
			return err
		}
		if committed {
			prog.committed.Add(int64(len(recs)))
		} else {
			prog.aborted.Add(int64(len(recs)))
		}
		sent += n
		if err := pace(ctx, start, o.Rate, sent); err != nil {
			return err
		}
	}
	return nil
}

// pace waits until the k-th record is due at rate records/s from start (no wait when rate is 0).
func pace(ctx context.Context, start time.Time, rate float64, k int) error {
	if rate <= 0 {
		return nil
	}
	d := time.Until(start.Add(time.Duration(float64(k) / rate * float64(time.Second))))
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func newProducer(ctx context.Context, o Options) (*kafka.Producer, error) {
	cm := &kafka.ConfigMap{"bootstrap.servers": o.Brokers, "linger.ms": 5, "enable.idempotence": true}
	if o.TxnID != "" {
		_ = cm.SetKey("transactional.id", o.TxnID)
	}
	p, err := kafka.NewProducer(cm)
	if err != nil {
		return nil, err
	}
	go func() {
		for range p.Events() {
		}
	}()
	if o.TxnID != "" {
		if err := p.InitTransactions(ctx); err != nil {
			p.Close()
			return nil, fmt.Errorf("init transactions: %w", err)
		}
	}
	return p, nil
}

// encoder writes the generator's records in a registry format.
type encoder interface {
	write(r pendingRec) (pendingRec, error)
	// evolve registers a second writer schema (the first and a field no spec reads) and writes
	// every other record under it from then on.
	evolve() error
}

// newEncoder is the encoder of o.Format, nil for JSON (the generator's own records).
func newEncoder(o Options, p *spec.Plan) (encoder, error) {
	switch o.Format {
	case "", spec.FormatJSON:
		return nil, nil
	case spec.FormatAvro, spec.FormatProtobuf, spec.FormatJSONSchema:
		if o.Escape || o.Registry == nil {
			return nil, fmt.Errorf("loadgen: %s records need a schema registry, and are not escaped (escaping is JSON's)", o.Format)
		}
		switch o.Format {
		case spec.FormatAvro:
			return newAvroWriter(p, o.Registry, o.Topic)
		case spec.FormatProtobuf:
			return newProtoWriter(p, o.Registry, o.Topic)
		default:
			return newJSONSchemaWriter(p, o.Registry, o.Topic)
		}
	default:
		return nil, fmt.Errorf("loadgen: format %q: json, avro, protobuf or json_schema", o.Format)
	}
}

// sendBatch produces n generated orders, in one transaction when o.TxnID is set, and says whether
// they were committed (delivered, without transactions). On error the returned records are the
// ones generated so far, none of them committed. Without transactions each record waits for
// paceRecord(i) first, so a rate spreads over the batch: flushing a batch takes up to 100 ms, and
// paced only between batches the load came in bursts (asked for 20 k/s, got 5.6 k/s).
// A transaction is sent whole: its records become readable together anyway. sent counts each
// record handed to the producer (for progress lines). enc, if not nil, writes each record in its
// registry format.
func sendBatch(ctx context.Context, p *kafka.Producer, o Options, g *Generator, enc encoder, n int, sent *atomic.Int64, paceRecord func(i int) error) ([]pendingRec, bool, error) {
	recs := make([]pendingRec, 0, n)
	if o.TxnID != "" {
		if err := p.BeginTransaction(); err != nil {
			return recs, false, err
		}
	}
	topic := o.Topic
	for i := 0; i < n; i++ {
		if o.TxnID == "" && paceRecord(i) != nil {
			break // cancelled: what was produced is flushed and counted; Run stops at its ctx check
		}
		v, r := g.Next()
		if enc != nil {
			var err error
			if r, err = enc.write(r); err != nil {
				return recs, false, err
			}
			v = r.payload
		}
		recs = append(recs, r)
		sent.Add(1)
		for {
			err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: v}, nil)
			if err == nil {
				break
			}
			if ke, ok := err.(kafka.Error); ok && ke.Code() == kafka.ErrQueueFull {
				p.Flush(100)
				continue
			}
			return recs, false, err
		}
	}
	if o.TxnID == "" {
		if left := p.Flush(30000); left > 0 {
			return recs, false, fmt.Errorf("%d records not delivered", left)
		}
		return recs, true, nil
	}
	if o.AbortRate > 0 && g.rng.Float64() < o.AbortRate {
		// Deliver first: aborting while records are still queued can race the broker's view of
		// the transaction's partitions and fail with INVALID_TXN_STATE (seen with Kafka 4.1).
		p.Flush(30000)
		if err := endTxn(ctx, p.AbortTransaction); err != nil {
			return recs, false, fmt.Errorf("abort: %w", err)
		}
		return recs, false, nil
	}
	err := endTxn(ctx, p.CommitTransaction)
	var ke kafka.Error
	if errors.As(err, &ke) && ke.TxnRequiresAbort() {
		// The broker could not commit it: abort, and count it as aborted, as it is.
		if err := endTxn(ctx, p.AbortTransaction); err != nil {
			return recs, false, fmt.Errorf("abort after failed commit: %w", err)
		}
		return recs, false, nil
	}
	if err != nil {
		return recs, false, fmt.Errorf("commit: %w", err)
	}
	return recs, true, nil
}

// endTxn commits or aborts, retrying what the client marks retriable (a timeout leaves the outcome
// to a repeated call, which librdkafka makes idempotent).
func endTxn(ctx context.Context, op func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := op(ctx)
		var ke kafka.Error
		if err == nil || !errors.As(err, &ke) || !ke.IsRetriable() || attempt >= 10 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// EnsureTopic creates topic with the given partitions if it does not exist (replication 1: for
// local setups; production topics are the operator's business).
func EnsureTopic(ctx context.Context, brokers, topic string, partitions int) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers})
	if err != nil {
		return err
	}
	defer a.Close()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError && r.Error.Code() != kafka.ErrTopicAlreadyExists {
			return fmt.Errorf("create topic %s: %w", topic, r.Error)
		}
	}
	return nil
}
