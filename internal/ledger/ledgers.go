// Ledgers across a server: which jobs, in any ledger database a connection can see, read a topic,
// and which ledger databases know a job.
//
// Invariant: read-only, and never narrower than the connection's view: every database of the server
// that holds relay's ledger tables and that the user may read is searched, because a ledger need not
// live in the database a DSN names (RELAY_LEDGER_DSN, several jobs on one server).

package ledger

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
	var out []TopicReader
	err := eachLedger(ctx, db, "relay_offsets", func(name, quoted string) (err error) {
		out, err = appendReaders(ctx, db, out, name, "SELECT job, COUNT(*) FROM "+quoted+".relay_offsets WHERE topic = ? GROUP BY job ORDER BY job", topic)
		return err
	})
	return out, err
}

// JobLedgers lists the databases of db's server (those db's user can see) whose ledger knows job:
// where a branch of that job must be resolved from.
func JobLedgers(ctx context.Context, db *sql.DB, job string) ([]string, error) {
	var out []string
	err := eachLedger(ctx, db, "relay_jobs", func(name, quoted string) error {
		var n int
		q := "SELECT COUNT(*) FROM " + quoted + ".relay_jobs WHERE job = ? OR job LIKE CONCAT(?, '/%')"
		if err := db.QueryRowContext(ctx, q, job, job).Scan(&n); err != nil {
			return fmt.Errorf("ledger %s: %w", name, err)
		}
		if n > 0 {
			out = append(out, name)
		}
		return nil
	})
	return out, err
}

// eachLedger calls fn, in name order, with every database that holds the ledger table named table
// and that name quoted for SQL.
func eachLedger(ctx context.Context, db *sql.DB, table string, fn func(name, quoted string) error) error {
	rows, err := db.QueryContext(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = ? ORDER BY table_schema`, table)
	if err != nil {
		return fmt.Errorf("ledger databases: %w", err)
	}
	// The list is read in full first, so no result set stays open across fn's queries.
	var dbs []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("ledger databases: %w", err)
		}
		dbs = append(dbs, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger databases: %w", err)
	}
	for _, name := range dbs {
		if err := fn(name, "`"+strings.ReplaceAll(name, "`", "``")+"`"); err != nil {
			return err
		}
	}
	return nil
}

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
