package sink_test

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/order"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/testenv"
)

// schema is the default pipeline's sink tables with aggregate table name.
func schema(t *testing.T, name, dlq, detail string) sink.Schema {
	t.Helper()
	p, err := spec.Compile(spec.Default(order.DefaultFields(), order.DefaultLimits(), name, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return p.Schema(dlq, detail)
}

// serverDB is a fresh database of the test server, a context and the server's flavor.
func serverDB(t *testing.T) (*sql.DB, context.Context, sink.Flavor) {
	t.Helper()
	db := testenv.Open(t, testenv.Database(t))
	ctx := testenv.Context(t, time.Minute)
	flavor, _, err := sink.DetectFlavor(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return db, ctx, flavor
}

// Create refuses an existing aggregate table that is not InnoDB or whose definition differs from
// what relay writes, naming the table and each difference, and leaves the table as it was.
func TestCreateRefusesDifferentTable(t *testing.T) {
	db, ctx, flavor := serverDB(t)
	coll := sink.BinaryCollation(flavor)
	cases := []struct {
		name, ddl string
		want      []string
	}{
		{"myisam", `CREATE TABLE %s (window_start DATETIME NOT NULL, sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE ` + coll + ` NOT NULL,
			order_count BIGINT NOT NULL, amount_sum DECIMAL(38,4) NOT NULL, PRIMARY KEY (window_start, sku)) ENGINE=MyISAM`,
			[]string{"engine MyISAM, not InnoDB"}},
		{"collation", `CREATE TABLE %s (window_start DATETIME NOT NULL, sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL,
			order_count BIGINT NOT NULL, amount_sum DECIMAL(38,2) NOT NULL, PRIMARY KEY (window_start, sku)) ENGINE=InnoDB`,
			[]string{"column sku has collation utf8mb4_general_ci, want " + coll, "column amount_sum is decimal(38,2), want decimal(38,4)"}},
		{"keys", `CREATE TABLE %s (window_start DATETIME NOT NULL, sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE ` + coll + ` NOT NULL,
			order_count BIGINT NULL, amount_sum DECIMAL(38,4) NOT NULL, job VARCHAR(32) NULL, PRIMARY KEY (sku), UNIQUE KEY w (window_start, sku))`,
			[]string{"primary key (sku), want (window_start, sku)", "unique key w (window_start, sku) is not relay's",
				"column order_count is nullable", "column job is not one relay writes"}},
	}
	for _, c := range cases {
		table := "stats_" + c.name
		if _, err := db.ExecContext(ctx, strings.Replace(c.ddl, "%s", table, 1)); err != nil {
			t.Fatal(err)
		}
		err := schema(t, table, "relay_dlq", "").Create(ctx, db, flavor)
		if !errors.Is(err, sink.ErrTableDiffers) || !strings.Contains(err.Error(), "."+table+": ") {
			t.Fatalf("%s: %v, want sink.ErrTableDiffers naming %s", c.name, err, table)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the refusal lacks %q: %v", c.name, w, err)
			}
		}
	}
	var engine string
	if err := db.QueryRowContext(ctx, `SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'stats_myisam'`).
		Scan(&engine); err != nil || engine != "MyISAM" {
		t.Fatalf("engine of the refused table: %q (%v): relay must not alter it", engine, err)
	}
	// What relay creates passes its own check, the append sink included.
	good := schema(t, "order_stats_minute", "relay_dlq", "order_details")
	if err := good.Create(ctx, db, flavor); err != nil {
		t.Fatal(err)
	}
	// The dead-letter table and the append sink are held to their definitions too.
	for _, q := range []string{
		"CREATE TABLE dlq_myisam LIKE relay_dlq", "ALTER TABLE dlq_myisam DROP KEY source_idx, ENGINE=MyISAM", // MyISAM keys are shorter
		"CREATE TABLE details_ci LIKE order_details",
		"ALTER TABLE details_ci MODIFY order_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	err := schema(t, "order_stats_minute", "dlq_myisam", "details_ci").Create(ctx, db, flavor)
	for _, w := range []string{".dlq_myisam: engine MyISAM, not InnoDB", ".details_ci: column order_id has collation utf8mb4_general_ci, want " + coll} {
		if !errors.Is(err, sink.ErrTableDiffers) || !strings.Contains(err.Error(), w) {
			t.Errorf("dead-letter and append-sink tables that differ: %v, want %q", err, w)
		}
	}
}

// Every string relay writes fits its column, so MySQL never refuses one that relay's decoder let
// through (issue 23 §3): the decoder bounds strings in bytes, a utf8mb4 VARCHAR(N) counts
// characters, so N at least the byte bound is enough. The append sink's columns are written out
// in sink, the bounds in order: this holds the two together; and every reason fits the dead-letter
// table's reason column.
func TestStringColumnsHoldWhatTheDecoderAccepts(t *testing.T) {
	l := order.DefaultLimits()
	varchar := map[string]map[string]int{} // table -> column -> N
	table := regexp.MustCompile("CREATE TABLE IF NOT EXISTS `([^`]+)`")
	column := regexp.MustCompile(`\n\t(\w+) VARCHAR\((\d+)\)`)
	for _, stmt := range schema(t, "agg", "dlq", "detail").CreateStatements(sink.MariaDB) {
		name := table.FindStringSubmatch(stmt)
		if name == nil {
			continue
		}
		varchar[name[1]] = map[string]int{}
		for _, c := range column.FindAllStringSubmatch(stmt, -1) {
			varchar[name[1]][c[1]], _ = strconv.Atoi(c[2])
		}
	}
	for _, c := range []struct {
		table, column string
		bytes         int
	}{
		{"agg", "sku", l.MaxSKUBytes},
		{"detail", "sku", l.MaxSKUBytes},
		{"detail", "order_id", l.MaxOrderIDBytes},
	} {
		if n := varchar[c.table][c.column]; n < c.bytes {
			t.Errorf("%s.%s is VARCHAR(%d), the decoder lets through %d bytes", c.table, c.column, n, c.bytes)
		}
	}
	for r := 1; r < 256; r++ {
		name := spec.Reason(r).String()
		if !strings.HasPrefix(name, "reason(") && len(name) > varchar["dlq"]["reason"] {
			t.Errorf("reason %q is longer than dlq.reason's VARCHAR(%d)", name, varchar["dlq"]["reason"])
		}
	}
}
