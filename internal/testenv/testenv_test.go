package testenv

import "testing"

// The fast tier: under -short a test of a real server skips even where the services are named.
func TestShortSkipsServerTests(t *testing.T) {
	if !testing.Short() {
		t.Skip("checks the fast tier: runs under -short (make test-unit)")
	}
	t.Setenv("RELAY_TEST_KAFKA", "127.0.0.1:1")
	t.Setenv("RELAY_TEST_MYSQL_DSN", "relay:relay@tcp(127.0.0.1:1)/relay")
	for name, ask := range map[string]func(testing.TB) string{"Brokers": Brokers, "AdminDSN": AdminDSN} {
		t.Run(name, func(t *testing.T) {
			ask(t)
			t.Errorf("%s returned under -short: the fast tier would run a test against a real server", name)
		})
	}
}
