// Owner rows: the fence where locks are not replicated.
//
// Invariant: the owner row of a scope — (job, scope), the scope being the instance key today (the
// job, or job/i) and a partition's name once ownership is per partition (docs/PROTOCOL.md,
// "Galera / Percona XtraDB Cluster") — holds the epoch of its owner. Taking a scope writes its row
// with the new epoch (so does a held-mode session's new epoch); every decision for it
// (held mode's data+offsets COMMIT, XA mode's ledger decision) and every take of partitions by a
// group member writes it again, conditional on the epoch it holds, in the same local transaction.
// On one server the job row's lock already orders
// decisions and takeovers. On a Galera cluster (MariaDB Galera, Percona XtraDB Cluster) GET_LOCK
// and locking reads stay on one node and only written rows are certified: there, two owners on
// two nodes write the same row, so either the later sees the other's epoch and writes nothing, or
// one of them fails certification (error 1213 at COMMIT). Both never decide.

package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
)

// ownersTable holds one row per owned scope.
const ownersTable = `CREATE TABLE IF NOT EXISTS relay_owners (
	job VARCHAR(64) NOT NULL,
	scope VARCHAR(320) NOT NULL,
	owner_epoch BIGINT NOT NULL,
	decisions BIGINT NOT NULL DEFAULT 0,
	written_at DATETIME(6) NOT NULL,
	PRIMARY KEY (job, scope)
) ENGINE=InnoDB`

// claimOwner writes the owner row of this instance's scope with epoch, in the claim's transaction.
func (l *Ledger) claimOwner(ctx context.Context, tx Execer, epoch int64) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_owners (job, scope, owner_epoch, written_at)
		VALUES (?, ?, ?, UTC_TIMESTAMP(6))
		ON DUPLICATE KEY UPDATE owner_epoch = VALUES(owner_epoch), written_at = VALUES(written_at)`,
		l.job, l.key, epoch); err != nil {
		return fmt.Errorf("owner row: %w", err)
	}
	return nil
}

// advanceOwner moves the owner row of this instance's scope from epoch old to new (a held-mode
// session's new epoch, Fence.NewSession), conditional on old, in the caller's transaction.
func (l *Ledger) advanceOwner(ctx context.Context, tx Execer, old, new int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE relay_owners SET owner_epoch = ?, written_at = UTC_TIMESTAMP(6)
		WHERE job = ? AND scope = ? AND owner_epoch = ?`, new, l.job, l.key, old)
	if err != nil {
		return fmt.Errorf("owner row: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: owner row of %s is not at epoch %d", ErrFenced, l.key, old)
	}
	return nil
}

// stampOwner writes the owner row of this instance's scope, conditional on epoch, inside the
// caller's decision transaction, or a group member's take of partitions (last, so its row lock is
// held only until the COMMIT that follows). decisions counts both: it moves so the row is written.
func (l *Ledger) stampOwner(ctx context.Context, tx Execer, epoch int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE relay_owners SET decisions = decisions + 1, written_at = UTC_TIMESTAMP(6)
		WHERE job = ? AND scope = ? AND owner_epoch = ?`, l.job, l.key, epoch)
	if err != nil {
		return fmt.Errorf("owner row: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		var cur int64
		if err := tx.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_owners WHERE job = ? AND scope = ?`, l.job, l.key).Scan(&cur); err != nil {
			return fmt.Errorf("%w: owner row of %s: %w", ErrFenced, l.key, err)
		}
		return fmt.Errorf("%w: owner row of %s has epoch %d, this process holds %d", ErrFenced, l.key, cur, epoch)
	}
	return nil
}

// otherNode (Galera only) stands for the GET_LOCK this process just got, which only says that no
// session of this node holds the job: an owner renewing its lease from another node holds it
// there. A lease recorded by another node (or by this node in an earlier lifetime) and not
// released is watched on this process's clock (clocks.go: that node's clock wrote it): renewed
// meanwhile, the job runs elsewhere (ErrFenced); unchanged for its owner's whole lease, it is taken
// over. Its sessions live on another node and are not ended: the owner row keeps its decisions
// out. The claim checks again inside its transaction (elsewhere): this read and the claim are two
// steps, and another node may claim between them.
func (f *Fence) otherNode(ctx context.Context, l *Ledger) error {
	start := time.Now()
	watched := false
	for {
		h, err := readHolder(ctx, l)
		if err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		s := f.clocks.judge(l.key, h)
		switch {
		case !f.elsewhere(h, s):
			if watched && s == leaseOver {
				f.TookOver = &Takeover{Owner: h.owner, Epoch: h.epoch, ExpiredFor: f.clocks.expiredFor(l.key, h), WaitedLease: time.Since(start)}
			}
			return nil
		case s == leaseLive:
			return fmt.Errorf("%w: job %s is running on another Galera node: owner %s (epoch %d) renews its lease", ErrFenced, l.key, h.owner, h.epoch)
		}
		watched = true
		if err := fault.SleepContext(ctx, settlePoll); err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
	}
}

// elsewhere reports whether h, the holder of this fence's own key (in state s), is an owner that
// may still decide from another node: remote (this node's lock session of it is gone, since this
// process got the lock), and not this process's own earlier fence.
func (f *Fence) elsewhere(h holderRow, s leaseState) bool {
	prev := f.cfg.Prev
	return f.remote(h, s) && (prev == nil || h.epoch != prev.Epoch())
}

// remote reports whether h (its lease in state s) is an owner whose lock this node cannot see and
// that may still decide: its lease is not over, and it was recorded on another node (or in an
// earlier lifetime of this one). On this node's lifetime, the lock (IS_USED_LOCK) says it exactly.
func (f *Fence) remote(h holderRow, s leaseState) bool {
	switch {
	case s == leaseOver:
		return false
	case h.sessions.Node == f.node && database.SameBoot(h.sessions.Lock.Boot, f.boot):
		return false
	}
	return true
}

// errClaimedElsewhere: the claim's own read of the holder found a live owner on another node that
// otherNode's earlier read did not (it claimed in between); claimRow looks again through otherNode.
var errClaimedElsewhere = fmt.Errorf("%w: claimed from another Galera node meanwhile", ErrFenced)
