package consumer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

// The broker is real and transactional: a transactional producer commits some records and aborts
// others; the read_committed consumer relay uses sees exactly the committed ones, and resumes from
// explicit offsets.
func TestReadCommittedSeesOnlyCommitted(t *testing.T) {
	brokers := testenv.Brokers(t)
	ctx := testenv.Context(t, 2*time.Minute)
	var topic string
	var want map[string]bool
	var wantP0 int
	for attempt := 1; ; attempt++ {
		topic = testenv.Topic(t, 2)
		var err error
		want, wantP0, err = produceTransactions(ctx, brokers, topic)
		var ke kafka.Error
		if err == nil {
			break
		}
		// A broker whose transaction coordinator has just loaded may fail the first transactions
		// fatally (INVALID_TXN_STATE); the claim under test is about reading, so start over.
		if !errors.As(err, &ke) || !ke.IsFatal() || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: fatal producer error, again on a new topic: %v", attempt, err)
	}

	c, err := New(Options{Brokers: brokers, Topics: []string{topic}, GroupID: "g-" + topic, StartOffset: "earliest"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start, err := c.Assign(ctx, partition.Offsets{})
	if err != nil {
		t.Fatal(err)
	}
	if len(start[topic]) != 2 || start[topic][0] != 0 || start[topic][1] != 0 {
		t.Fatalf("start offsets %v, want both partitions at 0", start)
	}
	got := readAll(t, c, len(want))
	for v := range got {
		if !want[v] {
			t.Errorf("read %q, which was aborted", v)
		}
	}
	for v := range want {
		if !got[v] {
			t.Errorf("committed record %q was not read", v)
		}
	}
	if len(got) != 20 {
		t.Fatalf("read %d distinct committed records, want 20", len(got))
	}

	// Resuming from explicit offsets reads only what lies past them.
	c2, err := New(Options{Brokers: brokers, Topics: []string{topic}, GroupID: "g2-" + topic, StartOffset: "latest"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	from := partition.Offsets{}
	from.Set(topic, 0, 0)
	st, err := c2.Assign(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	hi, _, _ := func() (int64, int64, error) {
		_, h, err := c2.Kafka().QueryWatermarkOffsets(topic, 1, 5000)
		return h, 0, err
	}()
	if st[topic][1] != hi {
		t.Fatalf("partition 1 without a ledger offset started at %d, want latest (%d)", st[topic][1], hi)
	}
	// The watermarks Assign read are the broker's (what the session checks the resume offsets
	// against without a round trip behind the fetch); a partition it did not read is an error.
	for p := int32(0); p < 2; p++ {
		lo, hi, err := c2.Kafka().QueryWatermarkOffsets(topic, p, 5000)
		alo, ahi, aerr := c2.AssignedWatermarks(topic, p, 0)
		if err != nil || aerr != nil || alo != lo || ahi != hi {
			t.Fatalf("partition %d: assigned watermarks %d..%d (%v), broker %d..%d (%v)", p, alo, ahi, aerr, lo, hi, err)
		}
	}
	if _, _, err := c2.AssignedWatermarks(topic, 2, 0); err == nil {
		t.Fatal("watermarks of a partition Assign never read")
	}
	got2 := readAll(t, c2, wantP0)
	if len(got2) != wantP0 {
		t.Fatalf("from offset 0 of partition 0 read %d records, want the %d committed there", len(got2), wantP0)
	}
}

// produceTransactions writes six transactions of five records over two partitions, aborting two,
// and returns the committed values and how many of them went to partition 0.
func produceTransactions(ctx context.Context, brokers, topic string) (map[string]bool, int, error) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "transactional.id": "tx-" + topic})
	if err != nil {
		return nil, 0, err
	}
	defer p.Close()
	go func() {
		for range p.Events() {
		}
	}()
	if err := p.InitTransactions(ctx); err != nil {
		return nil, 0, err
	}
	want := map[string]bool{}
	wantP0 := 0
	for txn := 0; txn < 6; txn++ {
		if err := p.BeginTransaction(); err != nil {
			return nil, 0, err
		}
		for i := 0; i < 5; i++ {
			v := fmt.Sprintf("txn%d-rec%d", txn, i)
			if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: int32(i % 2)}, Value: []byte(v)}, nil); err != nil {
				return nil, 0, err
			}
			if txn%3 != 1 {
				want[v] = true
				if i%2 == 0 {
					wantP0++
				}
			}
		}
		// Delivered before the end of the transaction, as relay's load generator does.
		p.Flush(30000)
		if txn%3 == 1 {
			err = p.AbortTransaction(ctx)
		} else {
			err = p.CommitTransaction(ctx)
		}
		if err != nil {
			return nil, 0, err
		}
	}
	return want, wantP0, nil
}

// readAll reads until n records and a quiet second; its batch holds a record or two (16 bytes of
// values), so most reads end with a record held back for the next.
func readAll(t *testing.T, c *Consumer, n int) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	b := NewBatch(4, 16)
	deadline := time.Now().Add(30 * time.Second)
	quietUntil := time.Time{}
	for time.Now().Before(deadline) {
		if err := c.Read(100*time.Millisecond, b); err != nil {
			t.Fatal(err)
		}
		for _, r := range b.Records {
			if got[string(r.Value)] {
				t.Errorf("record %q read twice", r.Value)
			}
			got[string(r.Value)] = true
		}
		if len(b.Records) > 0 {
			continue
		}
		// Keep polling a little after reaching n, so extra (aborted) records would show up.
		if len(got) >= n {
			if quietUntil.IsZero() {
				quietUntil = time.Now().Add(time.Second)
			} else if time.Now().After(quietUntil) {
				break
			}
		}
	}
	return got
}

// librdkafka's syslog levels map onto zap's: errors stay errors, notices are info.
func TestLogLevel(t *testing.T) {
	for syslog, want := range map[int]zapcore.Level{0: zapcore.ErrorLevel, 3: zapcore.ErrorLevel, 4: zapcore.WarnLevel,
		5: zapcore.InfoLevel, 6: zapcore.InfoLevel, 7: zapcore.DebugLevel} {
		if got := logLevel(syslog); got != want {
			t.Errorf("syslog level %d: %s, want %s", syslog, got, want)
		}
	}
}
