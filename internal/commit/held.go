// Held mode: partition-affine subtasks, one ordinary local transaction per subtask per epoch,
// whose COMMIT carries the subtask's partition offsets with its rows (docs/PROTOCOL.md, "Held mode").
//
// Invariants: the offsets a subtask commits are exactly those of the partitions it owns, so each
// COMMIT is a whole decision for its partitions and nothing is ever in doubt; it is issued only
// before the fence's lease deadline, under the owner epoch, which each session takes anew. Like an
// XA branch, a connection with an open held transaction is never returned to the pool; on any
// error it is discarded and the server rolls the transaction back, which is the whole of held
// mode's abort.

package commit

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// heldProtocol writes offsets through its ledger, in each subtask's own transaction.
type heldProtocol struct{ d Deps }

func (h heldProtocol) Recover(ctx context.Context, fence *ledger.Fence) (Recovered, partition.Offsets, error) {
	return recoverSession(ctx, h.d, h, fence)
}

// settle: nothing is in doubt; each partition's committed offset is exactly what its committed
// data covers.
func (heldProtocol) settle(context.Context, *ledger.Fence) (Recovered, error) {
	return Recovered{}, nil
}

// resume takes a new owner epoch for the session and reads the offsets under it, in one
// transaction (Fence.NewSession): a data transaction of the previous session still committing on
// the server is waited for, not read around, and one not yet through its fence check can no longer
// decide. An in-process restart keeps the fence but never the epoch.
func (h heldProtocol) resume(ctx context.Context, fence *ledger.Fence) (partition.Offsets, int64, error) {
	return fence.NewSession(ctx, h.d.Ledger)
}

func (heldProtocol) PartitionAffine() bool { return true }

func (heldProtocol) leftBehind(context.Context, string) ([]Branch, error) { return nil, nil }

func (h heldProtocol) newParticipant(ctx context.Context, db *sql.DB) (Participant, error) {
	return newHeldTxn(ctx, db, h.d.Ledger)
}

// BarrierOffsets returns the offsets of subtask i's partitions that moved since the last decision.
func (heldProtocol) BarrierOffsets(decided, cut partition.Offsets, i, n int) partition.Offsets {
	out := partition.Offsets{}
	for t, ps := range cut {
		for part, off := range ps {
			if int(part)%n != i {
				continue
			}
			if old, ok := decided.Get(t, part); !ok || old != off {
				out.Set(t, part, off)
			}
		}
	}
	return out
}

// Complete: each subtask's COMMIT was its own decision; the coordinator only collects them.
func (heldProtocol) Complete(ctx context.Context, c *Coordinator, cp *Pending) error {
	return c.onePhase(ctx, cp)
}

// heldTxn is one subtask's local transaction, as a participant: its vote is its COMMIT, with the
// offsets of its partitions written through led.
type heldTxn struct {
	led    *ledger.Ledger
	conn   *sql.Conn
	connID int64
	tag    string
	state  State
}

func newHeldTxn(ctx context.Context, db *sql.DB, led *ledger.Ledger) (*heldTxn, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	id, err := database.ConnID(ctx, c)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connection id: %w", err)
	}
	return &heldTxn{led: led, conn: c, connID: id}, nil
}

func (h *heldTxn) ConnID() int64 { return h.connID }
func (h *heldTxn) Tag() string   { return h.tag }
func (h *heldTxn) State() State  { return h.state }
func (h *heldTxn) fail()         { h.Close(); h.state = Broken }

func (h *heldTxn) Begin(ctx context.Context, tag string) error {
	if h.state != Idle {
		return fmt.Errorf("begin %s: transaction is %s", tag, h.state)
	}
	h.tag = tag
	if _, err := h.conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
		h.fail()
		return fmt.Errorf("begin %s: %w", tag, err)
	}
	h.state = Active
	return nil
}

func (h *heldTxn) Exec(ctx context.Context, q string, args ...any) error {
	if h.state != Active {
		return fmt.Errorf("write %s: transaction is %s", h.tag, h.state)
	}
	if _, err := h.conn.ExecContext(ctx, q, args...); err != nil {
		h.fail()
		return fmt.Errorf("write %s: %w", h.tag, err)
	}
	return nil
}

// Vote ends a held epoch: the subtask's offsets join its data in one transaction, and the COMMIT
// decides both. Nothing is left waiting for the coordinator.
func (h *heldTxn) Vote(ctx context.Context, b Ballot) (bool, error) {
	// The COMMIT below is the decision: like XA mode's ledger write, only before the lease deadline.
	deadline := b.Fence.Deadline()
	if !time.Now().Before(deadline) {
		h.fail()
		return false, fmt.Errorf("subtask %d: %w: lease not renewed since %s", b.Subtask, ErrFenceLost, deadline.Format(time.RFC3339Nano))
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := h.led.WriteHeldOffsets(ctx, h.conn, b.Owner, b.Fence.Claims(), b.Epoch, b.Offsets); err != nil {
		h.fail()
		return false, fmt.Errorf("subtask %d: %w", b.Subtask, err)
	}
	crashpoint.Hit(crashpoint.HeldBeforeCommit)
	if err := h.commit(ctx); err != nil {
		return false, fmt.Errorf("subtask %d: %w", b.Subtask, err)
	}
	return false, nil
}

// Commit: a held transaction is never Prepared, its vote was its commit; the coordinator never
// orders one committed.
func (h *heldTxn) Commit(context.Context) error {
	return fmt.Errorf("commit %s: transaction is %s (a held transaction commits at its vote)", h.tag, h.state)
}

func (h *heldTxn) commit(ctx context.Context) error {
	if h.state != Active {
		return fmt.Errorf("commit %s: transaction is %s", h.tag, h.state)
	}
	if _, err := h.conn.ExecContext(ctx, "COMMIT"); err != nil {
		// The reply may be lost after the server committed: the offsets row says which on restart.
		h.fail()
		return fmt.Errorf("commit %s: %w", h.tag, fault.AtCommit(err))
	}
	h.state = Idle
	return nil
}

func (h *heldTxn) Close() {
	if h.conn == nil {
		return
	}
	if h.state == Idle {
		_ = h.conn.Close()
	} else {
		database.Discard(h.conn)
		h.state = Broken
	}
	h.conn = nil
}
