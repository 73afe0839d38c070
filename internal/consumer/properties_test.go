package consumer

import (
	"strings"
	"testing"
)

// librdkafka itself judges the keys and values; the error names the key and never the value.
func TestCheckProperties(t *testing.T) {
	ok := map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "relay",
		"sasl.password": "3xtra,S3cret", "ssl.endpoint.identification.algorithm": "https",
		"fetch.queue.backoff.ms": "50", "message.timeout.ms": "1000"} // the last one is a topic-level property
	if err := CheckProperties(ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		props map[string]string
		says  string
	}{
		{map[string]string{"sasl.pasword": "3xtra-S3cret"}, `"sasl.pasword" is not a librdkafka`},
		{map[string]string{"security.protocol": "3xtra-S3cret"}, `"security.protocol": librdkafka`},
		{map[string]string{"fetch.wait.max.ms": "9999999"}, `"fetch.wait.max.ms": librdkafka`},
		{map[string]string{"go.events.channel.enable": "true"}, "not a librdkafka"},
		{map[string]string{"group.id": "other"}, "from kafka.group_id"},
		{map[string]string{"enable.partition.eof": "true"}, "set by relay itself"},
	} {
		err := CheckProperties(tc.props)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: got %v, want %q", tc.props, err, tc.says)
			continue
		}
		for _, v := range tc.props {
			if strings.Contains(err.Error(), v) {
				t.Errorf("%v: error %q shows the value", tc.props, err)
			}
		}
	}
}

// The reserved list is exactly the set of keys ConfigMap overrides whatever the user says.
func TestReservedAreTheForcedKeys(t *testing.T) {
	for k := range *ConfigMap(Options{}) {
		cm := *ConfigMap(Options{Properties: map[string]string{k: "user"}})
		_, isReserved := reserved[k]
		if forced := cm[k] != "user"; forced != isReserved {
			t.Errorf("%s: forced by ConfigMap %v, reserved %v", k, forced, isReserved)
		}
	}
	for k := range reserved {
		if _, set := (*ConfigMap(Options{}))[k]; !set {
			t.Errorf("%s is reserved but ConfigMap does not set it", k)
		}
	}
}
