// XA mode: one XA branch per subtask per epoch, the ledger row as the decision (docs/PROTOCOL.md, "The epoch, end to end").
//
// Invariant: a branch is prepared only at the barrier, after all its rows were written, and left
// prepared for the coordinator; a session's in-doubt branches are resolved by recovery, from the
// ledger's verdict alone, before the next session writes.
package pipeline

import (
	"context"
	"database/sql"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/xa"
)

// xaProtocol routes aggregate keys among the subtasks and decides each checkpoint in the ledger.
type xaProtocol struct{}

func (xaProtocol) recover(ctx context.Context, p *Pipeline, fence *ledger.Fence) (Recovered, error) {
	return Recover(ctx, p.Ledger, fence.Epoch(), p.Sink, p.Log.Named("recovery"), p.Metrics, metrics.OriginRecovery)
}

// resume: recovery has settled every branch below the ids this owner uses, and a decision of this
// owner is written only under its fence: the offsets rows are the last decision's.
func (xaProtocol) resume(ctx context.Context, p *Pipeline, _ *ledger.Fence) (partition.Offsets, int64, error) {
	return p.Ledger.PartitionOffsets(ctx)
}

// decided: the consumer starts exactly at the last decision's offsets (or where the configured
// position resolved for a partition without one, which the first decision records in full).
func (xaProtocol) decided(start, _ partition.Offsets) partition.Offsets { return start.Clone() }

func (xaProtocol) partitionAffine() bool { return false }

func (xaProtocol) newTxn(ctx context.Context, db *sql.DB) (txn, error) { return xa.NewBranch(ctx, db) }

// barrierOffsets: none; the decision carries every partition's offsets.
func (xaProtocol) barrierOffsets(_, _ partition.Offsets, _, _ int) partition.Offsets { return nil }

func (xaProtocol) barrier(ctx context.Context, s *subtask, b batch, r *prepared) (bool, error) {
	if s.branch == nil || s.branch.State() != xa.Active {
		return false, nil
	}
	crashpoint.Hit(crashpoint.AfterFlush)
	t := time.Now()
	err := s.branch.(*xa.Branch).Prepare(ctx)
	r.prep = time.Since(t)
	if err != nil {
		return false, err
	}
	r.tag = s.branch.Tag()
	s.p.Metrics.PendingTransactions.Inc()
	s.p.Metrics.Transactions.WithLabelValues("prepare", metrics.OriginNormal).Inc()
	s.log.Debug("prepared", zap.String("tag", r.tag), zap.Int64("checkpoint", b.epoch))
	return true, nil
}

func (xaProtocol) complete(ctx context.Context, c *coordinator, cp *pending) error {
	return c.twoPhase(ctx, cp)
}
