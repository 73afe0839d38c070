package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/spec"
)

// flaky is a decoder whose registry is unavailable for its first down asks, then judges every
// record by the JSON decoder.
type flaky struct {
	json *format.JSON
	down int
	asks int
}

func (f *flaky) Decode(ctx context.Context, payload []byte, rec *spec.Record) (spec.Reason, string, error) {
	if err := ctx.Err(); err != nil {
		return 0, "", err
	}
	if f.asks++; f.asks <= f.down {
		return 0, "", fmt.Errorf("%w: schema id 7: 503 Service Unavailable", format.ErrUnavailable)
	}
	return f.json.Decode(ctx, payload, rec)
}

// registrySession is a session of a pipeline decoding with dec, whose back-off sleeps are
// recorded instead of slept.
func registrySession(t testing.TB, dec func(*spec.Plan) format.Decoder) (*session, *[]time.Duration) {
	t.Helper()
	return decodeSession(t, 1, dec)
}

// decodeSession is a session of a pipeline decoding with n decoders made by dec (the poll's and
// n-1 helpers'), helpers started, whose back-off sleeps are recorded instead of slept.
func decodeSession(t testing.TB, n int, dec func(*spec.Plan) format.Decoder) (*session, *[]time.Duration) {
	t.Helper()
	cfg := config.Default()
	cfg.Job.Name = "j"
	plan, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	decs := make([]format.Decoder, n)
	for i := range decs {
		decs[i] = dec(plan)
	}
	p := New(Deps{Config: cfg, Plan: plan, Decoders: decs, Log: zap.NewNop(), Metrics: metrics.New("j")})
	var slept []time.Duration
	p.registryPolicy.Sleep = func(ctx context.Context, d time.Duration) error {
		slept = append(slept, d)
		return ctx.Err()
	}
	s := &session{p: p, pause: make(chan chan struct{}, 1), parked: make(chan struct{})}
	var cancel context.CancelCauseFunc
	s.ctx, cancel = context.WithCancelCause(context.Background())
	stop := s.startDecoders()
	t.Cleanup(func() {
		stop()
		cancel(nil)
		s.wg.Wait()
	})
	return s, &slept
}

// decode decodes every record of b on the poll goroutine, as the poll does with one decoder.
func (s *session) decode(b *polled) error {
	b.left = chunk{b: b, to: len(b.recs.Records)}
	s.decodeChunk(s.p.Decoders[0], &b.left)
	return s.settle(b)
}

func batchOf(values ...string) *polled {
	b := &polled{recs: &consumer.Batch{}}
	for i, v := range values {
		b.recs.Records = append(b.recs.Records, consumer.Record{Topic: "t", Offset: int64(i), Value: []byte(v)})
	}
	b.dec = make([]decoded, len(values))
	return b
}

func value(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}

// A registry down for four asks: the record waits (backing off, within the policy's bound), each
// failed ask is counted, and the record is then judged as if nothing happened: the good one OK,
// the bad one by its own reason, never dead-lettered for the registry.
func TestRegistryWaitJudgesTheRecord(t *testing.T) {
	f := &flaky{down: 4}
	s, slept := registrySession(t, func(p *spec.Plan) format.Decoder { f.json = format.NewJSON(p); return f })
	good := `{"order_id":"o1","sku":"s","amount":"1.5","ts":1700000000000}`
	b := batchOf(good, `{"order_id":"o2","sku":"s","amount":"x","ts":1700000000000}`)
	if err := s.decode(b); err != nil {
		t.Fatal(err)
	}
	if b.dec[0].reason != spec.OK || b.dec[1].reason.String() != "bad_amount" {
		t.Errorf("verdicts %s, %s; want ok, bad_amount", b.dec[0].reason, b.dec[1].reason)
	}
	if len(*slept) != 4 {
		t.Errorf("%d back-offs, want 4 (one per failed ask)", len(*slept))
	}
	for _, d := range *slept {
		if d <= 0 || d > registryPolicy.Max {
			t.Errorf("back-off %s outside (0, %s]", d, registryPolicy.Max)
		}
	}
	if n := value(t, s.p.Metrics.RegistryUnavailable); n != 4 {
		t.Errorf("relay_schema_registry_unavailable_total %v, want 4", n)
	}
	if n := value(t, s.p.Metrics.RegistryWaiting); n != 0 {
		t.Errorf("relay_schema_registry_waiting %v after the wait, want 0", n)
	}
}

// The wait ends with the session, and when the loop asks the poll to park: then nothing of the
// batch is folded and the session ends (errRegistryWait), since the batch could hold records of
// partitions about to move.
func TestRegistryWaitEnds(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("decoders=%d", n), func(t *testing.T) {
			reg := &shared{down: 1 << 30}
			s, _ := decodeSession(t, n, func(p *spec.Plan) format.Decoder { return &sharedFlaky{json: format.NewJSON(p), reg: reg} })
			s.p.registryPolicy.Sleep = func(ctx context.Context, d time.Duration) error {
				<-ctx.Done()
				return ctx.Err()
			}
			b := batchOf(mixed(300)...)
			done := make(chan error, 1)
			if s.queue == nil {
				go func() { done <- s.decode(b) }()
			} else {
				// A helper left the batch at its first record: the poll settles it.
				s.queue.put(b)
				go func() { done <- s.settle(s.queue.take(true)) }()
			}
			s.pause <- make(chan struct{})
			select {
			case err := <-done:
				if !errors.Is(err, errRegistryWait) || len(b.recs.Records) != 0 {
					t.Errorf("a park requested while waiting: %v, %d records left to fold; want errRegistryWait, none", err, len(b.recs.Records))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the wait did not end when the loop asked the poll to park")
			}
		})
	}
}
