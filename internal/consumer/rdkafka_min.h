/*
 * The part of librdkafka's public API (rdkafka.h, BSD-2-Clause, (c) Magnus Edenhill, Confluent
 * Inc.) that read.go calls, declared here because cgo cannot include the header bundled inside the
 * confluent-kafka-go module. The functions are linked from the librdkafka that module bundles.
 * TestRdkafkaDeclarations compiles the real header and checks every layout and constant below
 * against it, and the prototypes against its own (RELAY_RDKAFKA_PROTOTYPES_ONLY, after rdkafka.h).
 */
#ifndef RELAY_RDKAFKA_MIN_H
#define RELAY_RDKAFKA_MIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef RELAY_RDKAFKA_PROTOTYPES_ONLY
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef int rd_kafka_resp_err_t; /* an enum in rdkafka.h: the same size and values */
typedef int rd_kafka_timestamp_type_t; /* an enum in rdkafka.h */

typedef struct rd_kafka_message_s {
	rd_kafka_resp_err_t err;
	rd_kafka_topic_t *rkt;
	int32_t partition;
	void *payload;
	size_t len;
	void *key;
	size_t key_len;
	int64_t offset;
	void *_private;
} rd_kafka_message_t;

#define RD_KAFKA_RESP_ERR__PARTITION_EOF (-191)
#define RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC (-188)
#endif

ssize_t rd_kafka_consume_batch_queue(rd_kafka_queue_t *rkqu, int timeout_ms, rd_kafka_message_t **rkmessages, size_t rkmessages_size);
void rd_kafka_queue_yield(rd_kafka_queue_t *rkqu);
void rd_kafka_message_destroy(rd_kafka_message_t *rkmessage);
rd_kafka_resp_err_t rd_kafka_fatal_error(rd_kafka_t *rk, char *errstr, size_t errstr_size);
const char *rd_kafka_message_errstr(const rd_kafka_message_t *rkmessage);
int64_t rd_kafka_message_timestamp(const rd_kafka_message_t *rkmessage, rd_kafka_timestamp_type_t *tstype);
const char *rd_kafka_topic_name(const rd_kafka_topic_t *rkt);

#endif
