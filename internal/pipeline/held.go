// Held mode's transaction: an ordinary local transaction per subtask per epoch (DESIGN §5).
//
// Invariant: like an XA branch, a connection with an open held transaction is never returned to
// the pool; on any error it is discarded and the server rolls the transaction back, which is the
// whole of held mode's abort.
package pipeline

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/xa"
)

// heldTxn is one subtask's local transaction.
type heldTxn struct {
	conn   *sql.Conn
	connID int64
	tag    string
	state  xa.State
}

func newHeldTxn(ctx context.Context, db *sql.DB) (*heldTxn, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	id, err := database.ConnID(ctx, c)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connection id: %w", err)
	}
	return &heldTxn{conn: c, connID: id}, nil
}

func (h *heldTxn) ConnID() int64   { return h.connID }
func (h *heldTxn) Tag() string     { return h.tag }
func (h *heldTxn) State() xa.State { return h.state }
func (h *heldTxn) Conn() *sql.Conn { return h.conn }
func (h *heldTxn) fail()           { h.Close(); h.state = xa.Broken }
func (h *heldTxn) Prepare(context.Context) error {
	return fmt.Errorf("held transaction %s cannot be prepared", h.tag)
}

func (h *heldTxn) Start(ctx context.Context, tag string) error {
	if h.state != xa.Idle {
		return fmt.Errorf("begin %s: transaction is %s", tag, h.state)
	}
	h.tag = tag
	if _, err := h.conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
		h.fail()
		return fmt.Errorf("begin %s: %w", tag, err)
	}
	h.state = xa.Active
	return nil
}

func (h *heldTxn) Exec(ctx context.Context, q string, args ...any) error {
	if h.state != xa.Active {
		return fmt.Errorf("write %s: transaction is %s", h.tag, h.state)
	}
	if _, err := h.conn.ExecContext(ctx, q, args...); err != nil {
		h.fail()
		return fmt.Errorf("write %s: %w", h.tag, err)
	}
	return nil
}

func (h *heldTxn) Commit(ctx context.Context) error {
	if h.state != xa.Active {
		return fmt.Errorf("commit %s: transaction is %s", h.tag, h.state)
	}
	if _, err := h.conn.ExecContext(ctx, "COMMIT"); err != nil {
		// The reply may be lost after the server committed: the offsets row says which on restart.
		h.fail()
		return fmt.Errorf("commit %s: %w", h.tag, err)
	}
	h.state = xa.Idle
	return nil
}

func (h *heldTxn) Rollback(ctx context.Context) error {
	if h.state != xa.Active {
		return nil
	}
	if _, err := h.conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		h.fail()
		return fmt.Errorf("rollback %s: %w", h.tag, err)
	}
	h.state = xa.Idle
	return nil
}

func (h *heldTxn) Close() {
	if h.conn == nil {
		return
	}
	if h.state == xa.Idle {
		_ = h.conn.Close()
	} else {
		xa.Discard(h.conn)
		h.state = xa.Broken
	}
	h.conn = nil
}
