// Lock waits: who holds the row lock a session is waiting for.
//
// Invariant: read from the server's own views while the wait lasts, never inferred. What it
// reports decides nothing about another session: relay only logs it, or ends its own waiting
// statement when the holder is one of its own subtasks. MariaDB and MySQL 5.7 expose the waits
// in information_schema; MySQL 8 moved them to performance_schema, so both are tried, by error
// number.

package database

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/fault"
)

// Blocker is a transaction holding a lock that another session waits for.
type Blocker struct {
	TrxID      string
	Thread     int64 // 0: no session owns it, a prepared XA transaction left by a client that is gone
	State      string
	Started    time.Time
	RowsLocked int64
	Query      string // the blocker's current statement, if it runs one
}

// blockerCols are read from INNODB_TRX b, the blocker; r is the waiting transaction.
const blockerCols = `SELECT b.trx_id, COALESCE(b.trx_mysql_thread_id, 0), b.trx_state, b.trx_started,
	b.trx_rows_locked, COALESCE(b.trx_query, '')`

const blockersMariaDB = blockerCols + `
	FROM information_schema.INNODB_LOCK_WAITS w
	JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
	JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
	WHERE r.trx_mysql_thread_id = ?`

const blockersMySQL8 = blockerCols + `
	FROM performance_schema.data_lock_waits w
	JOIN information_schema.INNODB_TRX r ON r.trx_id = w.REQUESTING_ENGINE_TRANSACTION_ID
	JOIN information_schema.INNODB_TRX b ON b.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID
	WHERE r.trx_mysql_thread_id = ?`

// Blockers lists the transactions that session thread is waiting for right now (none when it is
// not waiting). Reading the views needs the PROCESS privilege.
func Blockers(ctx context.Context, db *sql.DB, thread int64) ([]Blocker, error) {
	out, err := blockers(ctx, db, blockersMariaDB, thread)
	if fault.IsMySQL(err, fault.ErUnknownTable) {
		out, err = blockers(ctx, db, blockersMySQL8, thread)
	}
	if err != nil {
		return nil, fmt.Errorf("lock waits of thread %d: %w", thread, err)
	}
	return out, nil
}

func blockers(ctx context.Context, db *sql.DB, q string, thread int64) ([]Blocker, error) {
	rows, err := db.QueryContext(ctx, q, thread)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Blocker
	for rows.Next() {
		var b Blocker
		if err := rows.Scan(&b.TrxID, &b.Thread, &b.State, &b.Started, &b.RowsLocked, &b.Query); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// ConnID is the server's thread id of the session on c.
func ConnID(ctx context.Context, c *sql.Conn) (int64, error) {
	var id int64
	err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	return id, err
}
