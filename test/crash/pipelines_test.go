package crash

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/ledger"
)

// example is one worked example of docs/PIPELINES.md: a spec, records, and what relay must write.
type example struct {
	title   string
	spec    string
	records []string
	tables  []docTable // every aggregate table, then relay_dlq (columns record, reason, field)
}

// docTable is a table as the document shows it: a backquoted name on a line of its own, then a
// Markdown table whose header names the columns.
type docTable struct {
	name string
	cols []string
	rows [][]string
}

var tableName = regexp.MustCompile("^`([A-Za-z_][A-Za-z0-9_]*)`$")

// readExamples parses the "### Example" sections of docs/PIPELINES.md.
func readExamples(t *testing.T) []example {
	b, err := os.ReadFile("../../docs/PIPELINES.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []example
	for _, sec := range strings.Split(string(b), "\n### Example ")[1:] {
		sec, _, _ = strings.Cut(sec, "\n## ")
		ex := example{title: strings.SplitN(sec, "\n", 2)[0]}
		var fence string // the open fenced block's language; "" outside one
		var block []string
		var cur *docTable
		sc := bufio.NewScanner(strings.NewReader(sec))
		for sc.Scan() {
			line := sc.Text()
			switch {
			case fence == "" && strings.HasPrefix(line, "```"):
				fence, block = strings.TrimPrefix(line, "```"), nil
			case fence != "" && line == "```":
				switch fence {
				case "yaml":
					ex.spec = strings.Join(block, "\n") + "\n"
				case "json":
					ex.records = block
				}
				fence = ""
			case fence != "":
				block = append(block, line)
			case tableName.MatchString(line):
				ex.tables = append(ex.tables, docTable{name: tableName.FindStringSubmatch(line)[1]})
				cur = &ex.tables[len(ex.tables)-1]
			case cur != nil && strings.HasPrefix(line, "|"):
				cells := strings.Split(strings.Trim(line, "|"), "|")
				for i := range cells {
					cells[i] = strings.TrimSpace(cells[i])
				}
				switch {
				case cur.cols == nil:
					cur.cols = cells
				case !strings.HasPrefix(cells[0], "---"):
					cur.rows = append(cur.rows, cells)
				}
			}
		}
		if ex.spec == "" || len(ex.records) == 0 || len(ex.tables) < 2 || ex.tables[len(ex.tables)-1].name != "relay_dlq" {
			t.Fatalf("example %q: want a yaml block, a json block, its tables and relay_dlq", ex.title)
		}
		out = append(out, ex)
	}
	if len(out) < 3 {
		t.Fatalf("docs/PIPELINES.md has %d worked examples, want 3", len(out))
	}
	return out
}

// TestPipelineExamples runs every worked example of docs/PIPELINES.md through the real relay and
// requires the tables, the dead-letter rows and the logged fields the document shows.
func TestPipelineExamples(t *testing.T) {
	for _, ex := range readExamples(t) {
		t.Run(strings.TrimSuffix(strings.Fields(ex.title)[0], ":"), func(t *testing.T) { runExample(t, ex) })
	}
}

func runExample(t *testing.T, ex example) {
	specPath := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(specPath, []byte(ex.spec), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	produceRecords(t, e.brokers, e.topic, ex.records)
	p := e.start("RELAY_PIPELINE_FILE=" + specPath)
	led := ledger.New(e.db, e.job)
	waitFor(t, 60*time.Second, func() bool {
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
		return err == nil && next == int64(len(ex.records)) && e.ledgerRows()[id] == string(ledger.Committed)
	}, "a committed checkpoint covering every record")
	for _, want := range ex.tables {
		got := readTable(t, ctx, e, want)
		if !slices.EqualFunc(got, want.rows, slices.Equal[[]string]) {
			t.Errorf("%s: got rows\n%s\nwant\n%s", want.name, showRows(got), showRows(want.rows))
		}
	}
	dlq := ex.tables[len(ex.tables)-1]
	for _, row := range dlq.rows {
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
func readTable(t *testing.T, ctx context.Context, e *env, want docTable) [][]string {
	q := "SELECT "
	if want.name == "relay_dlq" {
		q = "SELECT CAST(koffset + 1 AS CHAR), reason FROM relay_dlq WHERE job = '" + e.job + "' ORDER BY koffset"
	} else {
		casts, order := make([]string, len(want.cols)), make([]string, len(want.cols))
		for i, c := range want.cols {
			casts[i], order[i] = "CAST(`"+c+"` AS CHAR)", "`"+c+"`"
		}
		// By the columns themselves (not their text): the primary key, window_start then the
		// dimensions, comes first in the document, and the key is unique.
		q += strings.Join(casts, ", ") + " FROM `" + want.name + "` ORDER BY " + strings.Join(order, ", ")
	}
	rows, err := e.db.QueryContext(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", want.name, err)
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
	if want.name == "relay_dlq" {
		// The field is not in the row (relay logs it): take the document's, checked against the log.
		for i := range out {
			if i < len(want.rows) && len(want.rows[i]) == 3 {
				out[i] = append(out[i], want.rows[i][2])
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
