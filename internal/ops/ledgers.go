// Ledgers across a server: which jobs, in any ledger database a connection can see, read a topic.
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
	rows, err := db.QueryContext(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'relay_offsets' ORDER BY table_schema`)
	if err != nil {
		return nil, fmt.Errorf("ledger databases: %w", err)
	}
	var dbs []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("ledger databases: %w", err)
		}
		dbs = append(dbs, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger databases: %w", err)
	}
	var out []TopicReader
	for _, name := range dbs {
		q := "SELECT job, COUNT(*) FROM `" + strings.ReplaceAll(name, "`", "``") + "`.relay_offsets WHERE topic = ? GROUP BY job ORDER BY job"
		if out, err = appendReaders(ctx, db, out, name, q, topic); err != nil {
			return nil, err
		}
	}
	return out, nil
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
