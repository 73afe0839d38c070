// Participant: one subtask's transaction of one epoch, as the protocol sees it.
//
// Invariant: this interface is the only view the protocol's code has of a transaction: the
// subtasks and the coordinator never ask which kind runs (no type assertions), and held mode
// never sees an XA type. A participant lives on one connection, used by one goroutine (its
// subtask's); a connection holding an open transaction is discarded, never returned to the pool.
// Its two implementations are the XA branch (xa.go) and the held transaction (held.go).

package commit

import (
	"context"
	"fmt"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// State is where a participant is in its transaction's life.
type State int

const (
	Idle     State = iota // no transaction on the connection
	Active                // begun, writes allowed
	Prepared              // voted and waiting for the decision (XA PREPARE succeeded): holds its locks
	Broken                // connection discarded after an error; the transaction's fate is the server's
)

// stateNames are the states as logged: the same words as xa.State's, so that a log line naming a
// participant's state reads alike in both modes.
var stateNames = [...]string{Idle: "idle", Active: "active", Prepared: "prepared", Broken: "broken"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// Ballot is what a participant needs to end its epoch at the barrier.
type Ballot struct {
	Epoch   int64
	Subtask int               // the subtask's global index (names it in errors)
	Offsets partition.Offsets // what it commits with its rows (Protocol.BarrierOffsets; XA: none)
	Owner   int64             // the session's owner epoch: a vote that decides does so under it
	Fence   *ledger.Fence     // the session's: a vote that decides does so before its lease deadline
}

// Participant is one subtask's transaction of one epoch.
type Participant interface {
	Tag() string
	ConnID() int64
	State() State
	// Begin starts the epoch's transaction named tag on an Idle participant.
	Begin(ctx context.Context, tag string) error
	// Exec runs one write inside the Active transaction.
	Exec(ctx context.Context, q string, args ...any) error
	// Vote ends the Active transaction at the barrier, all its rows written. waits reports
	// whether it is now Prepared, waiting for the coordinator's decision (XA); otherwise the
	// vote was itself the decision for the participant's partitions (held) and it is Idle.
	Vote(ctx context.Context, b Ballot) (waits bool, err error)
	// Commit applies the decision to a Prepared participant, on its own connection.
	Commit(ctx context.Context) error
	// Close releases the connection: to the pool when Idle, discarded otherwise.
	Close()
}
