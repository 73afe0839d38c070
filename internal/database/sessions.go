// Sessions: which server sessions this process opened, so that they can be ended on the server.
//
// Invariant: every connection a tracked pool opens is listed here from its first statement until
// the server is known to have ended it. Closing a connection on the client does not end its
// session when the network is gone (a blackholed socket): the server keeps it, with its GET_LOCK
// and its attached XA branch, until wait_timeout. Such sessions stay listed as zombies until a
// KILL (by this process after a restart, or by the next owner of the job) made sure they are gone.
// Thread ids grow within one server lifetime; a new connection with an id at or below the highest
// seen means the server restarted, which ended every older session: those sessions, zombies and
// connections the pool has not yet found dead alike, are no longer listed (their ids may belong to
// someone else now).
package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"sync"

	"github.com/relay-sh/relay/internal/fault"
)

// Tracker lists the server sessions of one pool.
type Tracker struct {
	mu     sync.Mutex
	life   int            // server lifetimes seen
	open   map[int64]int  // open connection → the lifetime it was opened in
	zombie map[int64]bool // closed here in the current lifetime, maybe alive on the server
	maxID  int64          // highest id of the current lifetime
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{open: map[int64]int{}, zombie: map[int64]bool{}} }

// opened records a new connection and returns the lifetime it belongs to.
func (t *Tracker) opened(id int64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id <= t.maxID {
		t.life++
		t.maxID = 0
		clear(t.zombie)
	}
	t.maxID = max(t.maxID, id)
	t.open[id] = t.life
	return t.life
}

func (t *Tracker) closed(id int64, life int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.open[id]; ok && l == life {
		delete(t.open, id)
		if life == t.life {
			t.zombie[id] = true
		}
	}
}

// IDs lists every session that may be alive on the server: open ones and zombies, sorted.
func (t *Tracker) IDs() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int64, 0, len(t.open)+len(t.zombie))
	for id, life := range t.open {
		if life == t.life {
			out = append(out, id)
		}
	}
	for id := range t.zombie {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Zombies lists the sessions closed here that the server may still hold, sorted.
func (t *Tracker) Zombies() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int64, 0, len(t.zombie))
	for id := range t.zombie {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// KillZombies ends this process's closed sessions on the server (through db, which should not be
// the pool they came from only if that pool is another server) and forgets those that are gone.
func (t *Tracker) KillZombies(ctx context.Context, db *sql.DB) (killed []int64, err error) {
	ids := t.Zombies()
	if len(ids) == 0 {
		return nil, nil
	}
	killed, err = Kill(ctx, db, ids)
	if err != nil {
		return killed, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		delete(t.zombie, id)
	}
	return killed, nil
}

// Kill ends the sessions ids of the current MySQL user that still exist and returns those it
// ended. Sessions of other users are left alone: an id is only a number, the user is the check
// that it is still one of relay's own.
func Kill(ctx context.Context, db *sql.DB, ids []int64) ([]int64, error) {
	var killed []int64
	for _, id := range ids {
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
	id, err := threadID(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("connection id: %w", err)
	}
	return &trackedConn{Conn: conn, id: id, life: c.t.opened(id), t: c.t}, nil
}

func threadID(ctx context.Context, conn driver.Conn) (int64, error) {
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		return 0, fmt.Errorf("driver connection %T cannot query", conn)
	}
	rows, err := q.QueryContext(ctx, "SELECT CONNECTION_ID()", nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		return 0, err
	}
	switch id := v[0].(type) {
	case int64:
		return id, nil
	case uint64:
		return int64(id), nil
	case []byte:
		var n int64
		_, err := fmt.Sscan(string(id), &n)
		return n, err
	}
	return 0, fmt.Errorf("connection id of type %T", v[0])
}

// trackedConn forwards every interface go-sql-driver's connection implements, so database/sql
// uses it exactly as it would the driver's own.
type trackedConn struct {
	driver.Conn
	id   int64
	life int
	t    *Tracker
}

func (c *trackedConn) Close() error {
	c.t.closed(c.id, c.life)
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
