// Group membership in the pipeline: each change of the assignment ends the session, and each
// session reads only the partitions it took in the ledger (docs/PROTOCOL.md, "Group membership").
//
// Invariant: a session of a group member reads exactly the partitions it took in the ledger at its
// start (TakePartitions, after recovery), and decides them under the epochs it took them at (the
// fence's claims); a change of the assignment ends the session (drained, or aborted when the
// assignment was lost) before the group is told the partitions are handed back.
package pipeline

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/membership"
	"github.com/relay-sh/relay/internal/partition"
)

// errReassigned ends a session because the group changed this member's assignment. Without err
// (the drain failed) it is not a failure: the next session starts at once on the new assignment.
type errReassigned struct {
	change *membership.Change
	err    error
}

func (e *errReassigned) Error() string {
	if e.err != nil {
		return fmt.Sprintf("the consumer group changed this member's partitions (%s), and the drain failed: %v", e.change.Kind, e.err)
	}
	return fmt.Sprintf("the consumer group changed this member's partitions (%s)", e.change.Kind)
}

func (e *errReassigned) Unwrap() error { return e.err }

// reassigned acknowledges the change a session ended on, if it ended on one (the session is closed
// by then: the group may hand the partitions on), and says whether that ended it cleanly.
func reassigned(err error) (clean bool) {
	var e *errReassigned
	if !errors.As(err, &e) {
		return false
	}
	e.change.Done()
	return e.err == nil
}

// settleChanges acknowledges every change that arrived while no session ran: none reads the
// partitions they moved, and the next session starts from the assignment as it is now.
func (p *Pipeline) settleChanges() {
	for {
		select {
		case ch := <-p.Member.Changes():
			ch.Done()
		default:
			return
		}
	}
}

// take takes the member's assignment in the ledger for a new session: the partitions it may read
// and decide, at the owner epochs it took them at (set as the fence's claims), and their committed
// offsets, read after the owner rows' locks: the latest, whoever decided them.
func (p *Pipeline) take(ctx context.Context, fence *ledger.Fence) (partition.Epochs, partition.Offsets, error) {
	taken, err := p.Ledger.TakePartitions(ctx, p.Member.Wants())
	if err != nil {
		return nil, nil, err
	}
	p.Member.Took(taken)
	fence.SetClaims(taken.Epochs)
	p.Log.Info("partitions taken", zap.Any("owner_epochs", taken.Epochs), zap.Int("taken_by_others", len(taken.Lost)))
	return taken.Epochs, taken.Offsets, nil
}
