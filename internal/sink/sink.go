// Package sink holds the sink tables (created, and checked against their definitions) and renders
// the epoch's dead-letter and append-sink rows as SQL; internal/spec renders the aggregate upserts.
//
// Invariants: statements carry no placeholders; every value is a literal relay formats itself:
// numbers from exact fixed-point, strings as hex literals, so no byte of input can change the
// statement and no charset conversion can change a sku (interpolated arguments would be escaped by
// the driver, which depends on the connection's charset). The same text runs in either mode's
// transaction, an XA branch or a held-mode local transaction.
package sink

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/money"
)

// Schema is the sink tables.
type Schema struct {
	Aggregates []Table // from the pipeline spec (spec.Plan.Schema), in spec order
	DLQ        string  // dead-letter table (relay_dlq)
	Detail     string  // optional append sink, one row per order; empty when off
}

// Flavor distinguishes the two servers where their SQL differs.
type Flavor int

const (
	MySQL Flavor = iota
	MariaDB
)

// DetectFlavor reads the server's version string.
func DetectFlavor(ctx context.Context, db *sql.DB) (Flavor, string, error) {
	var v string
	if err := db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&v); err != nil {
		return MySQL, "", err
	}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		return MariaDB, v, nil
	}
	return MySQL, v, nil
}

// BinaryCollation compares sku as bytes without pad-space, so "sku-1" and "sku-1 " stay two rows.
// Every string key column relay creates uses it (internal/spec too).
func BinaryCollation(f Flavor) string {
	if f == MariaDB {
		return "utf8mb4_nopad_bin"
	}
	return "utf8mb4_0900_bin"
}

// Create makes the sink tables if they are missing, then holds every one of them, new or old, to
// the definition relay writes (Check): relay never alters a table, it refuses one that differs.
func (s Schema) Create(ctx context.Context, db *sql.DB, f Flavor) error {
	for i, q := range s.CreateStatements(f) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create sink table %s: %w", s.tables()[i].Name, err)
		}
	}
	return s.Check(ctx, db, f)
}

// CreateStatements are the CREATE TABLE IF NOT EXISTS statements of the sink tables: aggregate,
// dead letters, details if configured, in that order.
func (s Schema) CreateStatements(f Flavor) []string {
	var out []string
	for _, t := range s.tables() {
		out = append(out, t.CreateSQL(f))
	}
	return out
}

func quote(ident string) string { return "`" + ident + "`" }

// DLQRow is one bad record.
type DLQRow struct {
	Topic     string
	Partition int32
	Offset    int64
	Reason    string
	Payload   []byte // already truncated to the configured bound
	Size      int    // original payload size
}

// DetailRow is one order of the append sink.
type DetailRow struct {
	OrderID   string
	SKU       string
	Amount    int64 // money units
	TS        int64 // epoch ms
	Topic     string
	Partition int32
	Offset    int64
}

// AppendDLQInsert renders one multi-row insert of bad records.
func (s Schema) AppendDLQInsert(dst []byte, job string, checkpoint int64, rows []DLQRow) []byte {
	return appendInsert(dst, s.DLQ, "job, topic, kpartition, koffset, reason, payload, payload_bytes, checkpoint_id", len(rows), func(dst []byte, i int) []byte {
		r := rows[i]
		dst = AppendHexString(dst, job)
		dst = append(dst, ',')
		dst = appendSource(dst, r.Topic, r.Partition, r.Offset)
		dst = append(dst, ',')
		dst = AppendHexString(dst, r.Reason)
		dst = append(dst, ",X'"...)
		dst = hex.AppendEncode(dst, r.Payload)
		dst = append(dst, "',"...)
		dst = strconv.AppendInt(dst, int64(r.Size), 10)
		dst = append(dst, ',')
		return strconv.AppendInt(dst, checkpoint, 10)
	})
}

// AppendDetailInsert renders one multi-row insert into the append sink.
func (s Schema) AppendDetailInsert(dst []byte, rows []DetailRow) []byte {
	return appendInsert(dst, s.Detail, "order_id, sku, amount, event_time, src_topic, src_partition, src_offset", len(rows), func(dst []byte, i int) []byte {
		r := rows[i]
		dst = AppendHexString(dst, r.OrderID)
		dst = append(dst, ',')
		dst = AppendHexString(dst, r.SKU)
		dst = append(dst, ',')
		dst = money.AppendUnits(dst, r.Amount)
		dst = append(dst, ",'"...)
		dst = time.UnixMilli(r.TS).UTC().AppendFormat(dst, "2006-01-02 15:04:05.000")
		dst = append(dst, "',"...)
		return appendSource(dst, r.Topic, r.Partition, r.Offset)
	})
}

// appendInsert renders INSERT INTO table (columns) VALUES and n rows, row i's values written by
// values between its parentheses: the one shape of relay's multi-row inserts.
func appendInsert(dst []byte, table, columns string, n int, values func(dst []byte, i int) []byte) []byte {
	dst = append(dst, "INSERT INTO "...)
	dst = append(dst, quote(table)...)
	dst = append(dst, " ("...)
	dst = append(dst, columns...)
	dst = append(dst, ") VALUES "...)
	for i := 0; i < n; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '(')
		dst = values(dst, i)
		dst = append(dst, ')')
	}
	return dst
}

// appendSource renders where a record came from: topic, partition, offset.
func appendSource(dst []byte, topic string, partition int32, offset int64) []byte {
	dst = AppendHexString(dst, topic)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, ',')
	return strconv.AppendInt(dst, offset, 10)
}

// AppendHexString writes s as a utf8mb4 hex literal: exact bytes, nothing to escape (the one
// string-literal form relay renders, internal/spec too).
func AppendHexString(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "''"...)
	}
	dst = append(dst, "_utf8mb4 X'"...)
	dst = hex.AppendEncode(dst, []byte(s))
	return append(dst, '\'')
}
