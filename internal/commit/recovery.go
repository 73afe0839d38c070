// Recovery: finish what earlier runs left prepared, from the ledger's verdict alone.
//
// Invariants: a branch of this job is committed only when its checkpoint has a ledger row, and
// rolled back only when it has none (read with a locking read); "XA says unknown" is never taken to
// mean "committed"; every COMMIT and ROLLBACK runs under the ledger's epoch guard, so an owner
// that lost the job (frozen past its lease) cannot touch a branch of the next owner. The next checkpoint id is above every id seen in the ledger and in XA RECOVER,
// so a tag is never reused while a branch with it may exist.

package commit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/xa"
)

// Branch is a prepared branch of this job found by XA RECOVER.
type Branch struct {
	Tag        string
	Checkpoint int64
	Subtask    int
}

// JobBranches lists the prepared branches of job, ordered by checkpoint then subtask.
func JobBranches(ctx context.Context, db *sql.DB, job string) ([]Branch, error) {
	all, err := xa.ListPrepared(ctx, db)
	if err != nil {
		return nil, err
	}
	var out []Branch
	for _, r := range all {
		if c, s, ok := ParseTag(job, r.GTRID); ok && r.BQual == "" {
			out = append(out, Branch{Tag: r.GTRID, Checkpoint: c, Subtask: s})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Checkpoint != out[j].Checkpoint {
			return out[i].Checkpoint < out[j].Checkpoint
		}
		return out[i].Subtask < out[j].Subtask
	})
	return out, nil
}

// Recovered is the outcome of a recovery pass.
type Recovered struct {
	Last       *ledger.Checkpoint // newest decided checkpoint, nil for a new job
	NextID     int64
	Committed  int
	RolledBack int
	Skipped    int // still attached to a live session: left to the resolver
}

// resolveRetry bounds the wait for a branch still attached to a dying session (XAER_NOTA while
// the server has not yet noticed the old connection is gone): about ten seconds. One recovery
// waits that long once: the branches it finds attached after one outlasted the wait are tried
// once each (they usually belong to the same gone process, and sixteen of them waited for in a
// row would outlast the restart allowance).
var resolveRetry = fault.Policy{Attempts: 15, Initial: 100 * time.Millisecond, Max: time.Second}

var resolveOnce = fault.Policy{Attempts: 1}

// errAttached: the branch is still attached to a live session (a zombie of an earlier run, or a
// process outside relay's fence); only that session, or its end, can release it.
var errAttached = errors.New("branch still attached to a live session")

// mode is what recovering differs in between the modes.
type mode interface {
	// settle finishes what earlier sessions left in doubt.
	settle(ctx context.Context, fence *ledger.Fence) (Recovered, error)
	// resume reads where a new session starts, after settle: every partition's committed offset
	// and the highest checkpoint id among them.
	resume(ctx context.Context, fence *ledger.Fence) (partition.Offsets, int64, error)
}

// recoverSession finishes what earlier runs left (what is in doubt is m's to say) and returns
// where to resume: the offsets the ledger holds.
func recoverSession(ctx context.Context, d Deps, m mode, fence *ledger.Fence) (Recovered, partition.Offsets, error) {
	rec, err := m.settle(ctx, fence)
	if err != nil {
		return rec, nil, err
	}
	// A checkpoint whose rows the server lost stops the job until an operator acknowledges it:
	// resuming after it would carry on as if its records were counted.
	lost, err := d.Ledger.Lost(ctx)
	if err != nil {
		return rec, nil, err
	}
	if len(lost) > 0 {
		return rec, nil, ledger.Refusal(lost)
	}
	offs, maxID, err := m.resume(ctx, fence)
	if err != nil {
		return rec, nil, err
	}
	if maxID > 0 {
		d.Metrics.LastCommittedID.Set(float64(maxID))
	}
	rec.NextID = max(rec.NextID, maxID+1)
	return rec, offs, nil
}

// SettleBranches is XA mode's recovery: it resolves every prepared branch the job's earlier
// sessions left (commit where the ledger has its checkpoint's row, else roll back; one whose
// preparing session is still attached is left to the resolver), marks the decided checkpoints
// committed, and returns the next checkpoint id.
func SettleBranches(ctx context.Context, led *ledger.Ledger, epoch int64, sinkDB *sql.DB, log *zap.Logger, m *metrics.Metrics, origin string) (Recovered, error) {
	var r Recovered
	last, err := led.LastDecided(ctx)
	if err != nil {
		return r, err
	}
	r.Last = last
	maxID := int64(0)
	if last != nil {
		maxID = last.ID
	}
	branches, err := JobBranches(ctx, sinkDB, led.Job())
	if err != nil {
		return r, err
	}
	skipped := map[int64]bool{}
	branches, err = owned(ctx, led, branches)
	if err != nil {
		return r, err
	}
	// Every branch listed now is left behind by an earlier session: its in-doubt age starts here
	// at the latest, even if recovery has to leave it to the resolver.
	inDoubt := map[string]int64{}
	for _, b := range branches {
		inDoubt[b.Tag] = b.Checkpoint
	}
	if err := led.NoteInDoubt(ctx, inDoubt); err != nil {
		log.Warn("recording in-doubt branches failed (their age may read low)", zap.Error(err))
	}
	policy := resolveRetry
	for i, b := range branches {
		maxID = max(maxID, b.Checkpoint)
		commit, err := resolveBranch(ctx, led, epoch, sinkDB, b, policy, log, origin)
		if errors.Is(err, errAttached) {
			policy = resolveOnce
			// Safe to go on: its verdict is fixed in the ledger, and the resolver applies it once the
			// session is gone. Until then its row locks may slow checkpoints that touch its keys.
			log.Warn("in-doubt branch left to the resolver", zap.String("tag", b.Tag), zap.Error(err))
			skipped[b.Checkpoint] = true
			r.Skipped++
			continue
		}
		if err != nil {
			return r, err
		}
		action := "rollback"
		if commit {
			action = "commit"
			r.Committed++
		} else {
			r.RolledBack++
		}
		if m != nil {
			m.Transactions.WithLabelValues(action, origin).Inc()
		}
		if i < len(branches)-1 {
			crashpoint.Hit(crashpoint.RecoveryBetween)
		}
	}
	if err := markDone(ctx, led, skipped, maxID+1, log, origin); err != nil {
		return r, err
	}
	r.NextID = maxID + 1
	return r, nil
}

// owned keeps the branches this instance answers for (attribution.mine).
func owned(ctx context.Context, led *ledger.Ledger, branches []Branch) ([]Branch, error) {
	by, err := attribute(ctx, led, branches)
	if err != nil {
		return nil, err
	}
	var out []Branch
	for _, b := range branches {
		if by[b.Checkpoint].mine(led) {
			out = append(out, b)
		}
	}
	return out, nil
}

// attribution is whose id block a checkpoint id lies in: the key of the process that reserved it,
// or none (!ok: a ledger older than id blocks, or a branch no block of this job covers).
type attribution struct {
	key string
	ok  bool
}

// mine: the branches a process answers for are those of its own blocks and, when the job runs as
// a single instance, those no block covers. Another process's are the resolver's, once that
// process's fence is free.
func (a attribution) mine(led *ledger.Ledger) bool {
	return a.key == led.Key() || (!a.ok && led.Key() == led.Job())
}

// attribute reads the id block of each branch's checkpoint, once per checkpoint (its branches share
// it; blocks are recorded before any of their ids is used, so the answer cannot change).
func attribute(ctx context.Context, led *ledger.Ledger, branches []Branch) (map[int64]attribution, error) {
	out := map[int64]attribution{}
	for _, b := range branches {
		if _, seen := out[b.Checkpoint]; seen {
			continue
		}
		key, ok, err := led.BlockOwner(ctx, b.Checkpoint)
		if err != nil {
			return nil, err
		}
		out[b.Checkpoint] = attribution{key, ok}
	}
	return out, nil
}

// markDone moves decided checkpoints below id to COMMITTED, except those with a branch still
// pending: a row may only be pruned once none of its branches can still appear in XA RECOVER.
func markDone(ctx context.Context, led *ledger.Ledger, pending map[int64]bool, below int64, log *zap.Logger, origin string) error {
	committing, err := led.Committing(ctx)
	if err != nil {
		return err
	}
	for _, c := range committing {
		if c.ID >= below || pending[c.ID] || c.Instance != led.Key() {
			continue
		}
		if err := led.MarkCommitted(ctx, c.ID); err != nil {
			return err
		}
		log.Info("checkpoint marked committed", zap.Int64("checkpoint", c.ID), zap.Strings("tags", c.Tags), zap.String("origin", origin))
	}
	return nil
}

// resolveBranch applies the ledger's verdict to one branch, as the owner of epoch.
func resolveBranch(ctx context.Context, led *ledger.Ledger, epoch int64, sinkDB *sql.DB, b Branch, p fault.Policy, log *zap.Logger, origin string) (commit bool, err error) {
	commit, err = led.Verdict(ctx, b.Checkpoint)
	if err != nil {
		return false, err
	}
	err = fault.Do(ctx, p, func(ctx context.Context) error {
		err := led.Guard(ctx, epoch, func() error { return xa.Resolve(ctx, sinkDB, b.Tag, commit) })
		if errors.Is(err, xa.ErrRolledBack) {
			return rolledBack(ctx, led, b, log, origin)
		}
		if fault.IsMySQL(err, fault.XAErNota) {
			// Either the old session still holds it, or it is gone: ask XA RECOVER which.
			still, lerr := listed(ctx, sinkDB, b.Tag)
			if lerr != nil {
				return lerr
			}
			if !still {
				return nil
			}
			return fault.Transient(fmt.Errorf("%w: %w", errAttached, err))
		}
		return err
	}, func(attempt int, err error) {
		log.Info("branch still attached to a session, waiting", zap.String("tag", b.Tag), zap.Int("attempt", attempt), zap.Error(err))
	})
	if err != nil {
		return commit, fmt.Errorf("resolve %s: %w", b.Tag, err)
	}
	action := "rollback"
	if commit {
		action = "commit"
	}
	log.Info("in-doubt branch resolved", zap.String("tag", b.Tag), zap.Int64("checkpoint", b.Checkpoint),
		zap.String("action", action), zap.String("origin", origin), zap.String("verdict_source", "ledger"))
	return commit, nil
}

// rolledBack answers for a decided branch the server rolled back instead of committing: nothing
// lost when the decision does not list it, ledger.ErrBranchLost (fatal) when it does, after the
// checkpoint is recorded LOST.
func rolledBack(ctx context.Context, led *ledger.Ledger, b Branch, log *zap.Logger, origin string) error {
	cs, err := led.Lookup(ctx, []int64{b.Checkpoint})
	if err != nil {
		return err
	}
	c, ok := cs[b.Checkpoint]
	if !ok { // decided, then pruned: what it listed is unknown, so it may have lost rows
		c = ledger.Checkpoint{ID: b.Checkpoint, Tags: []string{b.Tag}}
	}
	if err := c.RolledBack(b.Tag); err != nil {
		log.Error("decided branch rolled back by the server: its rows are lost", zap.String("tag", b.Tag),
			zap.Int64("checkpoint", b.Checkpoint), zap.String("origin", origin), zap.Error(err))
		// The branch is gone from XA RECOVER after this answer: the LOST row is what keeps the
		// next start from calling the checkpoint committed.
		if merr := led.MarkLost(ctx, c, b.Tag, origin, "relay"); merr != nil {
			return fmt.Errorf("%w (and recording it failed: %w)", err, merr)
		}
		return err
	}
	log.Info("decided branch was empty: the server rolled it back", zap.String("tag", b.Tag), zap.Int64("checkpoint", b.Checkpoint))
	return nil
}

func listed(ctx context.Context, db *sql.DB, tag string) (bool, error) {
	all, err := xa.ListPrepared(ctx, db)
	if err != nil {
		return false, err
	}
	for _, r := range all {
		if r.GTRID == tag {
			return true, nil
		}
	}
	return false, nil
}
