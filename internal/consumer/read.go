// Reading records in batches: one cgo call takes every event librdkafka has queued (up to a batch),
// copies each record's value into the batch's Go buffer and destroys the event inside C.
//
// Invariant: a record is delivered exactly as confluent-kafka-go's Poll delivers it — the same
// librdkafka calls on the same queue (rd_kafka_queue_poll, rd_kafka_event_message_next, which
// moves the application position, rd_kafka_event_destroy), in the same order — but without a cgo
// call, a *kafka.Message and a copy of the headers per record (the bare client's Poll costs about
// 4 cgo calls and 6 allocations per record; see docs/BENCHMARKS.md). Nothing C owns outlives a
// Read, except one event held back when the buffer is full, which Close destroys.

package consumer

/*
#include <stdlib.h>
#include <string.h>
#include "rdkafka_min.h"

// relay_reader is the C side of a Reader: the consumer's queue, the topics by index, and the
// event held back because its record did not fit the last batch.
typedef struct {
	rd_kafka_queue_t *q;
	int ntopics;
	char **topics;
	rd_kafka_event_t *held;
	const rd_kafka_message_t *held_msg;
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

static int relay_topic(relay_reader *r, const char *name) {
	for (int i = 0; i < r->ntopics; i++)
		if (strcmp(r->topics[i], name) == 0)
			return i;
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

// relay_read fills recs (at most max) and buf: the first event is waited for up to timeout_ms,
// the rest only taken if already queued. It returns how many recs it filled; a record that does not
// fit is held for the next call, and *need says how large the buffer must be when it is the first.
// An error event ends the batch as its last rec.
static int relay_read(relay_reader *r, int timeout_ms, relay_rec *recs, int max, char *buf, size_t cap, size_t *need) {
	int n = 0;
	size_t used = 0;
	*need = 0;
	while (n < max) {
		rd_kafka_event_t *ev = r->held;
		const rd_kafka_message_t *m = r->held_msg;
		r->held = NULL;
		r->held_msg = NULL;
		if (!ev) {
			ev = rd_kafka_queue_poll(r->q, n == 0 ? timeout_ms : 0);
			if (!ev)
				break;
			int type = rd_kafka_event_type(ev);
			if (type == RD_KAFKA_EVENT_ERROR) {
				int err = rd_kafka_event_error(ev);
				if (err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
					rd_kafka_event_destroy(ev);
					continue;
				}
				relay_rec *rec = &recs[n];
				memset(rec, 0, sizeof(*rec));
				rec->kind = RELAY_ERROR_EVENT;
				rec->err = err;
				rec->fatal = rd_kafka_event_error_is_fatal(ev);
				const char *s = rd_kafka_event_error_string(ev);
				if (!s || !relay_put(buf, cap, &used, s, strlen(s), rec))
					rec->len = 0;
				rd_kafka_event_destroy(ev);
				return n + 1;
			}
			if (type != RD_KAFKA_EVENT_FETCH) {
				// Rebalance (none: partitions are assigned by hand), offset commit, statistics and
				// token refresh events carry nothing relay reads, as with Poll.
				rd_kafka_event_destroy(ev);
				continue;
			}
			m = rd_kafka_event_message_next(ev);
			if (!m) {
				rd_kafka_event_destroy(ev);
				continue;
			}
		}
		relay_rec *rec = &recs[n];
		memset(rec, 0, sizeof(*rec));
		rec->partition = m->partition;
		rec->offset = m->offset;
		const char *topic = m->rkt ? rd_kafka_topic_name(m->rkt) : "";
		rec->topic = relay_topic(r, topic);
		if (m->err || rec->topic < 0) {
			rec->kind = RELAY_RECORD_ERROR;
			rec->err = m->err ? m->err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
			const char *s = rec->topic < 0 ? topic : rd_kafka_message_errstr(m);
			if (!s || !relay_put(buf, cap, &used, s, strlen(s), rec))
				rec->len = 0;
			rd_kafka_event_destroy(ev);
			return n + 1;
		}
		rd_kafka_timestamp_type_t tstype;
		rec->ts = rd_kafka_message_timestamp(m, &tstype);
		if (!relay_put(buf, cap, &used, m->payload, m->payload ? m->len : 0, rec)) {
			r->held = ev;
			r->held_msg = m;
			if (n == 0)
				*need = m->len;
			break;
		}
		rd_kafka_event_destroy(ev);
		n++;
	}
	return n;
}

// relay_forget drops the held record if it is of topic/partition (being unassigned): it left
// librdkafka's queue already, so the unassignment's version barrier cannot drop it.
static void relay_forget(relay_reader *r, const char *topic, int32_t partition) {
	if (!r->held || !r->held_msg || r->held_msg->partition != partition)
		return;
	const char *t = r->held_msg->rkt ? rd_kafka_topic_name(r->held_msg->rkt) : "";
	if (strcmp(t, topic) != 0)
		return;
	rd_kafka_event_destroy(r->held);
	r->held = NULL;
	r->held_msg = NULL;
}

static void relay_reader_free(relay_reader *r) {
	if (r->held)
		rd_kafka_event_destroy(r->held);
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
	q := h.FieldByName("rkq").UnsafePointer()
	if q == nil {
		return nil, fmt.Errorf("kafka consumer: no consumer queue")
	}
	r := (*C.relay_reader)(C.calloc(1, C.size_t(unsafe.Sizeof(C.relay_reader{}))))
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

// forget drops a record read from librdkafka but held for the next read (it did not fit the last
// batch) if it is of topic/part. No read may be running.
func (r *reader) forget(topic string, part int32) {
	t := C.CString(topic)
	defer C.free(unsafe.Pointer(t))
	C.relay_forget(r.c, t, C.int32_t(part))
}

// close destroys the held event: before the consumer closes, which waits for its records.
func (r *reader) close() {
	if r.c != nil {
		C.relay_reader_free(r.c)
		r.c = nil
	}
}
