// The commit protocol: what differs between XA mode and held mode, behind one interface.
//
// Invariant: the mode is chosen once, in New; nothing outside its two implementations (xa.go,
// held.go) asks which one runs. The consume loop, the session and the subtasks call the protocol
// where the modes differ, and the coordinator drives either through the same phases.
package pipeline

import (
	"context"
	"database/sql"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// protocol is one way of making each epoch's writes durable exactly once.
type protocol interface {
	// recover finishes what earlier sessions left in doubt, before a session starts.
	recover(ctx context.Context, p *Pipeline, fence *ledger.Fence) (Recovered, error)
	// resume reads where a new session starts, after recover: every partition's committed offset
	// and the highest checkpoint id among them.
	resume(ctx context.Context, p *Pipeline, fence *ledger.Fence) (partition.Offsets, int64, error)
	// decided is what a new session takes as already decided: start is where its consumer starts,
	// from what the ledger holds.
	decided(start, from partition.Offsets) partition.Offsets
	// partitionAffine reports whether each partition's records stay on one subtask (partition mod
	// subtasks), whose transaction commits their offsets with their rows. Such subtasks share
	// aggregate keys: the fold gives each record only its owner's tables and flushes them only at
	// the barrier.
	partitionAffine() bool
	// newTxn opens a subtask's transaction on a connection of its own.
	newTxn(ctx context.Context, db *sql.DB) (txn, error)
	// barrierOffsets are the offsets subtask i (of n) writes with its rows at the barrier of a
	// checkpoint cut at cut, decided being the offsets of the last decision.
	barrierOffsets(decided, cut partition.Offsets, i, n int) partition.Offsets
	// barrier ends subtask s's part of epoch b.epoch once its rows are written, filling r's tag
	// (empty: nothing written) and prepare time. It reports whether s now holds a prepared branch
	// that waits for the coordinator's commit.
	barrier(ctx context.Context, s *subtask, b batch, r *prepared) (bool, error)
	// complete finishes a checkpoint past its barrier through c.
	complete(ctx context.Context, c *coordinator, cp *pending) error
}

// newProtocol is the one place the mode is read.
func newProtocol(d Deps) protocol {
	if d.Config.Mode == config.ModeHeld {
		return heldProtocol{led: d.Ledger}
	}
	return xaProtocol{}
}
