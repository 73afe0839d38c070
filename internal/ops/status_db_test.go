package ops

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// readyzServer answers /readyz with 200 and body.
func readyzServer(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	t.Cleanup(srv.Close)
	return srv.URL + "/readyz"
}

// Status asks the /readyz the current owner epoch recorded with its lease, not the configuration's
// http_addr: after another process took the fence, it is that process that is asked. It shows the
// lease on the server's clock.
func TestStatusAsksTheCurrentOwner(t *testing.T) {
	e, ctx := newEnv(t, 1)
	e.Config.HTTPAddr = "127.0.0.1:1" // what status asked before: nobody answers there
	a, b := readyzServer(t, "ready A"), readyzServer(t, "ready B")
	fa, err := ledger.Acquire(ctx, e.Ledger, ledger.FenceConfig{Owner: "host-a pid 1", Readyz: a})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Status(ctx, e, "")
	if err != nil {
		t.Fatal(err)
	}
	f := r.Fences[0]
	if !f.Held || f.ReadyzURL != a || f.Ready == nil || !*f.Ready || f.Readiness != "ready A" {
		t.Fatalf("owner A: held %v, asked %q, ready %v %q; want A's /readyz %s, ready", f.Held, f.ReadyzURL, f.Ready, f.Readiness, a)
	}
	if f.LeaseUntil == nil || f.LeaseExpired == nil || *f.LeaseExpired || *f.LeaseRemainingSeconds <= 0 ||
		!f.LeaseUntil.After(r.ServerTime) || *f.LeaseRemainingSeconds > ledger.DefaultLease.Seconds() {
		t.Fatalf("owner A's lease: until %v, remaining %v, expired %v (server time %v)", f.LeaseUntil, f.LeaseRemainingSeconds, f.LeaseExpired, r.ServerTime)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"running, ready", "renewed, runs", "readiness asked at", a} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, text.String())
		}
	}
	fa.Release()
	if r, err = Status(ctx, e, ""); err != nil {
		t.Fatal(err)
	}
	if f = r.Fences[0]; f.Held || f.LeaseUntil != nil || f.LeaseExpired != nil || f.ReadyzURL != "" || f.Readiness != "not running" {
		t.Fatalf("released fence: held %v, lease until %v expired %v, asked %q, %q; want no lease, not asked", f.Held, f.LeaseUntil, f.LeaseExpired, f.ReadyzURL, f.Readiness)
	}
	fb, err := ledger.Acquire(ctx, e.Ledger, ledger.FenceConfig{Owner: "host-b pid 2", Readyz: b})
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Release()
	if r, err = Status(ctx, e, ""); err != nil {
		t.Fatal(err)
	}
	f = r.Fences[0]
	if f.OwnerEpoch != fb.Epoch() || f.ReadyzURL != b || f.Readiness != "ready B" {
		t.Fatalf("owner B (epoch %d): epoch %d, asked %q, readiness %q; want B's /readyz %s", fb.Epoch(), f.OwnerEpoch, f.ReadyzURL, f.Readiness, b)
	}
	// --readyz still overrides what the owner recorded.
	if r, err = Status(ctx, e, a); err != nil || r.Fences[0].Readiness != "ready A" {
		t.Fatalf("--readyz %s: %+v, %v", a, r.Fences[0], err)
	}
}

// Every checkpoint status shows was decided before its server_time, so no age is negative, even
// while checkpoints are decided as fast as the ledger takes them.
func TestStatusAgesWhileDeciding(t *testing.T) {
	e, ctx := newEnv(t, 1)
	topic := e.Config.Kafka.Topics[0]
	f, err := ledger.Acquire(ctx, e.Ledger, ledger.FenceConfig{Owner: "test owner"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := int64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.Ledger.Decide(ctx, f.Epoch(), nil, ledger.Checkpoint{ID: id, Offsets: partition.Offsets{topic: {0: 0}}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for deadline, n := time.Now().Add(20*time.Second), 0; n < 30 && time.Now().Before(deadline); n++ {
		r, err := Status(ctx, e, "")
		if err != nil {
			t.Fatal(err)
		}
		c := r.LastCheckpoint
		if c == nil {
			continue
		}
		if c.DecidedAt.After(r.ServerTime) || c.AgeSeconds < 0 {
			t.Fatalf("checkpoint %d decided at %s, after the report's server time %s (age %.6fs)",
				c.ID, c.DecidedAt.Format(time.RFC3339Nano), r.ServerTime.Format(time.RFC3339Nano), c.AgeSeconds)
		}
	}
}
