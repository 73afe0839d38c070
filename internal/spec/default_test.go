package spec

import (
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/aggregate"
	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/sink"
)

func defaultPlan(t testing.TB, table string) *Plan {
	t.Helper()
	p, err := Compile(Default(order.DefaultFields(), order.DefaultLimits(), table, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The default spec's CREATE TABLE is, byte for byte, the statement sink.Schema.Create runs.
func TestDefaultDDLIsSinks(t *testing.T) {
	for _, f := range []sink.Flavor{sink.MySQL, sink.MariaDB} {
		want := sink.Schema{Table: "order_stats_minute", DLQ: "relay_dlq"}.CreateStatements(f)[0]
		if got := string(defaultPlan(t, "order_stats_minute").AppendCreate(nil, 0, f)); got != want {
			t.Fatalf("flavor %v: spec renders\n%q\nsink runs\n%q", f, got, want)
		}
	}
}

// For the same records, the default spec's rows and upsert are byte for byte aggregate's and sink's.
func TestDefaultUpsertIsSinks(t *testing.T) {
	p := defaultPlan(t, "order_stats_minute")
	d := p.NewDecoder()
	od := order.NewDecoder(order.DefaultFields(), order.DefaultLimits())
	at := aggregate.NewTable()
	st := []*Tables{p.NewTables()}
	var r Record
	var o order.Order
	for _, payload := range []string{
		`{"order_id":"1","sku":"b","amount":"0.1","ts":1764000000000}`,
		`{"order_id":"2","sku":"a","amount":"99999999999999.9999","ts":1764000000000}`,
		`{"order_id":"3","sku":"a","amount":-5,"ts":1764000059999}`,
		`{"order_id":"4","sku":"a ","amount":"0","ts":1764000060000}`,
		`{"order_id":"5","sku":"A","amount":"1e-4","ts":"1764000000001"}`,
		`{"order_id":"6","sku":"\u0000x","amount":"2.5","ts":1764000000000}`,
		`{"order_id":"7","sku":"雪'\"; --","amount":"-0.0001","ts":946684800000}`,
		`{"order_id":"8","sku":"a","amount":"99999999999999.9999","ts":1764000000000}`,
	} {
		if reason, field := d.Decode([]byte(payload), &r); reason != OK {
			t.Fatalf("%s: %v %s", payload, reason, field)
		}
		if reason := od.Decode([]byte(payload), &o); reason != order.OK {
			t.Fatal(reason)
		}
		p.Fold(&r, st)
		at.Add(aggregate.Window(o.TS, 60000), o.SKU, o.Amount)
	}
	rows := st[0].Rows(0)
	if len(rows) != at.Len() {
		t.Fatalf("%d rows, aggregate has %d", len(rows), at.Len())
	}
	want := string(sink.Schema{Table: "order_stats_minute"}.AppendUpsert(nil, at.Rows()))
	if got := string(p.AppendUpsert(nil, 0, rows)); got != want {
		t.Fatalf("spec renders\n%s\nsink renders\n%s", got, want)
	}
	// Batches of any size too (the pipeline cuts rows into mysql.batch_rows statements).
	ar := at.Rows()
	for i := range rows {
		want := string(sink.Schema{Table: "order_stats_minute"}.AppendUpsert(nil, ar[i:i+1]))
		if got := string(p.AppendUpsert(nil, 0, rows[i:i+1])); got != want {
			t.Fatalf("row %d: spec renders\n%s\nsink renders\n%s", i, got, want)
		}
	}
}
