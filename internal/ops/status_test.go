package ops

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReadyzURL(t *testing.T) {
	for addr, want := range map[string]string{
		":8080":          "http://127.0.0.1:8080/readyz",
		"0.0.0.0:8080":   "http://127.0.0.1:8080/readyz",
		"[::]:8080":      "http://127.0.0.1:8080/readyz",
		"10.1.2.3:9000":  "http://10.1.2.3:9000/readyz",
		"127.0.0.1:0":    "",
		"no-port-here":   "",
		"relay-0.relay:": "",
	} {
		if got := ReadyzURL(addr); got != want {
			t.Errorf("ReadyzURL(%q) = %q, want %q", addr, got, want)
		}
	}
}

// Status calls an instance running only on /readyz's 200; 503, no answer and instances it cannot
// ask are said as such.
func TestAskReadiness(t *testing.T) {
	code := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte("recovery has not finished\n"))
	}))
	defer srv.Close()
	ctx := context.Background()
	check := func(f InstanceFence, url, want string) {
		t.Helper()
		askReadiness(ctx, &f, "job", url)
		if got := f.runState(); !strings.HasPrefix(got, want) {
			t.Errorf("held %v, instance %s, %s: %q, want %q...", f.Held, f.Instance, url, got, want)
		}
	}
	check(InstanceFence{Instance: "job", Held: true}, srv.URL, "NOT READY (recovery has not finished)")
	code = http.StatusOK
	check(InstanceFence{Instance: "job", Held: true}, srv.URL, "running, ready")
	check(InstanceFence{Instance: "job"}, srv.URL, "not running")
	check(InstanceFence{Instance: "job/1", Held: true}, srv.URL, "fence held, readiness unknown (not asked")
	check(InstanceFence{Instance: "job", Held: true}, "", "fence held, readiness unknown (not asked")
	srv.Close()
	check(InstanceFence{Instance: "job", Held: true}, srv.URL, "fence held, readiness unknown (no answer")
}
