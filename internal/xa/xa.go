// Package xa drives MySQL/MariaDB XA branches on dedicated connections.
//
// Invariants: a connection that holds (or may hold) an XA transaction is never returned to the pool:
// on any error it is discarded (driver.ErrBadConn), so the server rolls back an unprepared branch and
// keeps a prepared one for recovery. XIDs are built here as hex literals from the tag, because XA
// statements take no placeholders.
package xa

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
)

// State is where a branch is in the XA lifecycle.
type State int

const (
	Idle     State = iota // no transaction on the connection
	Active                // XA START issued, writes allowed
	Prepared              // XA END + XA PREPARE succeeded: durable, holds its locks until resolved
	Broken                // connection discarded after an error; the branch's fate is the server's
)

func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Active:
		return "active"
	case Prepared:
		return "prepared"
	case Broken:
		return "broken"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// XID renders a tag as the XA xid literal (gtrid only; bqual empty, formatID 1).
func XID(tag string) string {
	return "X'" + hex.EncodeToString([]byte(tag)) + "'"
}

// Branch is one connection and the XA transaction on it.
type Branch struct {
	conn   *sql.Conn
	connID int64
	tag    string
	state  State
}

// NewBranch takes a dedicated connection from db.
func NewBranch(ctx context.Context, db *sql.DB, init ...string) (*Branch, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range init {
		if _, err := c.ExecContext(ctx, q); err != nil {
			database.Discard(c)
			return nil, fmt.Errorf("session setup %q: %w", q, err)
		}
	}
	id, err := database.ConnID(ctx, c)
	if err != nil {
		database.Discard(c)
		return nil, fmt.Errorf("connection id: %w", err)
	}
	return &Branch{conn: c, connID: id}, nil
}

// ConnID is the server's thread id of the branch's session: what lock views and KILL name.
func (b *Branch) ConnID() int64 { return b.connID }

// Tag is the current (or last) transaction tag.
func (b *Branch) Tag() string { return b.tag }

// State is the branch's lifecycle state.
func (b *Branch) State() State { return b.state }

// Start opens the XA transaction named tag.
func (b *Branch) Start(ctx context.Context, tag string) error {
	if b.state != Idle {
		return fmt.Errorf("xa start %s: branch is %s", tag, b.state)
	}
	b.tag = tag
	if err := b.exec(ctx, "XA START "+XID(tag)); err != nil {
		return fmt.Errorf("xa start %s: %w", tag, err)
	}
	b.state = Active
	return nil
}

// Exec runs a statement inside the active transaction.
func (b *Branch) Exec(ctx context.Context, query string, args ...any) error {
	if b.state != Active {
		return fmt.Errorf("write %s: branch is %s", b.tag, b.state)
	}
	if _, err := b.conn.ExecContext(ctx, query, args...); err != nil {
		b.fail()
		return fmt.Errorf("write %s: %w", b.tag, err)
	}
	return nil
}

// Prepare ends and prepares the transaction: from here it survives the connection and the server.
func (b *Branch) Prepare(ctx context.Context) error {
	if b.state != Active {
		return fmt.Errorf("xa prepare %s: branch is %s", b.tag, b.state)
	}
	if err := b.exec(ctx, "XA END "+XID(b.tag)); err != nil {
		return fmt.Errorf("xa end %s: %w", b.tag, err)
	}
	if err := b.exec(ctx, "XA PREPARE "+XID(b.tag)); err != nil {
		return fmt.Errorf("xa prepare %s: %w", b.tag, err)
	}
	b.state = Prepared
	return nil
}

// Commit commits the prepared transaction on its own connection (MariaDB refuses a commit from
// another session while this one lives).
func (b *Branch) Commit(ctx context.Context) error {
	if b.state != Prepared {
		return fmt.Errorf("xa commit %s: branch is %s", b.tag, b.state)
	}
	if err := b.exec(ctx, "XA COMMIT "+XID(b.tag)); err != nil {
		return fmt.Errorf("xa commit %s: %w", b.tag, err)
	}
	b.state = Idle
	return nil
}

// Rollback aborts the transaction in whatever state it is. An active branch is ended first.
func (b *Branch) Rollback(ctx context.Context) error {
	switch b.state {
	case Idle:
		return nil
	case Broken:
		return fmt.Errorf("xa rollback %s: connection was discarded", b.tag)
	case Active:
		if err := b.exec(ctx, "XA END "+XID(b.tag)); err != nil {
			return fmt.Errorf("xa end %s: %w", b.tag, err)
		}
	}
	if err := b.exec(ctx, "XA ROLLBACK "+XID(b.tag)); err != nil {
		return fmt.Errorf("xa rollback %s: %w", b.tag, err)
	}
	b.state = Idle
	return nil
}

// Close releases the connection: back to the pool only when no transaction is on it.
func (b *Branch) Close() {
	if b.conn == nil {
		return
	}
	if b.state == Idle {
		_ = b.conn.Close()
	} else {
		database.Discard(b.conn)
		b.state = Broken
	}
	b.conn = nil
}

func (b *Branch) exec(ctx context.Context, q string) error {
	if _, err := b.conn.ExecContext(ctx, q); err != nil {
		b.fail()
		return err
	}
	return nil
}

// fail discards the connection: after an error inside XA its state is not worth guessing.
func (b *Branch) fail() {
	if b.conn != nil {
		database.Discard(b.conn)
		b.conn = nil
	}
	b.state = Broken
}

// PreparedBranch is one prepared branch listed by XA RECOVER.
type PreparedBranch struct {
	FormatID int64
	GTRID    string
	BQual    string
}

// ListPrepared lists every prepared branch the server holds (all jobs; callers filter by tag).
func ListPrepared(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]PreparedBranch, error) {
	rows, err := q.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil, fmt.Errorf("xa recover: %w", err)
	}
	defer rows.Close()
	var out []PreparedBranch
	for rows.Next() {
		var fid, glen, blen int64
		var data []byte
		if err := rows.Scan(&fid, &glen, &blen, &data); err != nil {
			return nil, fmt.Errorf("xa recover: %w", err)
		}
		if glen < 0 || blen < 0 || int(glen+blen) > len(data) {
			continue
		}
		out = append(out, PreparedBranch{FormatID: fid, GTRID: string(data[:glen]), BQual: string(data[glen : glen+blen])})
	}
	return out, rows.Err()
}

// ErrRolledBack is the server's XA_RBROLLBACK answer to a commit: the branch is gone, rolled back.
// MariaDB answers so for a prepared branch that wrote nothing; whether that lost anything is the
// caller's to say, from what it knows the branch wrote (ledger.Checkpoint.RolledBack).
var ErrRolledBack = errors.New("branch rolled back by the server")

// Resolve commits or rolls back a prepared branch from a connection other than its own (recovery,
// the resolver, and operators' manual resolution).
func Resolve(ctx context.Context, db *sql.DB, tag string, commit bool) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	stmt := "XA ROLLBACK " + XID(tag)
	if commit {
		stmt = "XA COMMIT " + XID(tag)
	}
	_, err = c.ExecContext(ctx, stmt)
	if err != nil {
		database.Discard(c)
		if commit && fault.IsMySQL(err, fault.XARBRollback) {
			return fmt.Errorf("XA COMMIT %s: %w: %w", tag, ErrRolledBack, err)
		}
		return fmt.Errorf("%s: %w", stmt[:len(stmt)-len(XID(tag))-1], err)
	}
	_ = c.Close()
	return nil
}
