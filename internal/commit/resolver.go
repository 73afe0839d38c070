// Resolver: the periodic pass over XA RECOVER for branches this job left behind (XA mode: held
// mode leaves nothing prepared, and its pass asks the server no XA RECOVER, Protocol.leftBehind),
// which also takes over stalled processes, marks dead processes' COMMITTING rows and forgets
// stopped group members.
//
// Invariant: the resolver never touches a branch of the live session (checkpoint id at or above the
// session's first id); older branches of the job are resolved from the ledger verdict, like recovery.
// MySQL has no XA timeout, so this pass is what keeps a forgotten branch from holding locks forever.

package commit

import (
	"context"
	"errors"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
)

// Resolver resolves, every interval, the branches this job left behind.
type Resolver struct {
	Deps
	Settings
	// Protocol is the job's mode (New): what its sessions may leave behind.
	Protocol Protocol
	// Recovered reports whether the live session's recovery finished: until then the resolver leaves this
	// process's own branches to it.
	Recovered func() bool
	// FirstID is the first checkpoint id of the live session: ids at or above it are left alone.
	FirstID func() int64
	// Fence is the fence held now (nil between two), for the resolver's epoch.
	Fence func() *ledger.Fence
	// Pools are this process's pools (the pipeline's fence records its sessions there): a stalled
	// process taken over has its recorded sessions ended in them.
	Pools []ledger.Pool
	// Watch is how often it looks for a stalled process (ledger.Stalled) between two passes: half
	// the lease, so one frozen past its lease is taken over within about one and a half leases.
	Watch time.Duration
}

// Loop runs the resolver at once, then every interval (every second until this process's
// recovery finished, sooner when a stopped process's lease runs out first, or when a stalled
// process shows up) until ctx ends. Errors are logged and retried at the next tick: a resolver that
// cannot reach MySQL is no reason to stop the pipeline. A decided branch the server rolled back is:
// it is gone after that one answer, and the process stops on it as recovery does
// (ledger.ErrBranchLost).
func (p *Resolver) Loop(ctx context.Context) error {
	log := p.Log.Named("resolver")
	t := time.NewTimer(0)
	defer t.Stop()
	var watch <-chan time.Time
	if p.Watch > 0 {
		w := time.NewTicker(p.Watch)
		defer w.Stop()
		watch = w.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-watch:
			if keys, err := ledger.Stalled(ctx, p.Ledger); err != nil || len(keys) == 0 {
				continue
			}
		}
		// Nothing before this process holds its fence: one that is about to be refused (another
		// layout, an operator holding the job) must not act on other processes' keys.
		if p.Fence() == nil {
			t.Reset(time.Second)
			continue
		}
		// Until this process's recovery finished, its own branches are recovery's; another
		// process's (stalled or dead) are resolved meanwhile: this recovery may be waiting on them.
		recovered := p.Recovered()
		next, err := p.resolvePass(ctx, log, recovered)
		if !recovered {
			next = min(next, time.Second)
		}
		if errors.Is(err, ledger.ErrBranchLost) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("resolver pass failed", zap.Error(err))
		}
		t.Reset(min(p.ResolveInterval, next))
	}
}

// resolvePass resolves what it can now and says when to look again: at the interval, or sooner when
// a stopped process's lease runs out before it (a dead member's branches hold row locks that the
// others' checkpoints wait on: they are resolved as soon as the lease allows, not an interval later).
func (p *Resolver) resolvePass(ctx context.Context, log *zap.Logger, own bool) (next time.Duration, err error) {
	next = p.ResolveInterval
	p.countManual(ctx, log)
	branches, err := p.Protocol.leftBehind(ctx, p.Job)
	if err != nil {
		return next, err
	}
	blocks, err := attribute(ctx, p.Ledger, branches)
	if err != nil {
		return next, err
	}
	// A process that holds its lock but let its lease run out (frozen, cut off) keeps its row locks
	// for as long as it stays so, and the live processes' checkpoints wait on them: it is taken over
	// (its sessions ended, its undecided branches rolled back), even with no branch left behind.
	stalled := map[string]bool{}
	keys, err := ledger.Stalled(ctx, p.Ledger)
	if err != nil {
		return next, err
	}
	for _, k := range keys {
		stalled[k] = true
	}
	live := p.FirstID()
	byOwner, doubt := p.owners(ctx, branches, blocks, stalled, own, live, &next)
	if err := p.addCommitting(ctx, branches, byOwner, &next); err != nil {
		return next, err
	}
	p.exportDoubt(ctx, log, doubt, branches)
	if p.Ledger.Group() {
		p.forgetMembers(ctx, log, branches)
	}
	for key, bs := range byOwner {
		if key == p.Ledger.Key() {
			fence := p.Fence()
			if fence == nil {
				continue // between two fences: the next recovery answers for them
			}
			err = p.resolveAll(ctx, p.Ledger, fence.Epoch(), bs, live, log)
		} else {
			err = p.takeOver(ctx, key, bs, stalled[key], log)
		}
		if err != nil {
			return next, err
		}
	}
	return next, nil
}

// countManual counts the resolutions operators' `relay txns resolve` made in another process: each
// leaves an audit row, counted here once.
func (p *Resolver) countManual(ctx context.Context, log *zap.Logger) {
	n, err := p.Ledger.ClaimManualResolves(ctx)
	if err != nil {
		log.Warn("counting manual resolutions failed", zap.Error(err))
		return
	}
	p.Metrics.Transactions.WithLabelValues("commit", metrics.OriginManual).Add(float64(n[ledger.AuditCommit]))
	p.Metrics.Transactions.WithLabelValues("rollback", metrics.OriginManual).Add(float64(n[ledger.AuditRollback]))
}

// owners sorts the branches left behind by the key whose fence resolves them (byOwner, with every
// stalled key, branches or not), and lists those in doubt: resolvable now or waiting for an
// operator. A branch of a process that is up, or whose lease has not run out, is left to it; next
// is brought forward to when that lease runs out.
func (p *Resolver) owners(ctx context.Context, branches []Branch, blocks map[int64]attribution, stalled map[string]bool,
	own bool, live int64, next *time.Duration) (byOwner map[string][]Branch, doubt []Branch) {
	byOwner = map[string][]Branch{}
	for k := range stalled {
		byOwner[k] = nil
	}
	for _, b := range branches {
		key := p.Ledger.Key()
		if a := blocks[b.Checkpoint]; a.mine(p.Ledger) {
			if !own || b.Checkpoint >= live {
				continue // recovery's, or the live session's own, in flight
			}
		} else {
			if !a.ok {
				doubt = append(doubt, b) // no block says whose: only an operator can tell
				continue
			}
			key = a.key
			if running, err := ledger.IsHeld(ctx, p.Ledger.ForKey(key)); err != nil || running && !stalled[key] {
				continue // its instance is up and answers for it
			}
			left, err := ledger.LeaseLeft(ctx, p.Ledger.ForKey(key))
			if err != nil {
				continue
			}
			if left > 0 {
				// Its instance is restarting in-process and takes its fence back within its lease; or
				// it died, and its branches are resolved once the lease ran out.
				*next = min(*next, left+100*time.Millisecond)
				continue
			}
		}
		doubt = append(doubt, b)
		byOwner[key] = append(byOwner[key], b)
	}
	return byOwner, doubt
}

// addCommitting adds to byOwner the key of each process that died after committing a decided
// checkpoint's branches but before marking its row: the row stays COMMITTING until that key
// recovers, which never happens to a group member (a key per process), so it is marked under that
// key's fence, like its branches.
func (p *Resolver) addCommitting(ctx context.Context, branches []Branch, byOwner map[string][]Branch, next *time.Duration) error {
	cs, err := p.Ledger.Committing(ctx)
	if err != nil {
		return err
	}
	listed := map[int64]bool{}
	for _, b := range branches {
		listed[b.Checkpoint] = true
	}
	for _, c := range cs {
		key := c.Instance
		if _, ok := byOwner[key]; ok || key == p.Ledger.Key() || listed[c.ID] {
			continue
		}
		other := p.Ledger.ForKey(key)
		if running, err := ledger.IsHeld(ctx, other); err != nil || running {
			continue
		}
		left, err := ledger.LeaseLeft(ctx, other)
		if err != nil {
			continue
		}
		if left > 0 {
			*next = min(*next, left+100*time.Millisecond)
			continue
		}
		byOwner[key] = nil
	}
	return nil
}

// forgetMembers forgets the members stopped long ago with nothing left to settle: each member's
// process leaves its key's rows behind, and the rows listing them would only grow.
func (p *Resolver) forgetMembers(ctx context.Context, log *zap.Logger, branches []Branch) {
	keep := map[string]string{}
	for _, b := range branches {
		if key, ok, err := p.Ledger.BlockOwner(ctx, b.Checkpoint); err == nil && ok {
			keep[key] = "its branch " + b.Tag + " is in XA RECOVER"
		}
	}
	if n, err := ledger.ForgetMembers(ctx, p.Ledger, p.ForgetMembersAfter, keep); err != nil {
		log.Warn("forgetting stopped members failed", zap.Error(err))
	} else if n > 0 {
		log.Info("forgot stopped members", zap.Int("members", n), zap.Duration("stopped_for_more_than", p.ForgetMembersAfter))
	}
}

// exportDoubt publishes how many branches are left behind and the oldest one's age, from the
// ledger's in-doubt record (see ledger.InDoubtAges): since its checkpoint's decision, or since a
// relay process first listed it. An in-memory "first seen" restarted at zero with every process
// and with every pass that found it anew, so a branch in doubt for minutes read 0.
func (p *Resolver) exportDoubt(ctx context.Context, log *zap.Logger, doubt, listed []Branch) {
	ids := map[string]int64{}
	for _, b := range doubt {
		ids[b.Tag] = b.Checkpoint
	}
	tags := make([]string, len(listed))
	for i, b := range listed {
		tags[i] = b.Tag
	}
	ages, err := p.Ledger.InDoubtAges(ctx, ids, tags)
	if err != nil {
		p.Metrics.InDoubtBranches.Set(float64(len(doubt)))
		log.Warn("reading the in-doubt ages failed; relay_xa_in_doubt_oldest_age_seconds keeps its last value", zap.Error(err))
		return
	}
	var oldest time.Duration
	for _, a := range ages {
		oldest = max(oldest, a)
	}
	// Age before count, so a dashboard refreshing between the two sets sees the old count
	// with the new age rather than a new branch aged 0. (One scrape reads its gauges in no fixed
	// order, so this narrows the window; it does not make a scrape a snapshot.)
	p.Metrics.InDoubtOldestAge.Set(oldest.Seconds())
	p.Metrics.InDoubtBranches.Set(float64(len(doubt)))
	if oldest > p.InDoubtAlertAge {
		log.Warn("in-doubt branch older than the alert age", zap.Duration("age", oldest), zap.Int("branches", len(doubt)))
	}
}

// takeOver resolves the branches of a stopped instance: it takes that instance's fence first (so a
// zombie of it can no longer write a decision), applies the ledger's verdicts, and lets go. A
// stalled instance (its lock held, its lease run out) has its recorded sessions ended first, as a
// newcomer taking its job over would.
func (p *Resolver) takeOver(ctx context.Context, key string, bs []Branch, stalled bool, log *zap.Logger) error {
	other := p.Ledger.ForKey(key)
	cfg := ledger.FenceConfig{Operator: true, Owner: ledger.ResolverOwner + p.Ledger.Key()}
	if stalled {
		cfg.TakeOver, cfg.End = true, p.Pools
	}
	f, err := ledger.Acquire(ctx, other, cfg)
	if errors.Is(err, ledger.ErrFenced) {
		return nil // it came back: its own recovery answers for its branches
	}
	if err != nil {
		return err
	}
	defer f.Release()
	p.Metrics.Takeovers.Inc()
	if t := f.TookOver; t != nil {
		log.Warn("ended a stalled instance's sessions: it holds its lock but stopped renewing its lease", zap.String("instance", key),
			zap.String("owner", t.Owner), zap.Duration("lease_expired_for", t.ExpiredFor), zap.Int64s("sessions_ended", t.Killed))
	}
	log.Info("resolving a stopped instance's branches", zap.String("instance", key), zap.Int("branches", len(bs)))
	return p.resolveAll(ctx, other, f.Epoch(), bs, math.MaxInt64, log)
}

// resolveAll applies the ledger's verdict to each branch, then marks the checkpoints done whose
// branches are all resolved.
func (p *Resolver) resolveAll(ctx context.Context, led *ledger.Ledger, epoch int64, bs []Branch, below int64, log *zap.Logger) error {
	pending := map[int64]bool{}
	for _, b := range bs {
		commit, err := resolveBranch(ctx, led, epoch, p.Sink, b, resolveRetry, log, metrics.OriginResolver)
		if errors.Is(err, errAttached) {
			pending[b.Checkpoint] = true
			continue
		}
		if err != nil {
			return err
		}
		action := "rollback"
		if commit {
			action = "commit"
		}
		p.Metrics.Transactions.WithLabelValues(action, metrics.OriginResolver).Inc()
	}
	// A checkpoint is COMMITTED only once none of its branches is listed any more: whatever was not
	// in bs (a branch no id block attributes, one skipped this pass) keeps its row COMMITTING, which
	// pruning never deletes, so its verdict stays readable.
	still, err := JobBranches(ctx, p.Sink, p.Job)
	if err != nil {
		return err
	}
	for _, b := range still {
		pending[b.Checkpoint] = true
	}
	return markDone(ctx, led, pending, below, log, metrics.OriginResolver)
}
