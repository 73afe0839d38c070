// Decoding on several goroutines (input.decoders above 1).
//
// Invariant: the poll hands the loop the batches it read in the order it read them, each only once
// every record of it is decoded, so the loop folds what one decoder would have given it. Helpers
// only decode: a record the registry could not judge stops a helper's batch, and the poll takes
// the batch up from there (settle, registry.go), so waiting out the registry, and with it every
// answer to the loop's park requests, stays on the poll goroutine; before it parks, every batch it
// read is decoded and handed over.

package pipeline

import "github.com/relay-sh/relay/internal/format"

// decodeQueue hands whole batches to helper goroutines, one decoder each, and gives them back in
// the order they were put. A batch per helper more than helpers waits in the queue, so a helper
// that finished one finds the next without a wake-up, which costs as much as decoding a batch on
// some machines (a virtual CPU leaving its idle state).
type decodeQueue struct {
	work    chan *polled
	pending []*polled // put and not yet taken, in order
}

// queueDepth is how many batches the queue of that many helpers holds at most.
func queueDepth(helpers int) int { return 2 * helpers }

// depth is how many batches the queue holds at most.
func (q *decodeQueue) depth() int { return cap(q.work) }

// startDecoders starts a helper goroutine for each decoder past the poll's own (with that one
// alone, the poll decodes itself: no hand-off); stop ends them. The poll calls stop as it returns,
// when no helper holds a batch it will still wait for.
func (s *session) startDecoders() (stop func()) {
	helpers := s.p.Decoders[1:]
	if len(helpers) == 0 {
		return func() {}
	}
	s.queue = &decodeQueue{work: make(chan *polled, queueDepth(len(helpers)))}
	for _, dec := range helpers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for b := range s.queue.work {
				b.left = chunk{b: b, to: len(b.recs.Records), helper: true}
				s.decodeChunk(dec, &b.left)
				b.decoded <- struct{}{}
			}
		}()
	}
	return func() { close(s.queue.work) }
}

// put gives b to the helpers; the caller made room (full is false).
func (q *decodeQueue) put(b *polled) {
	if b.decoded == nil {
		b.decoded = make(chan struct{}, 1)
	}
	q.pending = append(q.pending, b)
	q.work <- b
}

func (q *decodeQueue) full() bool { return len(q.pending) == q.depth() }

// take returns the oldest batch put, once a helper decoded it; with wait false, nil if it is not
// decoded yet (or nothing is pending).
func (q *decodeQueue) take(wait bool) *polled {
	if len(q.pending) == 0 {
		return nil
	}
	b := q.pending[0]
	if wait {
		<-b.decoded
	} else {
		select {
		case <-b.decoded:
		default:
			return nil
		}
	}
	q.pending[0] = nil
	q.pending = q.pending[1:]
	return b
}

// chunk is a run of a batch's records for one decoder, [from, to). Decoding stops at the first
// record its decoder could not judge: at is that record and err the decoder's error (at is to and
// err nil once every record is decoded).
type chunk struct {
	b        *polled
	from, to int
	at       int
	err      error
	helper   bool // decoded by a helper, maybe a while before the poll settles it
}

// decodeChunk decodes c's records with dec, up to the first it could not judge.
func (s *session) decodeChunk(dec format.Decoder, c *chunk) {
	recs := c.b.recs.Records
	for i := c.from; i < c.to; i++ {
		d := &c.b.dec[i]
		var err error
		if d.reason, d.field, err = dec.Decode(s.ctx, recs[i].Value, &d.rec); err != nil {
			c.at, c.err = i, err
			return
		}
	}
	c.at, c.err = c.to, nil
}
