package xa

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/testenv"
)

func setup(t *testing.T) (*sql.DB, context.Context) {
	db := testenv.Open(t, testenv.Database(t))
	ctx := testenv.Context(t, time.Minute)
	if _, err := db.ExecContext(ctx, `CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	return db, ctx
}

func listedTag(t *testing.T, ctx context.Context, db *sql.DB, tag string) bool {
	t.Helper()
	rs, err := ListPrepared(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.GTRID == tag {
			return true
		}
	}
	return false
}

// sessionAlive reports whether the server still runs session id.
func sessionAlive(t *testing.T, ctx context.Context, db *sql.DB, id int64) bool {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// rowCount is the number of rows of kv with key k that a new transaction of another connection sees.
func rowCount(t *testing.T, ctx context.Context, db *sql.DB, k int) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kv WHERE k = ?", k).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A branch prepared on one connection survives that connection's loss (killed server-side) and is
// then committed from another connection; while the preparing session lives, others cannot commit it.
func TestPreparedBranchSurvivesConnectionLoss(t *testing.T) {
	db, ctx := setup(t)
	tag := "xatest-" + testenv.Suffix() + "-0"
	b, err := NewBranch(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	id := b.ConnID()
	if err := b.Start(ctx, tag); err != nil {
		t.Fatal(err)
	}
	if err := b.Exec(ctx, "INSERT INTO kv VALUES (1, 42)"); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if b.State() != Prepared {
		t.Fatalf("state %s, want prepared", b.State())
	}
	if !listedTag(t, ctx, db, tag) {
		t.Fatal("prepared branch not listed by XA RECOVER")
	}
	// MariaDB: another session cannot commit it while the preparing session is alive.
	err = Resolve(ctx, db, tag, true)
	if !fault.IsMySQL(err, fault.XAErNota) {
		t.Fatalf("commit from another session while the owner lives: got %v, want XAER_NOTA (1397)", err)
	}

	if _, err := db.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
		t.Fatal(err)
	}
	b.Close() // discarded, never back in the pool
	if b.State() != Broken {
		t.Fatalf("closing a prepared branch left state %s, want broken (discarded)", b.State())
	}
	var n int
	_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kv").Scan(&n)
	if n != 0 {
		t.Fatalf("prepared row visible before commit: %d rows", n)
	}
	if !listedTag(t, ctx, db, tag) {
		t.Fatal("prepared branch lost with its connection")
	}
	// The server may take a moment to reap the killed session.
	err = fault.Do(ctx, fault.Policy{Attempts: 50, Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond}, func(ctx context.Context) error {
		err := Resolve(ctx, db, tag, true)
		if fault.IsMySQL(err, fault.XAErNota) {
			return fault.Transient(err)
		}
		return err
	}, nil)
	if err != nil {
		t.Fatalf("commit from another connection: %v", err)
	}
	var v int
	if err := db.QueryRowContext(ctx, "SELECT v FROM kv WHERE k = 1").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after commit: v=%d err=%v, want 42", v, err)
	}
	if listedTag(t, ctx, db, tag) {
		t.Fatal("committed branch still listed")
	}
}

// An unprepared branch dies with its connection; a prepared one can be rolled back by another session.
func TestActiveBranchRollsBackWithConnection(t *testing.T) {
	db, ctx := setup(t)
	tag := "xatest-" + testenv.Suffix() + "-1"
	b, err := NewBranch(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx, tag); err != nil {
		t.Fatal(err)
	}
	if err := b.Exec(ctx, "INSERT INTO kv VALUES (2, 1)"); err != nil {
		t.Fatal(err)
	}
	id := b.ConnID()
	b.Close()
	// The branch goes with its session: wait for the server to end it, not for a guessed time.
	testenv.Eventually(t, 10*time.Second, func() bool { return !sessionAlive(t, ctx, db, id) }, "the closed branch's session to end")
	if listedTag(t, ctx, db, tag) {
		t.Fatal("an active (unprepared) branch outlived its connection")
	}
	if n := rowCount(t, ctx, db, 2); n != 0 {
		t.Fatalf("rows of an unprepared branch are visible: %d", n)
	}
	// Rolled back, not merely invisible: its row lock is gone, another session writes the key at once.
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(ctx, "INSERT INTO kv VALUES (2, 7)"); err != nil {
		t.Fatalf("writing the key of the ended branch: %v (its lock outlived the session)", err)
	}
	if err := Resolve(ctx, db, tag, true); !fault.IsMySQL(err, fault.XAErNota) {
		t.Fatalf("commit of the ended unprepared branch: %v, want XAER_NOTA (1397): no such branch", err)
	}
}

// An empty prepared branch, once its session is gone, answers XA_RBROLLBACK to a commit from
// another session (which is why relay opens no branch for an empty epoch in the first place);
// Resolve reports it as ErrRolledBack, for the caller to tell an empty branch from lost rows.
func TestEmptyPreparedBranch(t *testing.T) {
	db, ctx := setup(t)
	tag := "xatest-" + testenv.Suffix() + "-2"
	b, err := NewBranch(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx, tag); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	// Until the server reaped the closed session, the branch is still its own (XAER_NOTA).
	var err2 error
	testenv.Poll(10*time.Second, func() bool {
		err2 = Resolve(ctx, db, tag, true)
		return !fault.IsMySQL(err2, fault.XAErNota)
	})
	if !errors.Is(err2, ErrRolledBack) || !fault.IsMySQL(err2, fault.XARBRollback) {
		t.Fatalf("commit of an empty prepared branch: got %v, want ErrRolledBack (error 1402 XA_RBROLLBACK)", err2)
	}
	if listedTag(t, ctx, db, tag) {
		t.Fatal("empty branch still listed after XA_RBROLLBACK")
	}
}

func TestXIDLiteral(t *testing.T) {
	if got := XID("job-1-0"); got != "X'6a6f622d312d30'" {
		t.Fatalf("XID = %s", got)
	}
}

// The lock views name who a waiting session waits for: first the live session writing the row,
// then, once that session prepared and vanished, a transaction with no session (thread 0). Rolling
// the branch back releases the waiter.
func TestBlockersNameTheHolder(t *testing.T) {
	db, ctx := setup(t)
	tag := "xatest-" + testenv.Suffix() + "-0"
	a, err := NewBranch(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, tag); err != nil {
		t.Fatal(err)
	}
	if err := a.Exec(ctx, "INSERT INTO kv VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	waiter, err := NewBranch(ctx, db, "SET SESSION innodb_lock_wait_timeout = 60")
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	done := make(chan error, 1)
	go func() {
		_, err := waiter.conn.ExecContext(ctx, "UPDATE kv SET v = v + 1 WHERE k = 1")
		done <- err
	}()
	waitBlocker := func(want int64) {
		t.Helper()
		var last []database.Blocker
		if testenv.Poll(10*time.Second, func() bool {
			bs, err := database.Blockers(ctx, db, waiter.ConnID())
			if err != nil {
				t.Fatal(err)
			}
			last = bs
			return len(bs) == 1 && bs[0].Thread == want
		}) {
			return
		}
		t.Fatalf("blockers of %d: %+v, want one held by connection %d", waiter.ConnID(), last, want)
	}
	waitBlocker(a.ConnID())
	if err := a.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if !listedTag(t, ctx, db, tag) {
		t.Fatal("prepared branch not listed by XA RECOVER")
	}
	a.Close() // discarded with the branch prepared: it outlives the session
	waitBlocker(0)
	if !listedTag(t, ctx, db, tag) {
		t.Fatal("prepared branch lost with its session")
	}
	if err := Resolve(ctx, db, tag, false); err != nil {
		t.Fatal(err)
	}
	if listedTag(t, ctx, db, tag) {
		t.Fatal("rolled-back branch still listed by XA RECOVER")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter after the rollback: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiter still blocked after the branch was rolled back")
	}
	// The waiter's UPDATE found no row: the rolled-back insert never became visible.
	if n := rowCount(t, ctx, db, 1); n != 0 {
		t.Fatalf("%d rows of the rolled-back branch are visible", n)
	}
}
