// Ledgers across a server: which jobs, in any ledger database a connection can see, read a topic,
// and which ledger databases know a job.
//
// Invariant: read-only, and never narrower than the connection's view: every database of the server
// that holds relay's ledger tables and that the user may read is searched, because a ledger need not
// live in the database a DSN names (RELAY_LEDGER_DSN, several jobs on one server).
package ops

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// TopicReader is a job whose ledger holds resume offsets of a topic.
type TopicReader struct {
	Database   string // the ledger's database
	Job        string
	Partitions int // partitions of the topic with a resume offset
}

// TopicReaders lists the jobs whose ledger, in any database of db's server that db's user can see,
// has resume offsets of topic. relay_offsets is written with every decision, so every job that
// ever committed a checkpoint of the topic is listed.
func TopicReaders(ctx context.Context, db *sql.DB, topic string) ([]TopicReader, error) {
	dbs, err := ledgerDatabases(ctx, db, "relay_offsets")
	if err != nil {
		return nil, err
	}
	var out []TopicReader
	for _, name := range dbs {
		q := "SELECT job, COUNT(*) FROM " + quoteName(name) + ".relay_offsets WHERE topic = ? GROUP BY job ORDER BY job"
		if out, err = appendReaders(ctx, db, out, name, q, topic); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// JobLedgers lists the databases of db's server (those db's user can see) whose ledger knows job:
// where a branch of that job must be resolved from.
func JobLedgers(ctx context.Context, db *sql.DB, job string) ([]string, error) {
	dbs, err := ledgerDatabases(ctx, db, "relay_jobs")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range dbs {
		var n int
		q := "SELECT COUNT(*) FROM " + quoteName(name) + ".relay_jobs WHERE job = ? OR job LIKE CONCAT(?, '/%')"
		if err := db.QueryRowContext(ctx, q, job, job).Scan(&n); err != nil {
			return nil, fmt.Errorf("ledger %s: %w", name, err)
		}
		if n > 0 {
			out = append(out, name)
		}
	}
	return out, nil
}

// ledgerDatabases lists the databases that hold the ledger table named table.
func ledgerDatabases(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = ? ORDER BY table_schema`, table)
	if err != nil {
		return nil, fmt.Errorf("ledger databases: %w", err)
	}
	defer rows.Close()
	var dbs []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("ledger databases: %w", err)
		}
		dbs = append(dbs, name)
	}
	return dbs, rows.Err()
}

func quoteName(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

func appendReaders(ctx context.Context, db *sql.DB, out []TopicReader, name, q, topic string) ([]TopicReader, error) {
	rows, err := db.QueryContext(ctx, q, topic)
	if err != nil {
		return nil, fmt.Errorf("ledger %s: %w", name, err)
	}
	defer rows.Close()
	for rows.Next() {
		r := TopicReader{Database: name}
		if err := rows.Scan(&r.Job, &r.Partitions); err != nil {
			return nil, fmt.Errorf("ledger %s: %w", name, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
