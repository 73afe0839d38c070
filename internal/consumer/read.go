// Reading records in batches: one cgo call takes what librdkafka has queued (up to a batch) with
// rd_kafka_consume_batch_queue, copies each record's value into the batch's Go buffer and destroys
// the message inside C.
//
// Invariant: a record is delivered as confluent-kafka-go's Poll delivers it, from the same queue in
// the same order, and the application position moves past it (librdkafka's batch call moves it
// once per partition per call, not once per record under the partition's lock, and reads the
// clock once per call, not twice per record: together half of the per-record cost of
// rd_kafka_queue_poll; see docs/BENCHMARKS.md). Consumer errors (offset out of range, a partition's
// fetch error) arrive in order among the records, as Poll's error events do. A client-wide error
// that is not a consumer's (a broker down) is served by librdkafka as a log line, which relay logs;
// a fatal one is read from rd_kafka_fatal_error at each read. Nothing C owns outlives a Read,
// except the messages held back when the buffer is full, which Close destroys.

package consumer

/*
#include <stdlib.h>
#include <string.h>
#include "rdkafka_min.h"

// relay_reader is the C side of a Reader: the client and its consumer queue, the topics by index
// (the last one looked up kept by handle), and the messages taken from librdkafka but not yet
// returned, held[next..n), in the order librdkafka gave them.
typedef struct {
	rd_kafka_t *rk;
	rd_kafka_queue_t *q;
	int ntopics;
	char **topics;
	const rd_kafka_topic_t *last_rkt;
	int last_topic;
	rd_kafka_message_t **held;
	int next, n, cap;
} relay_reader;

// relay_rec is one record of a batch, or the error that ended it.
enum { RELAY_RECORD, RELAY_ERROR_EVENT, RELAY_RECORD_ERROR };
typedef struct {
	int32_t kind;
	int32_t topic;     // index into relay_reader.topics; -1: not one of them (its name is the text)
	int32_t partition;
	int32_t err;       // rd_kafka_resp_err_t of an error
	int64_t offset;
	int64_t ts;        // milliseconds since the epoch, -1 without a timestamp
	int32_t fatal;
	uint32_t at, len;  // the value (or the error text) in the batch buffer
} relay_rec;

static int relay_topic(relay_reader *r, const rd_kafka_topic_t *rkt) {
	if (rkt && rkt == r->last_rkt)
		return r->last_topic;
	const char *name = rkt ? rd_kafka_topic_name(rkt) : "";
	for (int i = 0; i < r->ntopics; i++)
		if (strcmp(r->topics[i], name) == 0) {
			r->last_rkt = rkt;
			r->last_topic = i;
			return i;
		}
	return -1;
}

// relay_put copies n bytes to the buffer; 0 when they do not fit.
static int relay_put(char *buf, size_t cap, size_t *used, const void *p, size_t n, relay_rec *rec) {
	if (*used + n > cap)
		return 0;
	if (n > 0)
		memcpy(buf + *used, p, n);
	rec->at = (uint32_t)*used;
	rec->len = (uint32_t)n;
	*used += n;
	return 1;
}

// relay_fatal ends a batch with the client's fatal error as its last rec, if it has one.
static int relay_fatal(relay_reader *r, relay_rec *rec, char *buf, size_t cap, size_t *used) {
	char s[512];
	int err = rd_kafka_fatal_error(r->rk, s, sizeof s);
	if (!err)
		return 0;
	memset(rec, 0, sizeof(*rec));
	rec->kind = RELAY_ERROR_EVENT;
	rec->err = err;
	rec->fatal = 1;
	if (!relay_put(buf, cap, used, s, strlen(s), rec))
		rec->len = 0;
	return 1;
}

// relay_take refills held with what librdkafka has queued, up to max messages; when wait is set the
// first is waited for up to timeout_ms (rd_kafka_queue_yield ends that wait). One call for the whole
// batch would wait for a full batch (or the timeout): at a slow rate a record would wait for
// hundreds after it.
static int relay_take(relay_reader *r, int wait, int timeout_ms, int max) {
	if (r->cap < max) {
		rd_kafka_message_t **h = realloc(r->held, max * sizeof(*h));
		if (!h)
			return 0;
		r->held = h;
		r->cap = max;
	}
	r->next = r->n = 0;
	int first = 0;
	if (wait) {
		if (rd_kafka_consume_batch_queue(r->q, timeout_ms, r->held, 1) != 1)
			return 0;
		first = 1;
	}
	ssize_t more = max > first ? rd_kafka_consume_batch_queue(r->q, 0, r->held + first, max - first) : 0;
	r->n = first + (more > 0 ? (int)more : 0);
	return r->n;
}

// relay_read fills recs (at most max) and buf: the first record is waited for up to timeout_ms,
// the rest only taken if already queued. It returns how many recs it filled; records that do not
// fit stay held for the next call, and *need says how large the buffer must be when the first does
// not fit. An error (a consumer error, or the client's fatal error) ends the batch as its last rec.
static int relay_read(relay_reader *r, int timeout_ms, relay_rec *recs, int max, char *buf, size_t cap, size_t *need) {
	int n = 0;
	size_t used = 0;
	*need = 0;
	if (relay_fatal(r, &recs[0], buf, cap, &used))
		return 1;
	while (n < max) {
		if (r->next == r->n && !relay_take(r, n == 0, timeout_ms, max - n))
			break;
		rd_kafka_message_t *m = r->held[r->next];
		relay_rec *rec = &recs[n];
		memset(rec, 0, sizeof(*rec));
		rec->partition = m->partition;
		rec->offset = m->offset;
		if (m->err) {
			// A consumer error (librdkafka's CONSUMER_ERR op, which the batch call returns as a
			// message): the same codes and texts Poll returns as error events.
			r->next++;
			if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
				rd_kafka_message_destroy(m);
				continue;
			}
			if (relay_fatal(r, rec, buf, cap, &used)) {
				rd_kafka_message_destroy(m);
				return n + 1;
			}
			rec->kind = RELAY_ERROR_EVENT;
			rec->err = m->err;
			const char *s = rd_kafka_message_errstr(m);
			if (!s || !relay_put(buf, cap, &used, s, strlen(s), rec))
				rec->len = 0;
			rd_kafka_message_destroy(m);
			return n + 1;
		}
		rec->topic = relay_topic(r, m->rkt);
		if (rec->topic < 0) {
			r->next++;
			rec->kind = RELAY_RECORD_ERROR;
			rec->err = RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
			const char *s = m->rkt ? rd_kafka_topic_name(m->rkt) : "";
			if (!relay_put(buf, cap, &used, s, strlen(s), rec))
				rec->len = 0;
			rd_kafka_message_destroy(m);
			return n + 1;
		}
		rd_kafka_timestamp_type_t tstype;
		rec->ts = rd_kafka_message_timestamp(m, &tstype);
		if (!relay_put(buf, cap, &used, m->payload, m->payload ? m->len : 0, rec)) {
			if (n == 0)
				*need = m->len;
			break;
		}
		r->next++;
		rd_kafka_message_destroy(m);
		n++;
	}
	return n;
}

// relay_forget drops the held records of topic/partition (being unassigned): they left
// librdkafka's queue already, so the unassignment's version barrier cannot drop them.
static void relay_forget(relay_reader *r, const char *topic, int32_t partition) {
	int k = r->next;
	for (int i = r->next; i < r->n; i++) {
		rd_kafka_message_t *m = r->held[i];
		const char *t = m->rkt ? rd_kafka_topic_name(m->rkt) : "";
		if (m->partition == partition && strcmp(t, topic) == 0)
			rd_kafka_message_destroy(m);
		else
			r->held[k++] = m;
	}
	r->n = k;
}

static void relay_reader_free(relay_reader *r) {
	for (int i = r->next; i < r->n; i++)
		rd_kafka_message_destroy(r->held[i]);
	free(r->held);
	for (int i = 0; i < r->ntopics; i++)
		free(r->topics[i]);
	free(r->topics);
	free(r);
}
*/
import "C"

import (
	"fmt"
	"reflect"
	"time"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Record is one record as delivered. Value lies in its batch's buffer: it is valid until the batch
// is read into again, so whatever outlives the batch must be copied.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time // zero when the record has none
	Value     []byte
}

// Batch is the reusable memory of one Read: its records and the buffer their values are copied to.
type Batch struct {
	Records []Record
	recs    []C.relay_rec
	buf     []byte
}

// DefaultBatch is the batch relay reads with: 512 records or 256 KiB of values, whichever comes
// first, so one cgo call serves hundreds of records while a batch stays in the CPU's cache.
func DefaultBatch() *Batch { return NewBatch(512, 256<<10) }

// NewBatch makes a batch of at most records records and bytes bytes of values (a larger record
// grows the buffer).
func NewBatch(records, bytes int) *Batch {
	return &Batch{Records: make([]Record, 0, records), recs: make([]C.relay_rec, records), buf: make([]byte, bytes)}
}

// reader is the C reader of one consumer's queue.
type reader struct {
	c      *C.relay_reader
	topics []string
}

// newReader reads kc's consumer queue: the queue confluent-kafka-go's Poll reads, which it does not
// export (consumer_test checks the field still exists and is the queue Poll serves).
func newReader(kc *kafka.Consumer, topics []string) (*reader, error) {
	h := reflect.ValueOf(kc).Elem().FieldByName("handle")
	if !h.IsValid() || !h.FieldByName("rkq").IsValid() || h.FieldByName("rkq").Kind() != reflect.Pointer {
		return nil, fmt.Errorf("kafka consumer: confluent-kafka-go %s has no handle.rkq: relay's batch reader needs the version in go.mod", kafkaVersion())
	}
	if !h.FieldByName("rk").IsValid() || h.FieldByName("rk").Kind() != reflect.Pointer {
		return nil, fmt.Errorf("kafka consumer: confluent-kafka-go %s has no handle.rk: relay's batch reader needs the version in go.mod", kafkaVersion())
	}
	q, rk := h.FieldByName("rkq").UnsafePointer(), h.FieldByName("rk").UnsafePointer()
	if q == nil || rk == nil {
		return nil, fmt.Errorf("kafka consumer: no consumer queue")
	}
	r := (*C.relay_reader)(C.calloc(1, C.size_t(unsafe.Sizeof(C.relay_reader{}))))
	r.rk = (*C.rd_kafka_t)(rk)
	r.q = (*C.rd_kafka_queue_t)(q)
	r.ntopics = C.int(len(topics))
	r.topics = (**C.char)(C.calloc(C.size_t(len(topics)+1), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	names := unsafe.Slice(r.topics, len(topics))
	for i, t := range topics {
		names[i] = C.CString(t)
	}
	return &reader{c: r, topics: topics}, nil
}

func kafkaVersion() string {
	_, v := kafka.LibraryVersion()
	return "(librdkafka " + v + ")"
}

// read fills b: it waits up to timeout for a first record, then takes only what is queued. An error
// ends the batch: an error event (kafka.Error, with the records before it in b), or an errored
// record (ending in err as well, after the records before it).
func (r *reader) read(timeout time.Duration, b *Batch) (event *kafka.Error, err error) {
	b.Records = b.Records[:0]
	var need C.size_t
	var n C.int
	for {
		n = C.relay_read(r.c, C.int(timeout/time.Millisecond), &b.recs[0], C.int(len(b.recs)),
			(*C.char)(unsafe.Pointer(&b.buf[0])), C.size_t(len(b.buf)), &need)
		if n > 0 || need == 0 {
			break
		}
		b.buf = make([]byte, int(need)+len(b.buf)) // a record larger than the buffer: held, read again
	}
	for i := range int(n) {
		rec := &b.recs[i]
		val := b.buf[rec.at : rec.at+rec.len : rec.at+rec.len]
		switch rec.kind {
		case C.RELAY_ERROR_EVENT:
			e := kafka.NewError(kafka.ErrorCode(rec.err), string(val), rec.fatal != 0)
			return &e, nil
		case C.RELAY_RECORD_ERROR:
			if rec.topic < 0 { // the text is the topic's name
				return nil, fmt.Errorf("consume %s/%d: not a topic of this consumer", val, rec.partition)
			}
			return nil, fmt.Errorf("consume %s/%d: %w", r.topics[rec.topic], rec.partition, kafka.NewError(kafka.ErrorCode(rec.err), string(val), false))
		}
		out := Record{Topic: r.topics[rec.topic], Partition: int32(rec.partition), Offset: int64(rec.offset), Value: val}
		if rec.ts >= 0 {
			out.Timestamp = time.UnixMilli(int64(rec.ts))
		}
		b.Records = append(b.Records, out)
	}
	return nil, nil
}

// wake makes a read waiting for its first record return at once, empty (a read not waiting yet
// returns at once instead).
func (r *reader) wake() { C.rd_kafka_queue_yield(r.c.q) }

// forget drops the records of topic/part read from librdkafka but held for the next read (they did
// not fit the last batch). No read may be running.
func (r *reader) forget(topic string, part int32) {
	t := C.CString(topic)
	defer C.free(unsafe.Pointer(t))
	C.relay_forget(r.c, t, C.int32_t(part))
}

// close destroys the held messages: before the consumer closes, which waits for its records.
func (r *reader) close() {
	if r.c != nil {
		C.relay_reader_free(r.c)
		r.c = nil
	}
}
