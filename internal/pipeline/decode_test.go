package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/spec"
)

// counted decodes with JSON and counts the records it judged. With gate set, its first Decode
// waits until gate's count is done: helpers gated together each hold a batch at once.
type counted struct {
	json  *format.JSON
	n     int
	gate  *sync.WaitGroup
	gated bool
}

func (c *counted) Decode(ctx context.Context, payload []byte, rec *spec.Record) (spec.Reason, string, error) {
	if c.gate != nil && !c.gated {
		c.gated = true
		c.gate.Done()
		c.gate.Wait()
	}
	c.n++
	return c.json.Decode(ctx, payload, rec)
}

// mixed is n records, good and bad ones interleaved, escaped and not, each value distinct so a
// record decoded into another's slot shows.
func mixed(n int) []string {
	vals := make([]string, n)
	for i := range vals {
		switch i % 5 {
		case 0:
			vals[i] = fmt.Sprintf(`{"order_id":"o%d","sku":"s\u00e9%d","amount":"%d.25","ts":1700000000000}`, i, i%7, i)
		case 1:
			vals[i] = fmt.Sprintf(`{"order_id":"o\"%d\"","sku":"s%d","amount":"-%d","ts":1700000001000}`, i, i%3, i)
		case 2:
			vals[i] = fmt.Sprintf(`{"order_id":"o%d","sku":"s","amount":"x%d","ts":1700000000000}`, i, i)
		case 3:
			vals[i] = fmt.Sprintf(`{"order_id":"o%d","sku":"ok","amount":"1","ts":%d}`, i, 1700000000000+int64(i))
		default:
			vals[i] = `{"order_id":`
		}
	}
	return vals
}

// judged is what a record decoded to: its verdict and, when OK, its values.
func judged(d *decoded) string {
	if d.reason != spec.OK {
		return fmt.Sprintf("%s %q", d.reason, d.field)
	}
	var vals [][]byte
	for _, v := range d.rec.Vals {
		vals = append(vals, v.Bytes)
	}
	return fmt.Sprintf("ok %q %d", vals, d.rec.TS)
}

// Batches put in the decode queue come back in the order put, every record decoded to what one
// decoder, reading the same records one after another, gives it, batch after batch into the same
// slots as the poll reuses them; and the work is spread over the helpers.
func TestDecodeQueueKeepsOrder(t *testing.T) {
	var decs []*counted
	var gate sync.WaitGroup
	gate.Add(2) // the two helpers': neither decodes before both hold a batch
	s, _ := decodeSession(t, 3, func(p *spec.Plan) format.Decoder {
		c := &counted{json: format.NewJSON(p)}
		if len(decs) > 0 {
			c.gate = &gate
		}
		decs = append(decs, c)
		return c
	})
	q := s.queue
	one := format.NewJSON(s.p.Plan)
	batches := make([]*polled, q.depth())
	for i := range batches {
		batches[i] = batchOf()
	}
	var put, took int
	want := map[int][]string{} // by round: the values put
	check := func(b *polled) {
		vals := want[took]
		if len(b.recs.Records) != len(vals) {
			t.Fatalf("batch %d back with %d records, want %d (out of order?)", took, len(b.recs.Records), len(vals))
		}
		for i := range vals {
			var w decoded
			w.reason, w.field, _ = one.Decode(context.Background(), []byte(vals[i]), &w.rec)
			if got, w := judged(&b.dec[i]), judged(&w); got != w {
				t.Fatalf("batch %d, record %d: %s; one decoder gives %s", took, i, got, w)
			}
		}
		delete(want, took)
		took++
	}
	for round := range 40 {
		vals := mixed(1 + round*37%512)
		for i := range vals {
			vals[i] = vals[i][:len(vals[i])-1] + fmt.Sprintf(`,"round":%d}`, round)
		}
		if q.full() {
			check(q.take(true))
		}
		b := batches[put%len(batches)]
		slots := b.dec
		*b = *batchOf(vals...)
		b.dec = slices.Grow(slots[:0], len(vals))[:len(vals)]
		want[put] = vals
		put++
		q.put(b)
		for b := q.take(false); b != nil; b = q.take(false) {
			check(b)
		}
	}
	for b := q.take(true); b != nil; b = q.take(true) {
		check(b)
	}
	if took != put {
		t.Fatalf("%d batches back of %d put", took, put)
	}
	busy := 0
	for _, d := range decs {
		if d.n > 0 {
			busy++
		}
	}
	if busy < 2 || decs[0].n != 0 {
		t.Errorf("records decoded by the poll's decoder and each helper's: %d, %d, %d; want 0 by the poll's, some by each helper", decs[0].n, decs[1].n, decs[2].n)
	}
}

// shared is a registry unavailable for its first down asks, whichever decoder asks.
type shared struct {
	mu   sync.Mutex
	down int
	asks int
}

func (s *shared) unavailable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asks++
	return s.asks <= s.down
}

type sharedFlaky struct {
	json *format.JSON
	reg  *shared
}

func (f *sharedFlaky) Decode(ctx context.Context, payload []byte, rec *spec.Record) (spec.Reason, string, error) {
	if err := ctx.Err(); err != nil {
		return 0, "", err
	}
	if f.reg.unavailable() {
		return 0, "", fmt.Errorf("%w: schema id 7: 503 Service Unavailable", format.ErrUnavailable)
	}
	return f.json.Decode(ctx, payload, rec)
}

// A registry down while helpers decode: each batch a helper left at a record the registry could
// not judge is taken up by the poll (settle), which waits that record out; every record is judged as if
// the registry had never been down, and every failed ask is counted once.
func TestDecodeHelpersLeaveRegistryWaitToPoll(t *testing.T) {
	// Four batches, each stopped by its helper at its first record (4 failed asks); the poll asks
	// the first again at once (the 5th), then waits it out (a back-off, the 6th ask, a back-off, the
	// 7th answered); the other three it asks again at once, answered.
	reg := &shared{down: 6}
	s, slept := decodeSession(t, 4, func(p *spec.Plan) format.Decoder { return &sharedFlaky{json: format.NewJSON(p), reg: reg} })
	one := format.NewJSON(s.p.Plan)
	var vals [][]string
	for i := range 4 {
		vals = append(vals, mixed(100+i))
		s.queue.put(batchOf(vals[i]...))
	}
	var taken []*polled // all four back from the helpers before any is settled
	for range vals {
		taken = append(taken, s.queue.take(true))
	}
	for n, b := range taken {
		if err := s.settle(b); err != nil {
			t.Fatal(err)
		}
		for i := range vals[n] {
			var want decoded
			want.reason, want.field, _ = one.Decode(context.Background(), []byte(vals[n][i]), &want.rec)
			if got, w := judged(&b.dec[i]), judged(&want); got != w {
				t.Fatalf("batch %d, record %d: %s; want %s", n, i, got, w)
			}
		}
	}
	if n := value(t, s.p.Metrics.RegistryUnavailable); n != 6 {
		t.Errorf("relay_schema_registry_unavailable_total %v, want 6 (one per failed ask)", n)
	}
	if len(*slept) != 2 {
		t.Errorf("%d back-offs; want 2: the first batch's record asked again at once (5th ask) and then waited out (6th, 7th), the others' asked again at once", len(*slept))
	}
}

// testPoller is the poll's side of s, handing batches to a buffered out.
func testPoller(s *session) (*poller, chan *polled) {
	out := make(chan *polled, 16)
	return &poller{s: s, out: out, free: make(chan *polled, s.batches()), q: s.queue, most: s.batches()}, out
}

// A park request finds batches in the decode queue: every one is handed over, in order, before
// the poll says it parked, and it stays parked until resumed.
func TestParkHandsOverQueuedBatches(t *testing.T) {
	s, _ := decodeSession(t, 3, func(p *spec.Plan) format.Decoder { return format.NewJSON(p) })
	p, out := testPoller(s)
	s.queue.put(batchOf(mixed(200)...))
	s.queue.put(batchOf(mixed(100)...))
	resume := make(chan struct{})
	s.pause <- resume
	done := make(chan bool, 1)
	go func() { done <- p.parked() }()
	select {
	case <-s.parked:
	case <-time.After(10 * time.Second):
		t.Fatal("the poll did not park")
	}
	if len(out) != 2 || len(s.queue.pending) != 0 {
		t.Fatalf("parked with %d batches handed over and %d in the queue; want 2 and 0", len(out), len(s.queue.pending))
	}
	if a, b := <-out, <-out; len(a.recs.Records) != 200 || len(b.recs.Records) != 100 {
		t.Errorf("batches handed over with %d, %d records; want 200, 100 in that order", len(a.recs.Records), len(b.recs.Records))
	}
	select {
	case <-done:
		t.Fatal("the poll went on before it was resumed")
	case <-time.After(50 * time.Millisecond):
	}
	close(resume)
	if !<-done {
		t.Error("the poll ended instead of going on after the move")
	}
}

// A park request while a queued batch waits for the registry ends that wait: the batch is handed
// over with errRegistryWait, nothing of it to fold, and the poll ends (as with one decoder).
func TestParkEndsRegistryWaitOfQueuedBatch(t *testing.T) {
	reg := &shared{down: 1 << 30}
	s, _ := decodeSession(t, 3, func(p *spec.Plan) format.Decoder { return &sharedFlaky{json: format.NewJSON(p), reg: reg} })
	s.p.registryPolicy.Sleep = func(ctx context.Context, d time.Duration) error {
		<-ctx.Done()
		return ctx.Err()
	}
	p, out := testPoller(s)
	s.queue.put(batchOf(mixed(100)...))
	s.pause <- make(chan struct{})
	done := make(chan bool, 1)
	go func() { done <- p.parked() }()
	select {
	case ok := <-done:
		if ok || len(out) != 1 {
			t.Fatalf("parked() = %v with %d batches handed over; want false and the waiting batch", ok, len(out))
		}
		if b := <-out; !errors.Is(b.err, errRegistryWait) || len(b.recs.Records) != 0 {
			t.Errorf("the batch came with %v and %d records to fold; want errRegistryWait and none", b.err, len(b.recs.Records))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a park request did not end the registry wait of a batch in the decode queue")
	}
}

// BenchmarkDecodeQueue is the poll's side of decoding 512-record loadgen batches: decoding each
// itself (decoders=1), or putting it in the decode queue and taking the oldest back (2 and 4
// helpers). ns/op is per record: with free cores, the time the poll spends per record goes from a
// decode's to a hand-off's.
func BenchmarkDecodeQueue(b *testing.B) {
	payloads := benchPayloads(512, 1000, 10)
	vals := make([]string, len(payloads))
	for i, p := range payloads {
		vals[i] = string(p)
	}
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("decoders=%d", n), func(b *testing.B) {
			decs := n // input.decoders: with helpers, the poll keeps a decoder of its own
			if n > 1 {
				decs++
			}
			s, _ := decodeSession(b, decs, func(p *spec.Plan) format.Decoder { return format.NewJSON(p) })
			batches := make([]*polled, 2*n)
			for i := range batches {
				batches[i] = batchOf(vals...)
			}
			b.ResetTimer()
			for i, k := 0, 0; i < b.N; i, k = i+len(payloads), k+1 {
				batch := batches[k%len(batches)]
				if s.queue == nil {
					if err := s.decode(batch); err != nil {
						b.Fatal(err)
					}
					continue
				}
				if s.queue.full() {
					s.queue.take(true)
				}
				s.queue.put(batch)
			}
			for s.queue != nil && s.queue.take(true) != nil {
			}
		})
	}
}
