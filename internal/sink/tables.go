// The sink tables' definitions, as data: CREATE TABLE is rendered from them and an existing table
// is compared with them (information_schema), so what relay creates and what it accepts cannot
// drift apart.
//
// Invariant: relay writes only into a table that is transactional (InnoDB: a rolled-back or
// never-committed epoch leaves nothing behind) and whose columns, types, key-string collation and
// unique keys are exactly these (for aggregate tables, the pipeline spec's); anything else is refused with the difference, never altered.

package sink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// ErrTableDiffers means a sink table exists but is not what relay writes.
var ErrTableDiffers = errors.New("sink table differs from what relay writes")

// Column is one NOT NULL column of a sink table.
type Column struct {
	Name string
	Type string // as written in CREATE TABLE; lower-cased it is information_schema's COLUMN_TYPE
	// Binary: utf8mb4 with the flavor's binary no-pad collation, so keys compare as bytes.
	Binary bool
	Tail   string // AUTO_INCREMENT, DEFAULT ...
}

// Table is a sink table's definition: what CREATE TABLE says and Check holds an existing one to.
// Aggregate tables come from the pipeline spec (spec.Plan.SinkTable); relay's own tables are here.
type Table struct {
	Name    string
	Columns []Column
	Primary []string
	Keys    []string // secondary (non-unique) indexes, as written in CREATE TABLE; not checked
}

func (s Schema) tables() []Table {
	ts := append([]Table(nil), s.Aggregates...)
	ts = append(ts, Table{
		Name: s.DLQ,
		Columns: []Column{
			{Name: "id", Type: "BIGINT", Tail: "AUTO_INCREMENT"},
			{Name: "job", Type: "VARCHAR(64)"},
			{Name: "topic", Type: "VARCHAR(249)"},
			{Name: "kpartition", Type: "INT"},
			{Name: "koffset", Type: "BIGINT"},
			{Name: "reason", Type: "VARCHAR(32)"},
			{Name: "payload", Type: "BLOB"},
			{Name: "payload_bytes", Type: "INT"},
			{Name: "checkpoint_id", Type: "BIGINT"},
			{Name: "created_at", Type: "DATETIME(6)", Tail: "DEFAULT CURRENT_TIMESTAMP(6)"},
		},
		Primary: []string{"id"},
		Keys:    []string{"KEY source_idx (job, topic, kpartition, koffset)"},
	})
	if s.Detail != "" {
		// No unique key on purpose: exactly-once here rests on the epoch transactions alone.
		ts = append(ts, Table{
			Name: s.Detail,
			Columns: []Column{
				{Name: "id", Type: "BIGINT", Tail: "AUTO_INCREMENT"},
				{Name: "order_id", Type: "VARCHAR(128)", Binary: true},
				{Name: "sku", Type: "VARCHAR(64)", Binary: true},
				{Name: "amount", Type: "DECIMAL(38,4)"},
				{Name: "event_time", Type: "DATETIME(3)"},
				{Name: "src_topic", Type: "VARCHAR(249)"},
				{Name: "src_partition", Type: "INT"},
				{Name: "src_offset", Type: "BIGINT"},
			},
			Primary: []string{"id"},
			Keys:    []string{"KEY source_idx (src_topic, src_partition, src_offset)"},
		})
	}
	return ts
}

// CreateSQL renders t's CREATE TABLE IF NOT EXISTS, the one renderer of every sink table.
func (t Table) CreateSQL(f Flavor) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (", quote(t.Name))
	for _, c := range t.Columns {
		fmt.Fprintf(&b, "\n\t%s %s", c.Name, c.Type)
		if c.Binary {
			fmt.Fprintf(&b, " CHARACTER SET utf8mb4 COLLATE %s", BinaryCollation(f))
		}
		b.WriteString(" NOT NULL")
		if c.Tail != "" {
			b.WriteString(" " + c.Tail)
		}
		b.WriteString(",")
	}
	fmt.Fprintf(&b, "\n\tPRIMARY KEY (%s)", strings.Join(t.Primary, ", "))
	for _, k := range t.Keys {
		b.WriteString(",\n\t" + k)
	}
	b.WriteString("\n) ENGINE=InnoDB")
	return b.String()
}

// Check compares every sink table with its definition: engine InnoDB, the same columns (no more,
// no fewer) with the same types and nullability, the binary collation on key strings, the same
// primary key and no other unique key (one would change which row an upsert adds to).
func (s Schema) Check(ctx context.Context, db *sql.DB, f Flavor) error {
	dbName, err := Database(ctx, db)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range s.tables() {
		diffs, err := t.differences(ctx, db, f)
		if err != nil {
			return fmt.Errorf("check sink table %s: %w", t.Name, err)
		}
		if len(diffs) > 0 {
			errs = append(errs, fmt.Errorf("%w: table %s.%s: %s; relay never alters a table: fix it by hand or configure another table name",
				ErrTableDiffers, dbName, t.Name, strings.Join(diffs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// Database is the sink's database (the DSN's), which qualifies its tables' names.
func Database(ctx context.Context, db *sql.DB) (string, error) {
	var name sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&name); err != nil {
		return "", fmt.Errorf("sink database: %w", err)
	}
	if !name.Valid {
		return "", errors.New("sink database: the DSN names no database (user:pw@tcp(host:3306)/dbname)")
	}
	return name.String, nil
}

// intWidth is the display width MySQL 5.7 and MariaDB print after integer types (bigint(20)).
var intWidth = regexp.MustCompile(`^((?:tiny|small|medium|big)?int)\(\d+\)`)

func (t Table) differences(ctx context.Context, db *sql.DB, f Flavor) ([]string, error) {
	var engine sql.NullString
	err := db.QueryRowContext(ctx, `SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, t.Name).
		Scan(&engine)
	if errors.Is(err, sql.ErrNoRows) {
		return []string{"does not exist"}, nil
	}
	if err != nil {
		return nil, err
	}
	var diffs []string
	if !strings.EqualFold(engine.String, "InnoDB") {
		what := "engine " + engine.String
		if !engine.Valid {
			what = "a view"
		}
		diffs = append(diffs, what+", not InnoDB: a non-transactional table keeps the writes of an epoch that was rolled back, so totals double after a crash")
	}
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COALESCE(COLLATION_NAME, ''), EXTRA
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, t.Name)
	if err != nil {
		return nil, err
	}
	type actual struct{ typ, nullable, collation, extra string }
	have := map[string]actual{}
	for rows.Next() {
		var name string
		var a actual
		if err := rows.Scan(&name, &a.typ, &a.nullable, &a.collation, &a.extra); err != nil {
			rows.Close()
			return nil, err
		}
		have[strings.ToLower(name)] = a
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, c := range t.Columns {
		a, ok := have[c.Name]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("column %s is missing (want %s NOT NULL)", c.Name, c.Type))
			continue
		}
		delete(have, c.Name)
		if typ := intWidth.ReplaceAllString(strings.ToLower(a.typ), "$1"); typ != strings.ToLower(c.Type) {
			diffs = append(diffs, fmt.Sprintf("column %s is %s, want %s", c.Name, a.typ, strings.ToLower(c.Type)))
		}
		if a.nullable != "NO" {
			diffs = append(diffs, fmt.Sprintf("column %s is nullable, want NOT NULL", c.Name))
		}
		if want := BinaryCollation(f); c.Binary && a.collation != want {
			diffs = append(diffs, fmt.Sprintf("column %s has collation %s, want %s (keys must compare as bytes, without pad space)", c.Name, a.collation, want))
		}
		if c.Tail == "AUTO_INCREMENT" && !strings.Contains(strings.ToLower(a.extra), "auto_increment") {
			diffs = append(diffs, fmt.Sprintf("column %s is not AUTO_INCREMENT", c.Name))
		}
	}
	extra := make([]string, 0, len(have))
	for name := range have {
		extra = append(extra, name)
	}
	sort.Strings(extra)
	for _, name := range extra {
		diffs = append(diffs, fmt.Sprintf("column %s is not one relay writes", name))
	}
	unique, err := uniqueKeys(ctx, db, t.Name)
	if err != nil {
		return nil, err
	}
	if got, want := strings.Join(unique["PRIMARY"], ", "), strings.Join(t.Primary, ", "); got != want {
		if got == "" {
			got = "none"
		}
		diffs = append(diffs, fmt.Sprintf("primary key (%s), want (%s)", got, want))
	}
	delete(unique, "PRIMARY")
	names := make([]string, 0, len(unique))
	for name := range unique {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		diffs = append(diffs, fmt.Sprintf("unique key %s (%s) is not relay's", name, strings.Join(unique[name], ", ")))
	}
	return diffs, nil
}

// uniqueKeys lists the columns of each unique index of a table, in index order.
func uniqueKeys(ctx context.Context, db *sql.DB, name string) (map[string][]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX`, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var index, col string
		if err := rows.Scan(&index, &col); err != nil {
			return nil, err
		}
		out[index] = append(out[index], strings.ToLower(col))
	}
	return out, rows.Err()
}

// Exclusive lists the tables whose rows name no job, so one job at most may write each (the
// ledger's ClaimSchema); the dead-letter rows carry their job, so jobs may share that table.
func (s Schema) Exclusive() []string {
	var out []string
	for _, t := range s.Aggregates {
		out = append(out, t.Name)
	}
	if s.Detail != "" {
		out = append(out, s.Detail)
	}
	return out
}
