// Table ownership: which job writes a sink table that has no job column.
//
// Invariant: a sink table whose rows do not name their job (the aggregate table, the append sink)
// has at most one owner job in this ledger; relay run claims its tables before it writes, and a
// second job is refused, named with the first, instead of adding its totals into the same rows.
// A claim is keyed by the sink's database and table name, since the ledger may live in another
// database (or on another server) than the tables it records.
//
// Invariant (meanings): an aggregate table's meaning (its canonical spec, spec.Meaning) is recorded
// once per table next to its claim, by the owner job, under its fence, and changes only while
// nothing of the job can be in the table (no committed offsets, read under lock, and no other
// instance of the job running: relay run records the spec it starts with) or by relay spec
// accept; relay run compares the spec with it before writing.

package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/sink"
)

// ErrTableOwned means a sink table belongs to another job.
var ErrTableOwned = errors.New("sink table belongs to another job")

// tablesTable holds one row per claimed sink table.
const tablesTable = `CREATE TABLE IF NOT EXISTS relay_tables (
	schema_name VARCHAR(64) NOT NULL,
	table_name VARCHAR(64) NOT NULL,
	job VARCHAR(64) NOT NULL,
	claimed_at DATETIME(6) NOT NULL,
	PRIMARY KEY (schema_name, table_name)
) ENGINE=InnoDB`

// meaningsTable holds the recorded meaning of each aggregate table; a ledger from before it has
// claims without meanings, recorded at the next start.
const meaningsTable = `CREATE TABLE IF NOT EXISTS relay_table_specs (
	schema_name VARCHAR(64) NOT NULL,
	table_name VARCHAR(64) NOT NULL,
	job VARCHAR(64) NOT NULL,
	meaning TEXT NOT NULL,
	recorded_at DATETIME(6) NOT NULL,
	PRIMARY KEY (schema_name, table_name)
) ENGINE=InnoDB`

// ErrMeaningChanged means a table's recorded meaning changed while relay was starting.
var ErrMeaningChanged = errors.New("recorded table meaning changed")

// TableClaim is the owner of one sink table.
type TableClaim struct {
	Schema    string
	Table     string
	Job       string
	ClaimedAt time.Time
}

func (c TableClaim) refusal(job string) error {
	return fmt.Errorf("%w: table %s.%s is written by job %s (claimed %s UTC); job %s would add its totals into the same rows, which name no job: "+
		"give job %s its own table (mysql.table, mysql.detail_table) or database; only if job %s is retired for good, release the table: "+
		"DELETE FROM relay_tables WHERE schema_name = '%s' AND table_name = '%s'",
		ErrTableOwned, c.Schema, c.Table, c.Job, c.ClaimedAt.Format("2006-01-02 15:04:05"), job, job, c.Job, c.Schema, c.Table)
}

// ClaimSchema makes the job the owner of s's exclusive tables in the sink database sinkDB,
// refusing (ErrTableOwned, naming the owner) a table another job of this ledger writes.
func (l *Ledger) ClaimSchema(ctx context.Context, sinkDB *sql.DB, s sink.Schema) error {
	dbName, err := sink.Database(ctx, sinkDB)
	if err != nil {
		return err
	}
	return l.ClaimTables(ctx, dbName, s.Exclusive()...)
}

// CheckSchema is ClaimSchema without writing; it returns the tables relay run will claim.
func (l *Ledger) CheckSchema(ctx context.Context, sinkDB *sql.DB, s sink.Schema) (unclaimed []string, err error) {
	dbName, err := sink.Database(ctx, sinkDB)
	if err != nil {
		return nil, err
	}
	return l.CheckTables(ctx, dbName, s.Exclusive()...)
}

// ClaimTables makes the job the owner of each table of the sink database schema that has no
// owner yet, and refuses, changing nothing, when another job owns one.
func (l *Ledger) ClaimTables(ctx context.Context, schema string, tables ...string) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("claim tables: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, t := range tables {
		if _, err := tx.ExecContext(ctx, `INSERT IGNORE INTO relay_tables (schema_name, table_name, job, claimed_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6))`,
			schema, t, l.job); err != nil {
			return fmt.Errorf("claim table %s.%s: %w", schema, t, err)
		}
		// A locking read sees the claim that won, even one committed after this transaction began.
		// A shared lock: instances of one job claiming at once all read, none waits for another.
		c := TableClaim{Schema: schema, Table: t}
		if err := tx.QueryRowContext(ctx, `SELECT job, claimed_at FROM relay_tables WHERE schema_name = ? AND table_name = ? LOCK IN SHARE MODE`,
			schema, t).Scan(&c.Job, &c.ClaimedAt); err != nil {
			return fmt.Errorf("claim table %s.%s: %w", schema, t, err)
		}
		if c.Job != l.job {
			return c.refusal(l.job)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("claim tables: %w", err)
	}
	return nil
}

// CheckTables is ClaimTables without writing: it refuses a table another job owns and returns the
// tables still unclaimed.
func (l *Ledger) CheckTables(ctx context.Context, schema string, tables ...string) (unclaimed []string, err error) {
	for _, t := range tables {
		c := TableClaim{Schema: schema, Table: t}
		err := l.db.QueryRowContext(ctx, `SELECT job, claimed_at FROM relay_tables WHERE schema_name = ? AND table_name = ?`, schema, t).
			Scan(&c.Job, &c.ClaimedAt)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			unclaimed = append(unclaimed, t)
		case err != nil:
			return nil, fmt.Errorf("table owner %s.%s: %w", schema, t, err)
		case c.Job != l.job:
			return nil, c.refusal(l.job)
		}
	}
	return unclaimed, nil
}

// Meanings returns the meanings recorded for the job's tables in the sink database schema.
func (l *Ledger) Meanings(ctx context.Context, schema string) (map[string]string, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT table_name, meaning FROM relay_table_specs WHERE schema_name = ? AND job = ?`, schema, l.job)
	if err != nil {
		return nil, fmt.Errorf("table meanings: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var t, m string
		if err := rows.Scan(&t, &m); err != nil {
			return nil, fmt.Errorf("table meanings: %w", err)
		}
		out[t] = m
	}
	return out, rows.Err()
}

// Claimed lists the tables of schema whose recorded owner is the job.
func (l *Ledger) Claimed(ctx context.Context, schema string) (map[string]bool, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT table_name FROM relay_tables WHERE schema_name = ? AND job = ?`, schema, l.job)
	if err != nil {
		return nil, fmt.Errorf("claimed tables: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("claimed tables: %w", err)
		}
		out[t] = true
	}
	return out, rows.Err()
}

// RecordMeanings records the meaning of each table of set and forgets the job's tables in drop, in
// one transaction; the caller holds the job's fence. A table already recorded with another meaning
// is ErrMeaningChanged (whoever recorded it first wins), unless firstUse and the job, read under
// lock, has committed nothing while no other instance of it holds its fence: then none of its rows
// can be in the table yet, and the meaning is replaced. The same rule guards a firstUse drop: a
// forgotten table is dropped only then, and otherwise stays recorded (relay spec accept forgets it).
func (l *Ledger) RecordMeanings(ctx context.Context, schema string, set map[string]string, drop []string, firstUse bool) error {
	c := newClocks("")
	if firstUse {
		var err error
		if c, err = l.settleLeases(ctx); err != nil {
			return fmt.Errorf("record table meanings: %w", err)
		}
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record table meanings: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	replace := false
	if firstUse {
		if replace, err = l.nothingCommitted(ctx, tx, c); err != nil {
			return fmt.Errorf("record table meanings: %w", err)
		}
	}
	for t, m := range set {
		q := `INSERT IGNORE INTO relay_table_specs (schema_name, table_name, job, meaning, recorded_at) VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))`
		if replace {
			q = `INSERT INTO relay_table_specs (schema_name, table_name, job, meaning, recorded_at) VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))
				ON DUPLICATE KEY UPDATE job = VALUES(job), meaning = VALUES(meaning), recorded_at = VALUES(recorded_at)`
		}
		if _, err := tx.ExecContext(ctx, q, schema, t, l.job, m); err != nil {
			return fmt.Errorf("record meaning of %s.%s: %w", schema, t, err)
		}
		// As in ClaimTables: a locking read sees the row that won.
		var job, got string
		if err := tx.QueryRowContext(ctx, `SELECT job, meaning FROM relay_table_specs WHERE schema_name = ? AND table_name = ? LOCK IN SHARE MODE`,
			schema, t).Scan(&job, &got); err != nil {
			return fmt.Errorf("record meaning of %s.%s: %w", schema, t, err)
		}
		if job != l.job || got != m {
			return fmt.Errorf("%w: table %s.%s was recorded for job %s as %s while job %s started (by an instance of the job that runs now, or the job committed): start again (relay spec diff shows the comparison)",
				ErrMeaningChanged, schema, t, job, got, l.job)
		}
	}
	for _, t := range drop {
		if firstUse && !replace {
			break
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM relay_table_specs WHERE schema_name = ? AND table_name = ? AND job = ?`, schema, t, l.job); err != nil {
			return fmt.Errorf("forget meaning of %s.%s: %w", schema, t, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record table meanings: %w", err)
	}
	return nil
}

// upElsewhere reports whether a process of the job other than this key may run from another
// Galera node: its lease, recorded by another node, is not over by the judge c (clocks.go).
func (l *Ledger) upElsewhere(ctx context.Context, tx *sql.Tx, c *clocks) (bool, error) {
	keys, err := l.liveLeases(ctx, tx, c.node)
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if k == l.key {
			continue
		}
		h, err := holderOf(ctx, tx, k, "")
		if err != nil {
			return false, err
		}
		if !c.sameClock(h) && c.judge(k, h) != leaseOver {
			return true, nil
		}
	}
	return false, nil
}

// nothingCommitted reports, inside tx, whether no instance of the job can have written a row: the
// job row is locked first (instances record one at a time, each after taking its own fence, so
// the later one sees the earlier one's lock), no other instance of the job's layout holds its
// fence lock, no other process of the job has a live lease, and the job has no committed offsets
// (a locking read: the latest commit).
func (l *Ledger) nothingCommitted(ctx context.Context, tx *sql.Tx, c *clocks) (bool, error) {
	var layout int
	err := tx.QueryRowContext(ctx, `SELECT layout FROM relay_jobs WHERE job = ? FOR UPDATE`, l.job).Scan(&layout)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	keys, err := l.siblings(ctx, tx, layout)
	if err != nil {
		return false, err
	}
	for _, key := range keys {
		holder, err := lockHolder(ctx, tx, key)
		if err != nil {
			return false, err
		}
		if holder.Valid {
			return false, nil
		}
	}
	// On a Galera cluster a sibling's lock is on its node alone: its lease, recorded by another
	// node, shows it. (On one server, or this node, the locks above say it exactly.)
	if up, err := l.upElsewhere(ctx, tx, c); err != nil || up {
		return false, err
	}
	_, last, err := l.partitionOffsets(ctx, tx, " LOCK IN SHARE MODE")
	return last == 0, err
}
