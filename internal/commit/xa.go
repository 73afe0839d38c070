// XA mode: one XA branch per subtask per epoch, the ledger row as the decision (docs/PROTOCOL.md, "The epoch, end to end").
//
// Invariant: a branch is prepared only at the barrier, after all its rows were written, and left
// prepared for the coordinator; a session's in-doubt branches are resolved by recovery, from the
// ledger's verdict alone, before the next session writes.

package commit

import (
	"context"
	"database/sql"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/xa"
)

// xaProtocol routes aggregate keys among the subtasks and decides each checkpoint in the ledger.
type xaProtocol struct{ d Deps }

func (x xaProtocol) Recover(ctx context.Context, fence *ledger.Fence) (Recovered, partition.Offsets, error) {
	return recoverSession(ctx, x.d, x, fence)
}

// settle resolves every prepared branch of the job from the ledger's verdict.
func (x xaProtocol) settle(ctx context.Context, fence *ledger.Fence) (Recovered, error) {
	return SettleBranches(ctx, x.d.Ledger, fence.Epoch(), x.d.Sink, x.d.Log.Named("recovery"), x.d.Metrics, metrics.OriginRecovery)
}

// resume: recovery has settled every branch below the ids this owner uses, and a decision of this
// owner is written only under its fence: the offsets rows are the last decision's.
func (x xaProtocol) resume(ctx context.Context, _ *ledger.Fence) (partition.Offsets, int64, error) {
	return x.d.Ledger.PartitionOffsets(ctx)
}

func (xaProtocol) PartitionAffine() bool { return false }

func (xaProtocol) newParticipant(ctx context.Context, db *sql.DB) (Participant, error) {
	b, err := xa.NewBranch(ctx, db)
	if err != nil {
		return nil, err
	}
	return xaBranch{b}, nil
}

// BarrierOffsets: none; the decision carries every partition's offsets.
func (x xaProtocol) leftBehind(ctx context.Context, job string) ([]Branch, error) {
	return JobBranches(ctx, x.d.Sink, job)
}

func (xaProtocol) BarrierOffsets(_, _ partition.Offsets, _, _ int) partition.Offsets { return nil }

func (xaProtocol) Complete(ctx context.Context, c *Coordinator, cp *Pending) error {
	return c.twoPhase(ctx, cp)
}

// xaBranch is an XA branch as a participant: its vote is XA PREPARE, and it waits for the
// coordinator's decision, prepared, on its own connection.
type xaBranch struct{ *xa.Branch }

func (b xaBranch) State() State {
	switch b.Branch.State() {
	case xa.Idle:
		return Idle
	case xa.Active:
		return Active
	case xa.Prepared:
		return Prepared
	}
	return Broken
}

func (b xaBranch) Begin(ctx context.Context, tag string) error { return b.Start(ctx, tag) }

func (b xaBranch) Vote(ctx context.Context, _ Ballot) (bool, error) {
	if err := b.Prepare(ctx); err != nil {
		return false, err
	}
	return true, nil
}
