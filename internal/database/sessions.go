// Sessions: which server sessions this process opened, so that they can be ended on the server.
//
// Invariant: every connection a tracked pool opens is listed here from its first statement until
// the server is known to have ended it. Closing a connection on the client does not end its
// session when the network is gone (a blackholed socket): the server keeps it, with its GET_LOCK
// and its attached XA branch, until wait_timeout. Such sessions stay listed as zombies until a
// KILL (by this process after a restart, or by the next owner of the job) made sure they are gone,
// or the server no longer lists them (Prune, at every lease renewal): the list stays bounded by the
// sessions the server has, not by every connection the pool ever closed. A thread id names a session only within one server lifetime, so each connection also reads the
// server's boot time (now minus Uptime): a new boot time means the server restarted, which ended
// every older session. Those sessions, zombies and connections the pool has not yet found dead
// alike, are then no longer listed (their ids may belong to someone else now), and the boot time
// travels with the ids, so whoever ends them can check they are of the server lifetime it sees.
// A connection the OnOpen hook refuses is closed before its first statement and never reaches the
// pool.

package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/relay-sh/relay/internal/fault"
)

// Tracker lists the server sessions of one pool.
type Tracker struct {
	mu     sync.Mutex
	boot   int64           // the server lifetime the listed sessions belong to (Unix seconds)
	open   map[int64]int64 // open connection → the boot time it was opened under
	zombie map[int64]bool  // closed here in the current lifetime, maybe alive on the server
	onOpen func() error    // told about every new connection of the current lifetime; may refuse it
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{open: map[int64]int64{}, zombie: map[int64]bool{}} }

// bootSlack absorbs the one-second granularity of Uptime: a restart moves the boot time by the
// whole previous uptime.
const bootSlack = 2

// SameBoot reports whether two boot times name one server lifetime.
func SameBoot(a, b int64) bool { return a-b <= bootSlack && b-a <= bootSlack }

// opened records a new connection and returns the lifetime it belongs to.
func (t *Tracker) opened(id, boot int64) int64 {
	t.mu.Lock()
	if !SameBoot(boot, t.boot) {
		if boot < t.boot {
			// A connection that raced a restart and lost: already gone with its server.
			t.mu.Unlock()
			return boot
		}
		t.boot = boot
		clear(t.zombie)
	}
	t.open[id] = t.boot
	t.mu.Unlock()
	return t.boot
}

// admit tells the hook about a new connection of lifetime boot, before its first use. A connection
// that raced a restart and lost is not told about: it is already gone with its server.
func (t *Tracker) admit(boot int64) error {
	t.mu.Lock()
	hook := t.onOpen
	current := boot == t.boot
	t.mu.Unlock()
	if hook == nil || !current {
		return nil
	}
	return hook()
}

func (t *Tracker) closed(id, boot int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.open[id]; ok && b == boot {
		delete(t.open, id)
		if boot == t.boot {
			t.zombie[id] = true
		}
	}
}

// OnOpen sets the function told about each new connection (nil: none). It runs in the connecting
// goroutine before the connection is used: the fence records the session before it can hold
// anything. When it returns an error the connection is refused: closed before its first statement
// (it stays listed as a zombie, like any closed one), and the pool's Conn fails with that error. A
// fence that can no longer record (its lease lost) refuses so: a session it cannot record could
// hold row locks that the next owner's takeover would not end.
func (t *Tracker) OnOpen(f func() error) {
	t.mu.Lock()
	t.onOpen = f
	t.mu.Unlock()
}

// Sessions is what a tracker lists: the server lifetime and the session ids in it.
type Sessions struct {
	Boot int64   `json:"boot"`
	IDs  []int64 `json:"ids"`
}

// List returns every session that may be alive on the server: open ones and zombies, sorted.
func (t *Tracker) List() Sessions {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int64, 0, len(t.open)+len(t.zombie))
	for id, boot := range t.open {
		if boot == t.boot {
			out = append(out, id)
		}
	}
	for id := range t.zombie {
		out = append(out, id)
	}
	slices.Sort(out)
	return Sessions{Boot: t.boot, IDs: out}
}

// KillZombies ends this process's closed sessions on the server db (the pool they came from) and
// forgets those that are gone.
func (t *Tracker) KillZombies(ctx context.Context, db *sql.DB) (killed []int64, err error) {
	z := t.zombies()
	if len(z.IDs) == 0 {
		return nil, nil
	}
	if killed, err = Kill(ctx, db, z, -1); err != nil {
		return killed, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range z.IDs {
		delete(t.zombie, id)
	}
	return killed, nil
}

// zombies returns the closed sessions of the current lifetime, sorted.
func (t *Tracker) zombies() Sessions {
	t.mu.Lock()
	defer t.mu.Unlock()
	z := Sessions{Boot: t.boot, IDs: make([]int64, 0, len(t.zombie))}
	for id := range t.zombie {
		z.IDs = append(z.IDs, id)
	}
	slices.Sort(z.IDs)
	return z
}

// Prune forgets the zombies the server db (the pool they came from) no longer lists: a connection
// the pool closed (idle, past its lifetime) ends its session on the server, and a session the
// server does not have cannot hold anything. Without it every connection the pool ever closed
// stays listed, and the list the lease records only grows. A session the server still lists stays
// a zombie (it may be a blackholed one, alive until a KILL).
func (t *Tracker) Prune(ctx context.Context, db *sql.DB) error {
	z := t.zombies()
	if len(z.IDs) == 0 {
		return nil
	}
	var q strings.Builder
	args := make([]any, len(z.IDs))
	q.WriteString("SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN (")
	for i, id := range z.IDs {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteByte('?')
		args[i] = id
	}
	q.WriteByte(')')
	rows, err := db.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	listed := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("list sessions: %w", err)
		}
		listed[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	t.forget(z, listed)
	return nil
}

// forget drops the zombies of z that listed does not name, unless the server restarted meanwhile
// (then they are already gone, and the ids may be a new lifetime's).
func (t *Tracker) forget(z Sessions, listed map[int64]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.boot != z.Boot {
		return
	}
	for _, id := range z.IDs {
		if !listed[id] {
			delete(t.zombie, id)
		}
	}
}

// Kill ends the sessions s lists on the server db, except the session spare, and returns those it
// ended. Only sessions of s's server lifetime are ended (after a restart the ids name others), and
// only those of the current MySQL user that still exist: an id is only a number, lifetime and user
// are the check that it is still one of relay's own.
func Kill(ctx context.Context, db *sql.DB, s Sessions, spare int64) ([]int64, error) {
	if len(s.IDs) == 0 {
		return nil, nil
	}
	boot, err := Boot(ctx, db)
	if err != nil {
		return nil, err
	}
	if !SameBoot(boot, s.Boot) {
		return nil, nil
	}
	var killed []int64
	for _, id := range s.IDs {
		if id == spare {
			continue
		}
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE ID = ? AND USER = SUBSTRING_INDEX(USER(), '@', 1) AND ID <> CONNECTION_ID()`, id).Scan(&n)
		if err != nil {
			return killed, fmt.Errorf("find session %d: %w", id, err)
		}
		if n == 0 {
			continue
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil && !fault.IsMySQL(err, fault.ErNoSuchThread) {
			return killed, fmt.Errorf("kill session %d: %w", id, err)
		}
		killed = append(killed, id)
	}
	return killed, nil
}

// trackingConnector wraps the driver's connector: every new connection reports its thread id.
type trackingConnector struct {
	driver.Connector
	t *Tracker
}

func (c trackingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("driver connection %T cannot query", conn)
	}
	id, err := queryInt(ctx, q, "SELECT CONNECTION_ID()", 0)
	var boot int64
	if err == nil {
		boot, err = queryBoot(ctx, q)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("session identity: %w", err)
	}
	tc := &trackedConn{Conn: conn, id: id, boot: c.t.opened(id, boot), t: c.t}
	if err := c.t.admit(tc.boot); err != nil {
		_ = tc.Close()
		return nil, fmt.Errorf("session %d refused: %w", id, err)
	}
	return tc, nil
}

// bootQuery gives the server's time and uptime (Uptime is a status variable: no portable SELECT
// reads it on both MariaDB and MySQL 8).
const (
	nowQuery    = "SELECT UNIX_TIMESTAMP()"
	uptimeQuery = "SHOW GLOBAL STATUS LIKE 'Uptime'"
)

// Boot returns the server's boot time (Unix seconds, within a second or two): it names one server
// lifetime.
func Boot(ctx context.Context, db *sql.DB) (int64, error) {
	var now, up int64
	var name string
	if err := db.QueryRowContext(ctx, nowQuery).Scan(&now); err != nil {
		return 0, fmt.Errorf("server time: %w", err)
	}
	if err := db.QueryRowContext(ctx, uptimeQuery).Scan(&name, &up); err != nil {
		return 0, fmt.Errorf("server uptime: %w", err)
	}
	return now - up, nil
}

func queryBoot(ctx context.Context, q driver.QueryerContext) (int64, error) {
	now, err := queryInt(ctx, q, nowQuery, 0)
	if err != nil {
		return 0, err
	}
	up, err := queryInt(ctx, q, uptimeQuery, 1)
	return now - up, err
}

// queryInt reads column col of the first row of q as an integer.
func queryInt(ctx context.Context, q driver.QueryerContext, query string, col int) (int64, error) {
	rows, err := q.QueryContext(ctx, query, nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(v); err != nil {
		return 0, fmt.Errorf("%s: %w", query, err)
	}
	switch n := v[col].(type) {
	case int64:
		return n, nil
	case uint64:
		return int64(n), nil
	case []byte:
		return strconv.ParseInt(string(n), 10, 64)
	}
	return 0, fmt.Errorf("%s: value of type %T", query, v[col])
}

// trackedConn forwards every interface go-sql-driver's connection implements, so database/sql
// uses it exactly as it would the driver's own.
type trackedConn struct {
	driver.Conn
	id   int64
	boot int64
	t    *Tracker
}

func (c *trackedConn) Close() error {
	c.t.closed(c.id, c.boot)
	return c.Conn.Close()
}

func (c *trackedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *trackedConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c *trackedConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *trackedConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *trackedConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *trackedConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *trackedConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c *trackedConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}
