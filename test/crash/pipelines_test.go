package crash

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/testenv"
	"github.com/relay-sh/relay/test/oracle"
)

// TestPipelineExamples runs every worked example of docs/PIPELINES.md through the real relay and
// requires the tables, the dead-letter rows and the logged fields the document shows.
func TestPipelineExamples(t *testing.T) {
	examples, err := oracle.ReadExamples("../../docs/PIPELINES.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples {
		t.Run(strings.TrimSuffix(strings.Fields(ex.Title)[0], ":"), func(t *testing.T) { runExample(t, ex) })
	}
}

func runExample(t *testing.T, ex oracle.Example) {
	specPath := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(specPath, []byte(ex.Spec), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	produceRecords(t, e.brokers, e.topic, ex.Records)
	p := e.start("RELAY_PIPELINE_FILE=" + specPath)
	led := ledger.New(e.db, e.job)
	testenv.Eventually(t, 60*time.Second, func() bool {
		select {
		case <-p.Done():
			err := p.Err()
			t.Fatalf("relay exited: %v\n%s", err, tail(p.Log, 5))
		default:
		}
		// The offsets are written when the checkpoint is decided, before its branches commit:
		// the tables are read once that checkpoint is marked COMMITTED.
		offs, id, err := led.PartitionOffsets(ctx)
		next, _ := offs.Get(e.topic, 0)
		return err == nil && next == int64(len(ex.Records)) && e.ledgerRows()[id] == string(ledger.Committed)
	}, "a committed checkpoint covering every record")
	for _, want := range ex.Tables {
		got := readTable(t, ctx, e, want)
		if !slices.EqualFunc(got, want.Rows, slices.Equal[[]string]) {
			t.Errorf("%s: got rows\n%s\nwant\n%s", want.Name, showRows(got), showRows(want.Rows))
		}
	}
	dlq := ex.Tables[len(ex.Tables)-1]
	for _, row := range dlq.Rows {
		found := false
		for _, ev := range logEvents(t, p.Log, "bad input (logged once per reason and field; the dead-letter row names the reason)") {
			found = found || (ev["reason"] == row[1] && ev["field"] == row[2])
		}
		if !found {
			t.Errorf("record %s: no log of bad input with reason %s and field %s", row[0], row[1], row[2])
		}
	}
	p.Kill()
}

// readTable reads the columns of want from MySQL in primary-key order as MySQL prints them; for
// relay_dlq, the record number (offset + 1), the reason and, from the document, the field.
func readTable(t *testing.T, ctx context.Context, e *env, want oracle.DocTable) [][]string {
	q := "SELECT "
	if want.Name == "relay_dlq" {
		q = "SELECT CAST(koffset + 1 AS CHAR), reason FROM relay_dlq WHERE job = '" + e.job + "' ORDER BY koffset"
	} else {
		casts, order := make([]string, len(want.Cols)), make([]string, len(want.Cols))
		for i, c := range want.Cols {
			casts[i], order[i] = "CAST(`"+c+"` AS CHAR)", "`"+c+"`"
		}
		// By the columns themselves (not their text): the primary key, window_start then the
		// dimensions, comes first in the document, and the key is unique.
		q += strings.Join(casts, ", ") + " FROM `" + want.Name + "` ORDER BY " + strings.Join(order, ", ")
	}
	rows, err := e.db.QueryContext(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", want.Name, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][]string
	for rows.Next() {
		vals := make([]string, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want.Name == "relay_dlq" {
		// The field is not in the row (relay logs it): take the document's, checked against the log.
		for i := range out {
			if i < len(want.Rows) && len(want.Rows[i]) == 3 {
				out[i] = append(out[i], want.Rows[i][2])
			}
		}
	}
	return out
}

func showRows(rows [][]string) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// produceRecords writes records, in order, to partition 0 of topic and waits for each delivery.
func produceRecords(t *testing.T, brokers, topic string, records []string) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "enable.idempotence": true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, len(records))
	for _, r := range records {
		err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte(r)}, done)
		if err != nil {
			t.Fatal(err)
		}
	}
	for range records {
		if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	}
}
