package ops

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
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

// Status calls an instance running only on /readyz's 200; 503, no answer and an instance whose
// address nobody knows are said as such.
func TestAskReadiness(t *testing.T) {
	code := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte("recovery has not finished\n"))
	}))
	defer srv.Close()
	ctx := context.Background()
	check := func(f InstanceFence, want string) {
		t.Helper()
		askReadiness(ctx, &f)
		if got := f.runState(); !strings.HasPrefix(got, want) {
			t.Errorf("held %v, instance %s, %s: %q, want %q...", f.Held, f.Instance, f.ReadyzURL, got, want)
		}
	}
	check(InstanceFence{Instance: "job", Held: true, ReadyzURL: srv.URL}, "NOT READY (recovery has not finished)")
	code = http.StatusOK
	check(InstanceFence{Instance: "job", Held: true, ReadyzURL: srv.URL}, "running, ready")
	check(InstanceFence{Instance: "job", ReadyzURL: srv.URL}, "not running")
	check(InstanceFence{Instance: "job/1", Held: true}, "fence held, readiness unknown (not asked")
	srv.Close()
	check(InstanceFence{Instance: "job", Held: true, ReadyzURL: srv.URL}, "fence held, readiness unknown (no answer")
}

// A relay records where it answers /readyz: a wildcard bind by its host's name, which status on
// that same host asks on loopback.
func TestAdvertisedReadyz(t *testing.T) {
	for addr, want := range map[string]string{
		"[::]:8080":      "http://relay-0.relay:8080/readyz",
		"0.0.0.0:9000":   "http://relay-0.relay:9000/readyz",
		"10.1.2.3:8080":  "http://10.1.2.3:8080/readyz",
		"127.0.0.1:4242": "http://127.0.0.1:4242/readyz",
		"no-port":        "",
	} {
		if got := AdvertisedReadyz(addr, "relay-0.relay"); got != want {
			t.Errorf("AdvertisedReadyz(%q) = %q, want %q", addr, got, want)
		}
	}
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	if got := localReadyz(AdvertisedReadyz("[::]:8080", host)); got != "http://127.0.0.1:8080/readyz" {
		t.Errorf("this host's own URL is asked at %q, want loopback", got)
	}
	if got := localReadyz("http://elsewhere.example:8080/readyz"); got != "http://elsewhere.example:8080/readyz" {
		t.Errorf("another host's URL is asked at %q", got)
	}
}
