package database_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/testenv"
)

// Connections opened at the same time are all listed (the server hands out ids in accept order,
// handshakes finish in any order).
func TestTrackerConcurrentConnects(t *testing.T) {
	tr := database.NewTracker()
	db, err := database.Open(testenv.AdminDSN(t), database.Session{Track: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := testenv.Context(t, time.Minute)
	for round := 0; round < 10; round++ {
		conns := make([]*sql.Conn, 16)
		var wg sync.WaitGroup
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if c, err := db.Conn(ctx); err == nil {
					conns[i] = c
				} else {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		open := 0
		for _, id := range tr.List().IDs {
			for _, c := range conns {
				if c != nil {
					if cid, _ := database.ConnID(ctx, c); cid == id {
						open++
					}
				}
			}
		}
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
		if open != len(conns) {
			t.Fatalf("round %d: %d of %d open sessions listed", round, open, len(conns))
		}
	}
}

// A connection dropped by the client while the network is blackholed stays alive on the server
// (with whatever it holds); KillZombies ends it, and nothing else.
func TestKillZombies(t *testing.T) {
	cfg, err := mysql.ParseDSN(testenv.AdminDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	px := testenv.NewFaultProxy(t, cfg.Addr)
	cfg.Addr = px.Addr()
	tr := database.NewTracker()
	db, err := database.Open(cfg.FormatDSN(), database.Session{Track: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	direct := testenv.Open(t, testenv.AdminDSN(t))
	ctx := testenv.Context(t, time.Minute)
	doomed, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := database.ConnID(ctx, doomed)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range px.Links() { // the doomed connection's, the only one so far
		l.Blackhole(testenv.Forever)
	}
	keep, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keepID, _ := database.ConnID(ctx, keep)
	_ = doomed.Raw(func(any) error { return driver.ErrBadConn }) // dropped, as relay drops a doubtful connection
	_ = doomed.Close()
	alive := func(id int64) bool {
		var n int
		if err := direct.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !alive(id) {
		t.Fatal("the blackholed session ended by itself: the test shows nothing")
	}
	killed, err := tr.KillZombies(context.WithoutCancel(ctx), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(killed) != 1 || killed[0] != id {
		t.Fatalf("killed %v, want [%d]", killed, id)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return !alive(id) }, fmt.Sprintf("session %d to end after the KILL", id))
	if !alive(keepID) {
		t.Fatal("a session in use was ended")
	}
	_ = keep.Close()
}
