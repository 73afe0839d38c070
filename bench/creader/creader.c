/*
 * creader: the ceiling relay's throughput is measured against. librdkafka itself, in C, reading
 * every partition of a topic from offset 0 to its end with rd_kafka_consume_batch_queue (up to
 * --batch messages a call, 10 000 by default), touching nothing but each record's length. It is
 * linked against the very librdkafka archive confluent-kafka-go bundles (scripts/bench.sh builds
 * it), so it runs the client relay runs, without Go, cgo or anything of relay.
 *
 *   creader --brokers 127.0.0.1:19092 --topic T [--batch 10000] [-X key=value ...]
 *
 * Without -X it runs librdkafka's defaults (plus a group id and no offset commits, which reading
 * needs); relaybench passes relay's own settings (internal/consumer.ConfigMap) as -X for the other
 * side of the comparison. It prints one JSON object, the same fields as rawconsume: records,
 * seconds (first record to last), rate, startup_secs, process_secs (process start to last record),
 * cpu_secs (user + system of the process, librdkafka's threads included), payload_bytes.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rdkafka.h"

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* threads prints each thread's CPU seconds (name, user + system) to stderr: librdkafka's own
 * threads (rdk:main, rdk:broker…) against the reading thread. */
static void threads(void) {
	char path[64], comm[64];
	long tick = sysconf(_SC_CLK_TCK);
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		unsigned long ut, st;
		if (fscanf(f, "%*d (%63[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", comm, &ut, &st) == 3)
			fprintf(stderr, "creader: thread %s %.3f\n", comm, (double)(ut + st) / tick);
		fclose(f);
	}
	if (d)
		closedir(d);
}

static void die(const char *what, const char *why) {
	fprintf(stderr, "creader: %s: %s\n", what, why);
	exit(1);
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v) {
	char err[512];
	if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK)
		die(k, err);
}

int main(int argc, char **argv) {
	double start = now();
	const char *brokers = "127.0.0.1:19092", *topic = NULL;
	int batch = 10000;
	double limit = 600;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	set(conf, "group.id", "relay-bench-creader");
	set(conf, "enable.auto.commit", "false");
	set(conf, "enable.auto.offset.store", "false");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			die(a, "needs a value");
		i++;
		if (!strcmp(a, "--brokers"))
			brokers = v;
		else if (!strcmp(a, "--topic"))
			topic = v;
		else if (!strcmp(a, "--batch"))
			batch = atoi(v);
		else if (!strcmp(a, "--timeout"))
			limit = atof(v);
		else if (!strcmp(a, "-X")) {
			char *kv = strdup(v), *eq = strchr(kv, '=');
			if (!eq)
				die(v, "want key=value");
			*eq = 0;
			set(conf, kv, eq + 1);
			free(kv);
		} else
			die(a, "unknown flag (--brokers, --topic, --batch, --timeout, -X key=value)");
	}
	if (!topic || batch < 1)
		die("usage", "creader --brokers B --topic T [--batch N] [--timeout S] [-X key=value ...]");
	set(conf, "bootstrap.servers", brokers);

	char err[512];
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
	if (!rk)
		die("rd_kafka_new", err);
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
	if (e)
		die("metadata", rd_kafka_err2str(e));
	if (md->topic_cnt != 1 || md->topics[0].err)
		die(topic, "no such topic");
	int nparts = md->topics[0].partition_cnt, left = 0;
	int64_t *end = calloc(nparts, sizeof *end);
	rd_kafka_topic_partition_list_t *tps = rd_kafka_topic_partition_list_new(nparts);
	for (int i = 0; i < nparts; i++) {
		int32_t p = md->topics[0].partitions[i].id;
		int64_t lo, hi;
		if (p >= nparts)
			die(topic, "partition ids are not 0..n-1");
		if ((e = rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 10000)))
			die("watermarks", rd_kafka_err2str(e));
		end[p] = hi;
		if (hi > 0) {
			rd_kafka_topic_partition_list_add(tps, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
			left++;
		}
	}
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	if (!left)
		die(topic, "is empty");
	if ((e = rd_kafka_assign(rk, tps)))
		die("assign", rd_kafka_err2str(e));
	rd_kafka_topic_partition_list_destroy(tps);
	rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);

	rd_kafka_message_t **msgs = malloc(batch * sizeof *msgs);
	long long records = 0, bytes = 0;
	double first = 0, last = 0, deadline = start + limit;
	while (left > 0) {
		ssize_t n = rd_kafka_consume_batch_queue(q, 100, msgs, batch);
		if (n < 0)
			die("consume", rd_kafka_err2str(rd_kafka_last_error()));
		for (ssize_t i = 0; i < n; i++) {
			rd_kafka_message_t *m = msgs[i];
			if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
				if (!records)
					first = now();
				records++;
				bytes += m->len;
				if (m->offset + 1 == end[m->partition]) {
					left--;
					last = now();
				}
			} else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
				fprintf(stderr, "creader: %s\n", rd_kafka_message_errstr(m));
			}
			rd_kafka_message_destroy(m);
		}
		if (n == 0 && now() > deadline)
			die("timeout", "the topic's end was not reached");
	}
	double cpu = cpu_seconds();
	threads();
	printf("{\"records\":%lld,\"seconds\":%.6f,\"rate\":%.1f,\"startup_secs\":%.6f,\"process_secs\":%.6f,"
	       "\"cpu_secs\":%.3f,\"payload_bytes\":%lld}\n",
	       records, last - first, records / (last - first), first - start, last - start, cpu, bytes);
	fflush(stdout);
	/* Closing a consumer can take a broker round trip: the time was taken; the OS frees the rest. */
	_exit(0);
}
