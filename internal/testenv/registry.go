// The Schema Registry of the input formats' tests. Invariant: like Kafka and MySQL, a test that
// needs it skips without it only outside make test; under RELAY_TEST_REQUIRE=1 (scripts/test.sh,
// which starts it) it fails, so a suite never passes by skipping its registry tests.

package testenv

import "testing"

// Registry returns the base URL of the Schema Registry's Confluent API (scripts/registry.sh start
// prints it as RELAY_TEST_REGISTRY).
func Registry(t testing.TB) string { return need(t, "RELAY_TEST_REGISTRY") }
