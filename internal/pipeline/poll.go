// The poll goroutine: read batches from librdkafka, decode them (or have helpers decode them), hand
// them to the loop.
//
// Invariant: the loop gets the batches in the order they were read, each whole and decoded, and
// before the poll parks for the loop (quiesce) every batch it read is handed over; a batch ending
// in an error is the last.

package pipeline

import (
	"slices"
	"time"

	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/spec"
)

// polled is a batch of records in the order librdkafka delivered them, each decoded, and the error
// that ended it.
type polled struct {
	recs *consumer.Batch
	dec  []decoded // dec[i] is recs.Records[i]
	err  error
	// left is what a decoder left undecoded (from a record the registry could not judge on), for
	// the poll to settle; decoded says a helper is done with the batch (decode.go).
	left    chunk
	decoded chan struct{}
}

// decoded is a record as the decoder left it: its values (pointing into the batch's buffer) or
// why it is bad input.
type decoded struct {
	rec    spec.Record
	reason spec.Reason
	field  string
}

// pollBatches is how many batches exist besides those in the decode queue: the one being read,
// the channel's four, the one being folded (consumer.DefaultBatch each).
const pollBatches = 6

// batches is how many batches a session has, each of which free must take back without blocking
// the loop.
func (s *session) batches() int { return pollBatches + queueDepth(len(s.p.Decoders)-1) }

// poller is the poll goroutine's state.
type poller struct {
	s    *session
	out  chan<- *polled
	free chan *polled
	q    *decodeQueue // nil: the poll decodes itself
	made int          // batches made so far, at most most
	most int
}

// poll runs on its own goroutine: it reads from librdkafka and decodes, while the loop folds, so
// the two use two cores (with input.decoders above 1 helpers decode, and the poll only reads and
// hands the batches over in order: decode.go). It stops with the session; the session closes the
// consumer only after it returned. A batch is what librdkafka has queued once a record arrived:
// only the wait for the first is long. (Waiting until a batch is full held a slow topic's records
// back: at 200 records/s, 256 of them took 1.3 s, unseen by the visibility histogram, which starts
// at the fold.) The loop hands each batch back through free, so reading and decoding allocate
// nothing per record once the batches exist. Decoding is pure: where a record goes, and what a bad
// one does, is the fold's.
func (s *session) poll(out chan<- *polled, free chan *polled) {
	defer s.startDecoders()()
	p := &poller{s: s, out: out, free: free, q: s.queue, most: s.batches()}
	for p.parked() {
		b := p.batch()
		if b == nil || !p.read(b) || !p.pass(b) {
			return
		}
	}
}

// batch returns a batch to read into: one the loop handed back, or a new one while fewer than most
// exist; nil when the session ended.
func (p *poller) batch() *polled {
	select {
	case b := <-p.free:
		return b
	default:
	}
	if p.made < p.most {
		p.made++
		return &polled{recs: consumer.DefaultBatch()}
	}
	select {
	case b := <-p.free:
		return b
	case <-p.s.ctx.Done():
		return nil
	}
}

// read fills b with records or an error; false when the session ended. 100 ms bounds how long the
// poll takes to notice the session ended. With batches in the decode queue the read does not wait:
// they are handed over first.
func (p *poller) read(b *polled) bool {
	for {
		wait := 100 * time.Millisecond
		if p.q != nil && len(p.q.pending) > 0 {
			wait = 0
		}
		b.err = p.s.cons.Read(wait, b.recs)
		if len(b.recs.Records) > 0 || b.err != nil {
			b.dec = slices.Grow(b.dec[:0], len(b.recs.Records))[:len(b.recs.Records)]
			return true
		}
		if wait == 0 {
			if !p.hand(p.q.take(true)) {
				return false
			}
		} else if !p.parked() {
			return false
		}
	}
}

// pass has b decoded and handed over: decoded here with one decoder, or for the batch that ends the
// session (after what was read before it); else put in the decode queue, and whatever the helpers
// finished, in order, handed over. False when the session ended.
func (p *poller) pass(b *polled) bool {
	if p.q == nil || b.err != nil {
		if !p.handAll() {
			return false
		}
		b.left = chunk{b: b, to: len(b.recs.Records)}
		p.s.decodeChunk(p.s.p.Decoders[0], &b.left)
		return p.hand(b)
	}
	if p.q.full() && !p.hand(p.q.take(true)) {
		return false
	}
	p.q.put(b)
	for done := p.q.take(false); done != nil; done = p.q.take(false) {
		if !p.hand(done) {
			return false
		}
	}
	return true
}

// hand gives the loop b, settled (registry.go); false when the session ended or b ended it.
func (p *poller) hand(b *polled) bool {
	if err := p.s.settle(b); err != nil {
		b.err = err
	}
	select {
	case p.out <- b:
	case <-p.s.ctx.Done():
		return false
	}
	return b.err == nil
}

// handAll hands over every batch in the decode queue, waiting for the helpers.
func (p *poller) handAll() bool {
	if p.q == nil {
		return true
	}
	for b := p.q.take(true); b != nil; b = p.q.take(true) {
		if !p.hand(b) {
			return false
		}
	}
	return true
}

// parked waits while the loop moves partitions (quiesce), every batch read handed over first;
// false when the session ended.
func (p *poller) parked() bool {
	s := p.s
	select {
	case resume := <-s.pause:
		if p.q != nil && len(p.q.pending) > 0 {
			// A batch still to hand over may wait for the registry, and that wait must see the
			// request to end (awaitRegistry, which puts it back when it ends otherwise): it goes
			// back into the channel (emptied just now; the loop has one request out at a time).
			s.pause <- resume
			if !p.handAll() {
				return false
			}
			select {
			case resume = <-s.pause:
			case <-s.ctx.Done():
				return false
			}
		}
		select {
		case s.parked <- struct{}{}:
		case <-resume:
			// The loop gave up waiting (it failed folding).
		case <-s.ctx.Done():
			return false
		}
		select {
		case <-resume:
		case <-s.ctx.Done():
			return false
		}
	default:
	}
	return s.ctx.Err() == nil
}
