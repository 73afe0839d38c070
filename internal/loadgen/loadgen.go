// Package loadgen produces synthetic records of a pipeline spec whose exact totals are known.
//
// Invariant: Totals is the spec's own fold (spec.Plan.Fold, the pipeline's) of exactly the records
// of Kafka transactions that committed (an aborted transaction's records must never reach MySQL),
// decoded by the spec's decoder, so it holds what every aggregate table must; each bad record is
// remembered with the reason that decoder gives it. A good record the generator made that the
// decoder refuses is an error, never a silent miscount. Totals also keeps the committed payloads
// themselves (bounded), so a check that shares no code with relay can decode them on its own.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/spec"
)

// Options shape the load.
type Options struct {
	Brokers   string
	Topic     string
	Orders    int     // records to produce (good + bad)
	Rate      float64 // records per second; 0 means as fast as possible
	Batch     int     // records per Kafka transaction (or per flush when not transactional)
	AbortRate float64 // fraction of transactions aborted on purpose
	BadRate   float64 // fraction of records that are bad input
	// SKUs is the number of distinct values of each field an aggregate groups by (default 100);
	// Distinct overrides it per field, by its name in the spec.
	SKUs     int
	Distinct map[string]int
	Windows  int           // event times fall in this many spans of Window after StartTS
	Window   time.Duration // default one minute
	Seed     uint64        // makes the stream reproducible
	StartTS  int64         // event time of the first span (epoch ms)
	TxnID    string        // transactional.id; empty means a non-transactional producer
	// Plan is the spec the records are made for; nil is the default spec (relay's defaults, as
	// config.Default), whose records are the ones loadgen always made, byte for byte.
	Plan *spec.Plan
	// Escape writes what real producers write, with the same known meaning (spell.go): grouped
	// strings and order ids with non-ASCII text (é, ü, CJK, emoji past the BMP; an NFC and an NFD
	// key of the same visible text), strings raw or \u-escaped (surrogate pairs, "\/", escaped
	// ASCII letters), escaped member names, numbers and times in every spelling the spec accepts,
	// members in any order, any whitespace. Off, the records are the plain ones.
	Escape bool
	// Progress, if set, gets a line every ProgressEvery (default 5 s) while Run produces: records
	// sent, committed and aborted, the rate and the time left.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// DefaultPlan is the default spec's plan (config.Default's), compiled once.
var DefaultPlan = sync.OnceValue(func() *spec.Plan {
	c := config.Default()
	p, err := c.Plan()
	if err != nil {
		panic("loadgen: the default spec does not compile: " + err.Error())
	}
	return p
})

// Bad is one bad record with the reason relay files it under.
type Bad struct {
	Reason  string
	Payload string
}

// Tables is what the aggregate tables of Plan hold: Rows[a] are aggregate a's rows, sorted by key.
type Tables struct {
	Plan *spec.Plan
	Rows [][]spec.Row
}

// Keys is the number of rows of all tables.
func (x Tables) Keys() int {
	n := 0
	for _, rs := range x.Rows {
		n += len(rs)
	}
	return n
}

// Totals is what relay must produce from what was committed to Kafka.
type Totals struct {
	mu     sync.Mutex
	plan   *spec.Plan // set by the first Run
	dec    *spec.Decoder
	rec    spec.Record
	tables *spec.Tables // the fold of the committed good records
	Bad    []Bad
	// Good counts committed good records, Aborted the records of aborted transactions, Produced
	// every record sent.
	Good, Aborted, Produced int64
	// committed holds the payloads of committed transactions, good and bad, in the order
	// recorded, while they fit keep bytes (see Keep); over is set once one did not.
	committed  [][]byte
	kept, keep int64
	over       bool
}

// DefaultKeep bounds the committed payloads NewTotals keeps: ample for a test's few hundred
// thousand records (the bad kind too_large is 70 kB each), and a bound on a long run's memory.
const DefaultKeep = 256 << 20

// NewTotals returns empty totals that keep up to DefaultKeep bytes of committed payloads; the
// first Run fixes their spec.
func NewTotals() *Totals { return &Totals{keep: DefaultKeep} }

// Keep bounds the bytes of committed payloads the totals keep for Committed (0: none, for a run
// that needs only the fold).
func (t *Totals) Keep(bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.keep = bytes
}

// Committed returns the payloads of every committed record, good and bad, in the order they were
// recorded (one Run's in the order produced), for a check that decodes them on its own. It is an
// error once more were committed than the totals keep.
func (t *Totals) Committed() ([][]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		return nil, fmt.Errorf("loadgen: the committed payloads passed the %d bytes the totals keep", t.keep)
	}
	return slices.Clone(t.committed), nil
}

// use fixes the totals' plan, refusing a second one: one fold cannot hold two specs' tables.
func (t *Totals) use(p *spec.Plan) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.plan == nil {
		t.plan, t.dec, t.tables = p, p.NewDecoder(), p.NewTables()
	} else if t.plan != p {
		return errors.New("loadgen: these totals hold another spec's records")
	}
	return nil
}

// planLocked is the totals' plan, the default one before any Run (nothing is folded then).
func (t *Totals) planLocked() *spec.Plan {
	if t.plan == nil {
		return DefaultPlan()
	}
	return t.plan
}

type pendingRec struct {
	payload []byte
	bad     *Bad // a bad kind, with the reason the default spec gives it; nil for a good record
}

// record adds a batch: to the totals when committed (decoded and folded as relay does), to the
// aborted count otherwise.
func (t *Totals) record(recs []pendingRec, committed bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Produced += int64(len(recs))
	if !committed {
		t.Aborted += int64(len(recs))
		return nil
	}
	for _, r := range recs {
		if !t.over {
			if t.kept += int64(len(r.payload)); t.kept <= t.keep {
				t.committed = append(t.committed, r.payload)
			} else {
				t.over, t.committed = true, nil
			}
		}
		reason, field := t.dec.Decode(r.payload, &t.rec)
		switch {
		case reason != spec.OK && r.bad == nil:
			return fmt.Errorf("loadgen: a generated good record is bad input to the spec (%s, field %q): %s", reason, field, r.payload)
		case reason != spec.OK:
			t.Bad = append(t.Bad, Bad{Reason: reason.String(), Payload: r.bad.Payload})
		default:
			// A bad kind that this spec accepts (it declares none of the fields the kind breaks)
			// is a good record of it.
			t.plan.Fold(&t.rec, []*spec.Tables{t.tables})
			t.Good++
		}
	}
	return nil
}

// Snapshot copies the totals under the lock: every table's expected rows, the bad records and the
// number of committed good records.
func (t *Totals) Snapshot() (Tables, []Bad, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.planLocked()
	x := Tables{Plan: p, Rows: make([][]spec.Row, len(p.Tables()))}
	for a := range x.Rows {
		if t.tables == nil {
			continue
		}
		for _, r := range t.tables.Rows(a) {
			x.Rows[a] = append(x.Rows[a], spec.Row{Key: r.Key, Accs: slices.Clone(r.Accs)})
		}
	}
	return x, append([]Bad(nil), t.Bad...), t.Good
}

// Summary says what was produced, for the operator who ran it.
func (t *Totals) Summary() string {
	x, bad, good := t.Snapshot()
	var keys []string
	for a, table := range x.Plan.Tables() {
		keys = append(keys, fmt.Sprintf("%s %d", table, len(x.Rows[a])))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("%d records sent: %d good orders committed (keys: %s), %d bad records, %d records in aborted transactions",
		t.Produced, good, strings.Join(keys, ", "), len(bad), t.Aborted)
}

// amounts mixes edge values (exactness: 0.1, 0.0001, the largest 8.4 value, negatives) with
// ordinary ones; a decimal(S) field takes them cut to S fractional digits.
var amounts = []string{"0.1", "0.0001", "99999999.9999", "12.34", "-5.5", "1", "0.3333", "250.00", "7.77"}

// badRecords are the bad-input kinds with the reason the default spec gives each; another spec's
// decoder may file them under another reason (Totals asks it).
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

// Generator makes the deterministic stream of one spec's records.
type Generator struct {
	o      Options
	plan   *spec.Plan
	fields []spec.InputField
	values [][]string // per field: the values it is drawn from (nil: see raw)
	plains [][]string // values as the plain records write them (see plain), rendered once
	draw   []int      // the fields in the order values are drawn: grouped or filtered, the event time, the rest
	layout []node     // the record's top-level keys
	rng    *rand.Rand
	sp     *speller // with Escape: how each record is written
	seq    int64
	bad    int      // bad records made so far
	vals   []string // this record's values, by field (as raw gives them)
	lits   []string // and as the plain records write them
}

// node is one key of the record: a field's value, or an object of fields sharing a path prefix.
type node struct {
	key   string
	field int // -1: an object of kids
	kids  []node
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
	g := &Generator{o: o, plan: o.Plan, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
	if o.Escape {
		g.sp = newSpeller(o.Seed)
	}
	if g.plan == nil {
		g.plan = DefaultPlan()
	}
	g.fields = g.plan.InputFields()
	g.values, g.plains = make([][]string, len(g.fields)), make([][]string, len(g.fields))
	g.vals, g.lits = make([]string, len(g.fields)), make([]string, len(g.fields))
	et := len(g.fields) - 1
	var rest []int
	for i, f := range g.fields[:et] {
		g.values[i] = choices(f, o)
		for _, v := range g.values[i] {
			g.plains[i] = append(g.plains[i], plain(&f, v))
		}
		g.layout = place(g.layout, f.Path, i)
		if f.Grouped || f.Filter != nil {
			g.draw = append(g.draw, i)
		} else {
			rest = append(rest, i)
		}
	}
	g.layout = place(g.layout, g.fields[et].Path, et)
	g.draw = append(append(g.draw, et), rest...)
	return g
}

// choices are the values a field is drawn from: a filter's values and one it drops, a small
// vocabulary for a grouped field (so keys collide), the edge amounts for a decimal. An ungrouped
// string is an order id and an ungrouped int any small number (nil: raw makes them).
func choices(f spec.InputField, o Options) []string {
	n := o.SKUs
	if d, ok := o.Distinct[f.Name]; ok && d > 0 {
		n = d
	}
	var out []string
	switch {
	case f.Filter != nil:
		out = slices.Clone(f.Filter)
		// One value the filters drop, so records both reach and miss the filtered aggregates.
		for k := 0; ; k++ {
			v := vocabulary(f, k, o.Escape)
			if !slices.Contains(f.Filter, v) {
				return append(out, v)
			}
		}
	case f.Kind == spec.KindDecimal:
		for _, a := range amounts {
			out = append(out, cut(a, f.Scale))
		}
	case f.Grouped:
		for k := range n {
			out = append(out, vocabulary(f, k, o.Escape))
		}
	}
	return out
}

// vocabulary is a grouped field's k-th value: SKU-k for a field sku, k for an int, within the
// field's byte bound. With escape, a string carries the k-th decoration (SKU-café-1, SKU-日本語-4):
// the decomposed one the previous value's number, so both spell the same visible text.
func vocabulary(f spec.InputField, k int, escape bool) string {
	if f.Kind == spec.KindInt {
		return strconv.Itoa(k)
	}
	deco, num := "", k
	if escape {
		deco = decorations[k%len(decorations)]
		if k%len(decorations) == nfdDecoration {
			num = k - 1
		}
	}
	return fitTail(strings.ToUpper(f.Path[len(f.Path)-1])+"-"+deco+strconv.Itoa(num), f.Max)
}

// cut drops the fractional digits of a past scale (an amount for a decimal(scale) field).
func cut(a string, scale int) string {
	i := strings.IndexByte(a, '.')
	switch {
	case i < 0 || len(a)-i-1 <= scale:
		return a
	case scale == 0:
		return a[:i]
	}
	return a[:i+1+scale]
}

// place adds field at path to the layout, inside the objects of its leading keys.
func place(layout []node, path []string, field int) []node {
	if len(path) == 1 {
		return append(layout, node{key: path[0], field: field})
	}
	for i := range layout {
		if layout[i].key == path[0] && layout[i].field < 0 {
			layout[i].kids = place(layout[i].kids, path[1:], field)
			return layout
		}
	}
	return append(layout, node{key: path[0], field: -1, kids: place(nil, path[1:], field)})
}

// Next returns one record and what it must become.
func (g *Generator) Next() ([]byte, pendingRec) {
	g.seq++
	if g.o.BadRate > 0 && g.rng.Float64() < g.o.BadRate {
		// In turn, not at random: every kind appears once there are as many bad records as kinds.
		b := badRecords[g.bad%len(badRecords)]
		g.bad++
		return []byte(b.Payload), pendingRec{payload: []byte(b.Payload), bad: &b}
	}
	for _, i := range g.draw {
		var k int
		g.vals[i], k = g.raw(i)
		if g.sp == nil {
			if k >= 0 {
				g.lits[i] = g.plains[i][k]
			} else {
				g.lits[i] = plain(&g.fields[i], g.vals[i])
			}
		}
	}
	var rec []byte
	if g.sp != nil {
		rec = g.sp.record(nil, g.layout, g.fields, g.vals)
	} else {
		rec = appendObject(nil, g.layout, g.lits)
	}
	return rec, pendingRec{payload: rec}
}

// raw draws field i's value (a string's text, a number's digits, a time's epoch milliseconds) and
// its index in g.values[i], -1 for a value made here.
func (g *Generator) raw(i int) (string, int) {
	f := &g.fields[i]
	if vs := g.values[i]; vs != nil {
		k := g.rng.IntN(len(vs))
		return vs[k], k
	}
	switch f.Kind {
	case spec.KindEpochMS, spec.KindRFC3339:
		return strconv.FormatInt(g.o.StartTS+g.rng.Int64N(int64(g.o.Windows)*g.o.Window.Milliseconds()), 10), -1
	case spec.KindInt:
		return strconv.Itoa(g.rng.IntN(1000) - 100), -1
	}
	id := fmt.Sprintf("o-%d-%d", g.o.Seed, g.seq)
	if g.sp != nil {
		id += idSuffixes[g.seq%int64(len(idSuffixes))]
	}
	return fitHead(id, f.Max), -1
}

// plain is value v of field f as the plain records write it: strings, decimals and RFC 3339
// times quoted, integers and epoch milliseconds bare.
func plain(f *spec.InputField, v string) string {
	switch f.Kind {
	case spec.KindInt, spec.KindEpochMS:
		return v
	case spec.KindRFC3339:
		ms, _ := strconv.ParseInt(v, 10, 64)
		v = time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	return strconv.Quote(v)
}

func appendObject(dst []byte, layout []node, lits []string) []byte {
	dst = append(dst, '{')
	for i, n := range layout {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendQuote(dst, n.key)
		dst = append(dst, ':')
		if n.field >= 0 {
			dst = append(dst, lits[n.field]...)
		} else {
			dst = appendObject(dst, n.kids, lits)
		}
	}
	return append(dst, '}')
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
	if err := totals.use(g.plan); err != nil {
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
	reopened := 0
	for sent := 0; sent < o.Orders; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(batch, o.Orders-sent)
		recs, committed, err := sendBatch(ctx, p, o, g, n, &prog.sent, func(i int) error { return pace(ctx, start, o.Rate, sent+i) })
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

// sendBatch produces n generated orders, in one transaction when o.TxnID is set, and says whether
// they were committed (delivered, without transactions). On error the returned records are the
// ones generated so far, none of them committed. Without transactions each record waits for
// paceRecord(i) first, so a rate spreads over the batch: flushing a batch takes up to 100 ms, and
// paced only between batches the load came in bursts (asked for 20 k/s, got 5.6 k/s).
// A transaction is sent whole: its records become readable together anyway. sent counts each
// record handed to the producer (for progress lines).
func sendBatch(ctx context.Context, p *kafka.Producer, o Options, g *Generator, n int, sent *atomic.Int64, paceRecord func(i int) error) ([]pendingRec, bool, error) {
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

// File is a totals file read back: what relay verify --expected compares MySQL against.
type File struct {
	Tables        Tables
	BadRecords    map[string]int // bad records by the reason relay must give them
	GoodOrders    int64
	AbortedOrders int64
}

// The totals file: counts, then every aggregate table of the spec with its columns (as
// spec.Plan.ColumnNames) and its rows, each the columns' values as MySQL prints them
// (spec.Plan.Format), sorted by primary key.
type fileJSON struct {
	GoodOrders    int64          `json:"good_orders"`
	AbortedOrders int64          `json:"aborted_orders"`
	BadRecords    map[string]int `json:"bad_records"`
	Tables        []fileTable    `json:"tables"`
}

type fileTable struct {
	Table   string     `json:"table"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// ReadFile reads a totals file written by WriteFile for plan's spec: it must hold every table of
// plan, with plan's columns, and nothing else.
func ReadFile(path string, plan *spec.Plan) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j fileJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &File{Tables: Tables{Plan: plan, Rows: make([][]spec.Row, len(plan.Tables()))}, BadRecords: j.BadRecords,
		GoodOrders: j.GoodOrders, AbortedOrders: j.AbortedOrders}
	byName := map[string]fileTable{}
	for _, t := range j.Tables {
		if _, dup := byName[t.Table]; dup {
			return nil, fmt.Errorf("%s: table %s appears twice", path, t.Table)
		}
		byName[t.Table] = t
	}
	for a, table := range plan.Tables() {
		t, ok := byName[table]
		if !ok {
			return nil, fmt.Errorf("%s: no table %s: the file was written for another spec", path, table)
		}
		delete(byName, table)
		key, measures := plan.ColumnNames(a)
		if cols := append(key, measures...); !slices.Equal(t.Columns, cols) {
			return nil, fmt.Errorf("%s: table %s has columns %v, the spec %v", path, table, t.Columns, cols)
		}
		cols := make([][]byte, plan.Columns(a))
		for _, row := range t.Rows {
			if len(row) != len(cols) {
				return nil, fmt.Errorf("%s: table %s: a row of %d columns, want %d", path, table, len(row), len(cols))
			}
			for i, v := range row {
				cols[i] = []byte(v)
			}
			r, err := plan.ParseRow(a, cols)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			f.Tables.Rows[a] = append(f.Tables.Rows[a], r)
		}
		rows := f.Tables.Rows[a]
		slices.SortFunc(rows, func(x, y spec.Row) int { return strings.Compare(x.Key, y.Key) })
		for i := 1; i < len(rows); i++ {
			if rows[i].Key == rows[i-1].Key {
				return nil, fmt.Errorf("%s: table %s lists one key twice", path, table)
			}
		}
	}
	if len(byName) > 0 {
		return nil, fmt.Errorf("%s: tables %s are not in the spec: the file was written for another spec",
			path, strings.Join(slices.Sorted(maps.Keys(byName)), ", "))
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

// WriteFile stores the expected totals as JSON, every table sorted by key, for `relay verify
// --expected` and people.
func (t *Totals) WriteFile(path string) error {
	x, bad, good := t.Snapshot()
	j := fileJSON{GoodOrders: good, BadRecords: map[string]int{}, Tables: []fileTable{}}
	for _, b := range bad {
		j.BadRecords[b.Reason]++
	}
	for a, table := range x.Plan.Tables() {
		key, measures := x.Plan.ColumnNames(a)
		ft := fileTable{Table: table, Columns: append(key, measures...), Rows: [][]string{}}
		for _, r := range x.Rows[a] {
			cols, err := x.Plan.Format(a, r)
			if err != nil {
				return err
			}
			ft.Rows = append(ft.Rows, cols)
		}
		j.Tables = append(j.Tables, ft)
	}
	t.mu.Lock()
	j.AbortedOrders = t.Aborted
	t.mu.Unlock()
	b, err := json.MarshalIndent(j, "", "  ")
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
