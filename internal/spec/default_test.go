package spec

import (
	"strings"
	"testing"
	"time"

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

// The default spec's CREATE TABLE is, byte for byte, the statement relay ran before the spec
// existed (captured from sink.Schema.CreateStatements of that code, per flavor).
func TestDefaultDDL(t *testing.T) {
	for f, want := range map[sink.Flavor]string{
		sink.MySQL:   "CREATE TABLE IF NOT EXISTS `order_stats_minute` (\n\twindow_start DATETIME NOT NULL,\n\tsku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,\n\torder_count BIGINT NOT NULL,\n\tamount_sum DECIMAL(38,4) NOT NULL,\n\tPRIMARY KEY (window_start, sku)\n) ENGINE=InnoDB",
		sink.MariaDB: "CREATE TABLE IF NOT EXISTS `order_stats_minute` (\n\twindow_start DATETIME NOT NULL,\n\tsku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,\n\torder_count BIGINT NOT NULL,\n\tamount_sum DECIMAL(38,4) NOT NULL,\n\tPRIMARY KEY (window_start, sku)\n) ENGINE=InnoDB",
	} {
		if got := defaultPlan(t, "order_stats_minute").SinkTable(0).CreateSQL(f); got != want {
			t.Fatalf("flavor %v: spec renders\n%q\nrelay ran\n%q", f, got, want)
		}
	}
}

// For the same records, the default spec's upsert is byte for byte the one relay rendered before
// the spec existed (captured from sink.Schema.AppendUpsert over aggregate.Table's rows), in one
// statement and in statements of one row each (the pipeline cuts rows into mysql.batch_rows).
func TestDefaultUpsert(t *testing.T) {
	p := defaultPlan(t, "order_stats_minute")
	d := p.NewDecoder()
	st := []*Tables{p.NewTables()}
	var r Record
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
		p.Fold(&r, st)
	}
	const want = "INSERT INTO `order_stats_minute` (window_start, sku, order_count, amount_sum) VALUES ('2000-01-01 00:00:00',_utf8mb4 X'e99baa27223b202d2d',1,-0.0001),('2025-11-24 16:00:00',_utf8mb4 X'0078',1,2.5000),('2025-11-24 16:00:00',_utf8mb4 X'41',1,0.0001),('2025-11-24 16:00:00',_utf8mb4 X'61',3,199999999999994.9998),('2025-11-24 16:00:00',_utf8mb4 X'62',1,0.1000),('2025-11-24 16:01:00',_utf8mb4 X'6120',1,0.0000) ON DUPLICATE KEY UPDATE order_count = order_count + VALUES(order_count), amount_sum = amount_sum + VALUES(amount_sum)"
	rows := st[0].Rows(0)
	if got := string(p.AppendUpsert(nil, 0, rows)); got != want {
		t.Fatalf("spec renders\n%s\nrelay rendered\n%s", got, want)
	}
	head, rest, _ := strings.Cut(want, " VALUES (")
	values, tail, _ := strings.Cut(rest, ") ON DUPLICATE KEY UPDATE ")
	tuples := strings.Split(values, "),(")
	if len(tuples) != len(rows) {
		t.Fatalf("%d rows, relay rendered %d", len(rows), len(tuples))
	}
	for i := range rows {
		want := head + " VALUES (" + tuples[i] + ") ON DUPLICATE KEY UPDATE " + tail
		if got := string(p.AppendUpsert(nil, 0, rows[i:i+1])); got != want {
			t.Fatalf("row %d: spec renders\n%s\nrelay rendered\n%s", i, got, want)
		}
	}
}
