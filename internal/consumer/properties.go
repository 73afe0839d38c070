package consumer

// CheckProperties asks the linked librdkafka itself whether it knows each user property, with
// rd_kafka_conf_set on a configuration object that is destroyed right after: no client handle, no
// thread, no socket. A handle (kafka.NewConsumer) would do the same check but, once the keys pass,
// starts librdkafka's threads and with SASL GSSAPI or OIDC runs kinit or fetches a token; a
// static list of property names would drift from the library actually linked. confluent-kafka-go
// does not export the conf calls, so the prototypes of librdkafka's public, stable conf API are
// declared here; the symbols come from the librdkafka the kafka package links (bundled or
// -tags dynamic).

/*
#include <stdlib.h>
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef enum { RELAY_CONF_UNKNOWN = -2, RELAY_CONF_INVALID = -1, RELAY_CONF_OK = 0 } relay_conf_res_t;
rd_kafka_conf_t *rd_kafka_conf_new(void);
relay_conf_res_t rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr, size_t errstr_size);
void rd_kafka_conf_destroy(rd_kafka_conf_t *conf);
*/
import "C"

import (
	"fmt"
	"sort"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// reserved are the properties ConfigMap sets after the user's, with where relay takes them from
// (empty: fixed, exactly-once or the consume loop depends on the value).
var reserved = map[string]string{
	"bootstrap.servers":        "kafka.brokers",
	"group.id":                 "kafka.group_id",
	"auto.offset.reset":        "kafka.start_offset",
	"enable.auto.commit":       "",
	"enable.auto.offset.store": "",
	"isolation.level":          "",
	"enable.partition.eof":     "",
}

// CheckProperties refuses a property relay sets itself and one librdkafka does not accept. Errors
// name the key, never the value: values include sasl.password.
func CheckProperties(props map[string]string) error {
	keys := make([]string, 0, len(props))
	for k := range props {
		if from, ok := reserved[k]; ok {
			if from != "" {
				return fmt.Errorf("%q is set by relay itself, from %s", k, from)
			}
			return fmt.Errorf("%q is set by relay itself (exactly-once depends on it)", k)
		}
		keys = append(keys, k)
	}
	// Plugins define properties of their own, so they load first, as in confluent-kafka-go.
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "plugin.library.paths") != (keys[j] == "plugin.library.paths") {
			return keys[i] == "plugin.library.paths"
		}
		return keys[i] < keys[j]
	})
	conf := C.rd_kafka_conf_new()
	defer C.rd_kafka_conf_destroy(conf)
	errstr := (*C.char)(C.malloc(512))
	defer C.free(unsafe.Pointer(errstr))
	_, version := kafka.LibraryVersion()
	for _, k := range keys {
		ck, cv := C.CString(k), C.CString(props[k])
		res := C.rd_kafka_conf_set(conf, ck, cv, errstr, 512)
		C.free(unsafe.Pointer(ck))
		C.free(unsafe.Pointer(cv))
		// librdkafka's own message quotes the value ("Invalid value ... for ..."), so it is not passed on.
		switch res {
		case C.RELAY_CONF_OK:
		case C.RELAY_CONF_UNKNOWN:
			return fmt.Errorf("%q is not a librdkafka %s property", k, version)
		default:
			return fmt.Errorf("%q: librdkafka %s refuses its value (not shown; see librdkafka's CONFIGURATION.md for what it takes)", k, version)
		}
	}
	return nil
}
