// Package loadgen produces synthetic orders whose exact totals are known.
//
// Invariant: Totals counts only records of Kafka transactions that committed (an aborted
// transaction's orders must never reach MySQL), with amounts kept as exact fixed-point; each bad
// record produced is remembered with the reason relay must give it.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/money"
)

// Options shape the load.
type Options struct {
	Brokers   string
	Topic     string
	Orders    int           // orders to produce (good + bad)
	Rate      float64       // orders per second; 0 means as fast as possible
	Batch     int           // orders per Kafka transaction (or per flush when not transactional)
	AbortRate float64       // fraction of transactions aborted on purpose
	BadRate   float64       // fraction of records that are bad input
	SKUs      int           // distinct skus
	Windows   int           // distinct one-minute windows the event times fall in
	Seed      uint64        // makes the stream reproducible
	StartTS   int64         // event time of the first window (epoch ms)
	Window    time.Duration // window size (for the expected keys)
	TxnID     string        // transactional.id; empty means a non-transactional producer
	// Shops, above 0, gives every good record a shop (shop-0 ..), the shop's region (ShopRegion)
	// and a status (paid, shipped or cancelled), for pipeline specs that group or filter by them,
	// and keeps the committed good records in Totals.Records: a spec's totals are their fold
	// (spec.Plan.Fold). 0 makes the default records, byte for byte.
	Shops int
}

// Key is one aggregate row.
type Key struct {
	WindowMS int64
	SKU      string
}

// Acc is its expected value.
type Acc struct {
	Count int64
	Sum   money.Sum
}

// Bad is one bad record with the reason relay must file it under.
type Bad struct {
	Reason  string
	Payload string
}

// Totals is what relay must produce from what was committed to Kafka.
type Totals struct {
	mu       sync.Mutex
	Keys     map[Key]*Acc
	Bad      []Bad
	Good     int64 // committed good orders
	Aborted  int64 // orders in aborted transactions
	Produced int64 // every record sent, committed or not
	// Records are the committed good records, in no particular order (only with Options.Shops).
	Records [][]byte
}

// NewTotals returns empty totals.
func NewTotals() *Totals { return &Totals{Keys: map[Key]*Acc{}} }

type pendingRec struct {
	key    Key
	amount int64
	bad    *Bad
	record []byte // kept for Totals.Records (Options.Shops)
}

// record adds a batch's orders: to the totals when committed, to the aborted count otherwise.
func (t *Totals) record(recs []pendingRec, committed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Produced += int64(len(recs))
	if !committed {
		t.Aborted += int64(len(recs))
		return
	}
	for _, r := range recs {
		if r.bad != nil {
			t.Bad = append(t.Bad, *r.bad)
			continue
		}
		a := t.Keys[r.key]
		if a == nil {
			a = &Acc{}
			t.Keys[r.key] = a
		}
		a.Count++
		a.Sum.Add(r.amount)
		t.Good++
		if r.record != nil {
			t.Records = append(t.Records, r.record)
		}
	}
}

// Snapshot copies the totals under the lock.
func (t *Totals) Snapshot() (map[Key]Acc, []Bad, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := make(map[Key]Acc, len(t.Keys))
	for k, v := range t.Keys {
		m[k] = *v
	}
	return m, append([]Bad(nil), t.Bad...), t.Good
}

// CommittedRecords copies Records under the lock.
func (t *Totals) CommittedRecords() [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([][]byte(nil), t.Records...)
}

// ShopRegion is the region of a shop of Options.Shops: every shop lies in one region, so totals
// by region are sums of totals by shop.
func ShopRegion(shop int) string { return "r" + strconv.Itoa(shop%3) }

var statuses = []string{"paid", "shipped", "cancelled"}

// Summary says what was produced, for the operator who ran it.
func (t *Totals) Summary() string {
	keys, bad, good := t.Snapshot()
	var sum money.Sum
	for _, a := range keys {
		sum.AddSum(a.Sum)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("%d records sent: %d good orders committed (%d (window, sku) keys, amounts summing to %s), %d bad records, %d records in aborted transactions",
		t.Produced, good, len(keys), sum, len(bad), t.Aborted)
}

// amounts mixes edge values (exactness: 0.1, 0.0001, the largest 8.4 value, negatives) with ordinary ones.
var amounts = []string{"0.1", "0.0001", "99999999.9999", "12.34", "-5.5", "1", "0.3333", "250.00", "7.77"}

// badRecords are the bad-input kinds with the reason relay gives each.
var badRecords = []Bad{
	{"not_json", `{"order_id": "x", "sku": `},
	{"not_object", `[1,2,3]`},
	{"missing_field", `{"order_id":"b1","sku":"SKU-1","ts":1764000000000}`},
	{"wrong_type", `{"order_id":"b2","sku":17,"amount":"1.00","ts":1764000000000}`},
	{"empty_field", `{"order_id":"","sku":"SKU-1","amount":"1.00","ts":1764000000000}`},
	{"bad_amount", `{"order_id":"b3","sku":"SKU-1","amount":"12,50","ts":1764000000000}`},
	{"amount_precision", `{"order_id":"b4","sku":"SKU-1","amount":"0.00001","ts":1764000000000}`},
	{"amount_range", `{"order_id":"b5","sku":"SKU-1","amount":"1e30","ts":1764000000000}`},
	{"bad_ts", `{"order_id":"b6","sku":"SKU-1","amount":"1.00","ts":"soon"}`},
	{"ts_range", `{"order_id":"b7","sku":"SKU-1","amount":"1.00","ts":-5}`},
	{"sku_too_long", `{"order_id":"b8","sku":"SKU-0123456789012345678901234567890123456789012345678901234567890123","amount":"1.00","ts":1764000000000}`},
	{"bad_sku", `{"order_id":"b9","sku":"SKU-\uD800","amount":"1.00","ts":1764000000000}`},
	{"order_id_too_long", `{"order_id":"` + strings.Repeat("o", 129) + `","sku":"SKU-1","amount":"1.00","ts":1764000000000}`},
	{"bad_order_id", `{"order_id":"b10-\uDC00","sku":"SKU-1","amount":"1.00","ts":1764000000000}`},
	// Over the default 64 KiB payload limit; relay keeps only a bounded prefix in the DLQ.
	{"too_large", `{"order_id":"b11","sku":"SKU-1","amount":"1.00","ts":1764000000000,"pad":"` + strings.Repeat("x", 70000) + `"}`},
}

// BadReasons lists the reasons of every bad-input kind the generator makes.
func BadReasons() []string {
	out := make([]string, len(badRecords))
	for i, b := range badRecords {
		out[i] = b.Reason
	}
	return out
}

// Generator makes the deterministic stream.
type Generator struct {
	o   Options
	rng *rand.Rand
	seq int64
	bad int // bad records made so far
}

// NewGenerator seeds a stream.
func NewGenerator(o Options) *Generator {
	if o.SKUs <= 0 {
		o.SKUs = 100
	}
	if o.Windows <= 0 {
		o.Windows = 10
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.StartTS == 0 {
		o.StartTS = 1764000000000 - 1764000000000%60000
	}
	return &Generator{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
}

// Next returns one record and what it must become.
func (g *Generator) Next() ([]byte, pendingRec) {
	g.seq++
	if g.o.BadRate > 0 && g.rng.Float64() < g.o.BadRate {
		// In turn, not at random: every kind appears once there are as many bad records as kinds.
		b := badRecords[g.bad%len(badRecords)]
		g.bad++
		return []byte(b.Payload), pendingRec{bad: &b}
	}
	sku := "SKU-" + strconv.Itoa(g.rng.IntN(g.o.SKUs))
	ts := g.o.StartTS + g.rng.Int64N(int64(g.o.Windows)*g.o.Window.Milliseconds())
	amt := amounts[g.rng.IntN(len(amounts))]
	units, err := money.Parse([]byte(amt))
	if err != nil {
		panic(err)
	}
	w := g.o.Window.Milliseconds()
	key := Key{WindowMS: ts - ts%w, SKU: sku}
	if g.o.Shops > 0 {
		shop := g.rng.IntN(g.o.Shops)
		rec := []byte(fmt.Sprintf(`{"order_id":"o-%d-%d","shop":"shop-%d","region":%q,"status":%q,"sku":%q,"amount":%q,"ts":%d}`,
			g.o.Seed, g.seq, shop, ShopRegion(shop), statuses[g.rng.IntN(len(statuses))], sku, amt, ts))
		return rec, pendingRec{key: key, amount: units, record: rec}
	}
	rec := fmt.Sprintf(`{"order_id":"o-%d-%d","sku":%q,"amount":%q,"ts":%d}`, g.o.Seed, g.seq, sku, amt, ts)
	return []byte(rec), pendingRec{key: key, amount: units}
}

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
	batch := max(o.Batch, 1)
	start := time.Now()
	reopened := 0
	for sent := 0; sent < o.Orders; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(batch, o.Orders-sent)
		recs, committed, err := sendBatch(ctx, p, o, g, n, func(i int) error { return pace(ctx, start, o.Rate, sent+i) })
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
		totals.record(recs, committed)
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

// sendBatch produces n generated orders, in one transaction when o.TxnID is set, and says whether
// they were committed (delivered, without transactions). On error the returned records are the
// ones generated so far, none of them committed. Without transactions each record waits for
// paceRecord(i) first, so a rate spreads over the batch: flushing a batch takes up to 100 ms, and
// paced only between batches the load came in bursts (asked for 20 k/s, got 5.6 k/s).
// A transaction is sent whole: its records become readable together anyway.
func sendBatch(ctx context.Context, p *kafka.Producer, o Options, g *Generator, n int, paceRecord func(i int) error) ([]pendingRec, bool, error) {
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
		recs = append(recs, r)
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

// File is a totals file read back: what relay verify --expected compares MySQL against.
type File struct {
	Keys          map[Key]Acc
	BadRecords    map[string]int // bad records by the reason relay must give them
	GoodOrders    int64
	AbortedOrders int64
}

type fileJSON struct {
	GoodOrders    int64          `json:"good_orders"`
	AbortedOrders int64          `json:"aborted_orders"`
	BadRecords    map[string]int `json:"bad_records"`
	Totals        []fileRow      `json:"totals"`
}

const fileWindowLayout = "2006-01-02 15:04:05"

// ReadFile reads a totals file written by WriteFile.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j fileJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &File{Keys: map[Key]Acc{}, BadRecords: j.BadRecords, GoodOrders: j.GoodOrders, AbortedOrders: j.AbortedOrders}
	for _, r := range j.Totals {
		w, err := time.Parse(fileWindowLayout, r.WindowStart)
		if err != nil {
			return nil, fmt.Errorf("%s: window_start %q: %w", path, r.WindowStart, err)
		}
		sum, err := money.ParseSum(r.AmountSum)
		if err != nil {
			return nil, fmt.Errorf("%s: amount_sum %q: %w", path, r.AmountSum, err)
		}
		f.Keys[Key{WindowMS: w.UnixMilli(), SKU: r.SKU}] = Acc{Count: r.OrderCount, Sum: sum}
	}
	return f, nil
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

// fileRow is one expected total in the totals file.
type fileRow struct {
	WindowStart string `json:"window_start"`
	SKU         string `json:"sku"`
	OrderCount  int64  `json:"order_count"`
	AmountSum   string `json:"amount_sum"`
}

// WriteFile stores the expected totals as JSON, sorted, for `relay verify` and people.
func (t *Totals) WriteFile(path string) error {
	keys, bad, good := t.Snapshot()
	rows := make([]fileRow, 0, len(keys))
	for k, a := range keys {
		rows = append(rows, fileRow{WindowStart: time.UnixMilli(k.WindowMS).UTC().Format(fileWindowLayout),
			SKU: k.SKU, OrderCount: a.Count, AmountSum: a.Sum.String()})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].WindowStart != rows[j].WindowStart {
			return rows[i].WindowStart < rows[j].WindowStart
		}
		return rows[i].SKU < rows[j].SKU
	})
	reasons := map[string]int{}
	for _, b := range bad {
		reasons[b.Reason]++
	}
	b, err := json.MarshalIndent(fileJSON{GoodOrders: good, AbortedOrders: t.Aborted, BadRecords: reasons, Totals: rows}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
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
