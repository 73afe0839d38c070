package database_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/testenv"
)

// A pool opened with ReadCommitted runs every session at READ COMMITTED, new ones included.
func TestReadCommittedSessions(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	for _, rc := range []bool{false, true} {
		db, err := database.Open(testenv.AdminDSN(t), database.Session{ReadCommitted: rc})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var conns []*sql.Conn
		for range 3 { // three sessions at once: each new one gets the setting
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		want := map[bool]string{false: "REPEATABLE-READ", true: "READ-COMMITTED"}[rc]
		for _, c := range conns {
			var name, level string
			if err := c.QueryRowContext(ctx, "SHOW SESSION VARIABLES WHERE Variable_name IN ('transaction_isolation', 'tx_isolation')").Scan(&name, &level); err != nil {
				t.Fatal(err)
			}
			if level != want {
				t.Errorf("ReadCommitted %v: session at %s, want %s", rc, level, want)
			}
			_ = c.Close()
		}
		if level, err := database.Isolation(ctx, db); err != nil || level != want {
			t.Errorf("Isolation = %q, %v; want %s", level, err, want)
		}
	}
}

// The reason for READ COMMITTED, shown on the server: a branch that updated a row keeps a lock on
// it until its checkpoint ends; when inserts split the page so that the row becomes the first of
// the new right page, REPEATABLE READ turns that record lock into a gap lock on the left page's
// end, and another branch inserting a new key just below the row waits for the first one (in
// relay: for a branch that waits for every subtask to prepare). At READ COMMITTED nothing waits,
// not even while the holder's upsert statements run during the splits. (A longer version of this
// probe, 20 upserts of 2000 rows during 9 000 inserts: 195 waits under REPEATABLE READ, 0 under
// READ COMMITTED.)
func TestReadCommittedNoInheritedGapLock(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)
	dsn := testenv.Database(t)
	for _, rc := range []bool{false, true} {
		db, err := database.Open(dsn, database.Session{ReadCommitted: rc, LockWaitTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		waits, err := splitWaits(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("ReadCommitted %v: %d inserts waited for the other branch's lock", rc, waits)
		if !rc && waits == 0 {
			t.Fatal("no insert waited under REPEATABLE READ: the test no longer shows the gap lock it guards against")
		}
		if rc && waits > 0 {
			t.Fatalf("%d inserts waited for another branch's lock at READ COMMITTED", waits)
		}
	}
}

// splitWaits fills pages of a fresh table around a row another XA branch holds, and counts the
// inserts of keys below that row that hit a lock wait timeout.
func splitWaits(ctx context.Context, db *sql.DB) (int, error) {
	pad := strings.Repeat("x", 900) // about 17 rows a page: splits come quickly
	stmts := []string{"DROP TABLE IF EXISTS gap_probe",
		"CREATE TABLE gap_probe (k BIGINT PRIMARY KEY, pad VARCHAR(1000) NOT NULL) ENGINE=InnoDB"}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return 0, err
		}
	}
	// Rows every 1000, each then a holder's row: branches hold locks on all of them.
	const rows = 64
	for i := 1; i <= rows; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO gap_probe VALUES (?, ?)", i*1000, pad); err != nil {
			return 0, err
		}
	}
	holder, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer holder.Close()
	hold := []string{"XA START 'gap_holder'"}
	for i := 1; i <= rows; i++ {
		hold = append(hold, fmt.Sprintf("INSERT INTO gap_probe VALUES (%d, 'h') ON DUPLICATE KEY UPDATE pad = pad", i*1000))
	}
	for _, q := range hold {
		if _, err := holder.ExecContext(ctx, q); err != nil {
			return 0, err
		}
	}
	// Meanwhile the holder keeps upserting all its rows in one statement, as a subtask flushing
	// its share does while its peers flush theirs: splits also happen while its statement runs.
	again := "INSERT INTO gap_probe VALUES " + strings.Repeat("(?, 'h'),", rows-1) + "(?, 'h') ON DUPLICATE KEY UPDATE pad = pad"
	keys := make([]any, rows)
	for i := range keys {
		keys[i] = (i + 1) * 1000
	}
	stop := make(chan struct{})
	upserts := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				upserts <- nil
				return
			default:
			}
			if _, err := holder.ExecContext(ctx, again, keys...); err != nil {
				upserts <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		<-upserts
		_, _ = holder.ExecContext(context.WithoutCancel(ctx), "XA END 'gap_holder'")
		_, _ = holder.ExecContext(context.WithoutCancel(ctx), "XA ROLLBACK 'gap_holder'")
	}()
	writer, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer writer.Close()
	waits := 0
	// New keys between the held rows, from each row's upper neighbour down, as a subtask inserting
	// new (window, sku) keys does. Each insert commits by itself, so a timeout loses nothing else.
	for off := 999; off >= 1; off -= 37 {
		for i := 1; i < rows; i++ {
			q := fmt.Sprintf("INSERT INTO gap_probe VALUES (%d, '%s')", i*1000+off, pad)
			if _, err := writer.ExecContext(ctx, q); err != nil {
				if fault.MySQLNumber(err) == fault.ErLockWaitTimeout {
					waits++
					if waits >= 3 {
						return waits, nil
					}
					continue
				}
				return waits, errors.Join(fmt.Errorf("insert %d", i*1000+off), err)
			}
		}
	}
	return waits, nil
}

// The test server runs the binary log in ROW format (scripts/services.sh), as relay requires.
func TestReadBinlog(t *testing.T) {
	db := testenv.Open(t, testenv.AdminDSN(t))
	b, err := database.ReadBinlog(testenv.Context(t, time.Minute), db)
	if err != nil {
		t.Fatal(err)
	}
	if !b.On || b.Format != "ROW" || b.CheckReadCommitted() != nil {
		t.Fatalf("ReadBinlog = %+v (check %v), want the binary log on in ROW format", b, b.CheckReadCommitted())
	}
}
