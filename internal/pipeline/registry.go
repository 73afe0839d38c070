// Waiting out the schema registry while the poll decodes (a registry format: input.format avro or
// json_schema).
//
// Invariant: a record whose writer schema the registry could not give (format.ErrUnavailable: down,
// slow, 5xx) is decoded again, after a jittered back-off bounded by registryPolicy.Max, for as long
// as it takes, and never skipped or dead-lettered for it: nothing past it is folded meanwhile (the
// poll reads nothing more; with helpers, the batches in the decode queue were read already).
// The wait ends only with a verdict, with the session, or when the loop asks the poll to park
// (quiesce, to move partitions): then the batch is handed over with errRegistryWait and the session
// restarts from the last decision, since a batch held across a move could carry records of a
// partition this session no longer reads.

package pipeline

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/spec"
)

// registryPolicy spaces the asks while the registry does not answer: a registry back from a
// restart is noticed within about 5 s, and a fleet of relays does not knock in lockstep.
var registryPolicy = fault.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Sleep: fault.SleepContext}

// errRegistryWait ends a session whose poll was waiting for the registry when the loop needed it
// parked.
var errRegistryWait = fault.Classed("schema_registry", "partitions moved while a record waited for the schema registry")

// settle decodes what a decoder left of b (b.left: from the record it could not judge on),
// waiting out the registry for each such record. A non-nil error ends the batch (and the session):
// the session ended, or the loop asked the poll to park meanwhile.
func (s *session) settle(b *polled) error {
	c := &b.left
	for c.err != nil {
		d := &b.dec[c.at]
		v := b.recs.Records[c.at].Value
		err := c.err
		if c.helper && errors.Is(err, format.ErrUnavailable) {
			// A helper's ask may be old news (the registry may have answered while earlier batches
			// were settled): counted, and asked again at once rather than after a back-off.
			s.p.Metrics.RegistryUnavailable.Inc()
			d.reason, d.field, err = s.p.Decoders[0].Decode(s.ctx, v, &d.rec)
		}
		if err != nil {
			if d.reason, d.field, err = s.awaitRegistry(v, &d.rec, err); err != nil {
				// Nothing of the batch is folded: the session ends and rewinds to its last decision.
				b.recs.Records = b.recs.Records[:0]
				return err
			}
		}
		c.from, c.helper = c.at+1, false
		s.decodeChunk(s.p.Decoders[0], c)
	}
	return nil
}

// awaitRegistry decodes value again until the registry lets it be judged, counting each ask that
// found it unavailable (relay_schema_registry_unavailable_total) and showing the wait
// (relay_schema_registry_waiting). first is the error of the first ask.
func (s *session) awaitRegistry(value []byte, rec *spec.Record, first error) (spec.Reason, string, error) {
	p := s.p
	if !errors.Is(first, format.ErrUnavailable) {
		return 0, "", first // the session's end
	}
	p.Metrics.RegistryWaiting.Set(1)
	defer p.Metrics.RegistryWaiting.Set(0)
	// A park requested meanwhile cancels the wait; the request is taken from the channel to see
	// it, so a wait that ended otherwise puts it back for the poll's next look.
	wctx, cancel := context.WithCancelCause(s.ctx)
	taken := make(chan chan struct{}, 1)
	go func() {
		select {
		case r := <-s.pause:
			taken <- r
			cancel(errRegistryWait)
		case <-wctx.Done():
		}
		close(taken)
	}()
	start := time.Now()
	var reason spec.Reason
	var field string
	p.Metrics.RegistryUnavailable.Inc()
	err := first
	asks := 1
	for {
		wait := p.registryPolicy.Backoff(asks)
		p.Log.Warn("waiting for the schema registry (the record is not bad input: it is decoded again)",
			zap.Int("asks", asks), zap.Duration("waited", time.Since(start).Round(time.Millisecond)),
			zap.Duration("backoff", wait), zap.Error(err))
		if err = p.registryPolicy.Sleep(wctx, wait); err != nil {
			break
		}
		asks++
		if reason, field, err = p.Decoders[0].Decode(wctx, value, rec); !errors.Is(err, format.ErrUnavailable) {
			break
		}
		p.Metrics.RegistryUnavailable.Inc()
	}
	cancel(nil)
	if r, ok := <-taken; ok {
		if err == nil {
			s.pause <- r // the poll parks at its next look
		} else {
			err = errRegistryWait
		}
	}
	if err != nil {
		return 0, "", err
	}
	p.Log.Info("the schema registry answers", zap.Int("asks", asks), zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
	return reason, field, nil
}
