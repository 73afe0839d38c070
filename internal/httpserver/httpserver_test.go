package httpserver

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// /readyz reports the probe's verdict and reason; /debug/pprof exists only when asked for.
func TestEndpoints(t *testing.T) {
	for _, pprof := range []bool{false, true} {
		var ready atomic.Bool
		s, err := Listen("127.0.0.1:0", prometheus.NewRegistry(), func() (bool, string) {
			if ready.Load() {
				return true, "ok"
			}
			return false, "recovery has not finished"
		}, pprof, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx) }()
		get := func(path string) (int, string) {
			r, err := http.Get("http://" + s.Addr() + path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			b, _ := io.ReadAll(r.Body)
			return r.StatusCode, string(b)
		}
		if code, body := get("/readyz"); code != 503 || body != "recovery has not finished\n" {
			t.Fatalf("readyz before: %d %q", code, body)
		}
		ready.Store(true)
		if code, _ := get("/readyz"); code != 200 {
			t.Fatalf("readyz after: %d", code)
		}
		if code, _ := get("/healthz"); code != 200 {
			t.Fatalf("healthz: %d", code)
		}
		if code, _ := get("/debug/pprof/"); (code == 200) != pprof {
			t.Fatalf("pprof=%v: /debug/pprof/ answered %d", pprof, code)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
