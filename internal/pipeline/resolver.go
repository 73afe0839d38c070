// Resolver: the periodic pass over XA RECOVER for branches this job left behind.
//
// Invariant: the resolver never touches a branch of the live session (checkpoint id at or above the
// session's first id); older branches of the job are resolved from the ledger verdict, like recovery.
// MySQL has no XA timeout, so this pass is what keeps a forgotten branch from holding locks forever.
package pipeline

import (
	"context"
	"errors"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
)

// ResolveLoop runs the resolver every interval until ctx ends. Errors are logged and retried at the
// next tick: a resolver that cannot reach MySQL is no reason to stop the pipeline.
func (p *Pipeline) ResolveLoop(ctx context.Context) error {
	log := p.Log.Named("resolver")
	t := time.NewTicker(p.Config.Checkpoint.ResolveInterval)
	defer t.Stop()
	firstSeen := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !p.recovered.Load() {
			continue
		}
		if err := p.resolvePass(ctx, log, firstSeen); err != nil && ctx.Err() == nil {
			log.Warn("resolver pass failed", zap.Error(err))
		}
	}
}

func (p *Pipeline) resolvePass(ctx context.Context, log *zap.Logger, firstSeen map[string]time.Time) error {
	// Operators' `relay txns resolve` runs in another process: it leaves an audit row, counted here once.
	if n, err := p.Ledger.ClaimManualResolves(ctx); err != nil {
		log.Warn("counting manual resolutions failed", zap.Error(err))
	} else {
		p.Metrics.Transactions.WithLabelValues("commit", metrics.OriginManual).Add(float64(n[ledger.AuditCommit]))
		p.Metrics.Transactions.WithLabelValues("rollback", metrics.OriginManual).Add(float64(n[ledger.AuditRollback]))
	}
	branches, err := JobBranches(ctx, p.Sink, p.Config.Job.Name)
	if err != nil {
		return err
	}
	mine, err := owned(ctx, p.Ledger, branches)
	if err != nil {
		return err
	}
	isMine := map[string]bool{}
	for _, b := range mine {
		isMine[b.Tag] = true
	}
	live := p.sessionFirstID.Load()
	byOwner := map[string][]Branch{} // branches to resolve, under the ledger of the instance that owns them
	var doubt []Branch               // left behind: resolvable now or waiting for an operator
	for _, b := range branches {
		key := p.Ledger.Key()
		if isMine[b.Tag] {
			if b.Checkpoint >= live {
				continue // the live session's own, in flight
			}
		} else {
			var ok bool
			if key, ok, err = p.Ledger.BlockOwner(ctx, b.Checkpoint); err != nil {
				return err
			}
			if !ok {
				doubt = append(doubt, b) // no block says whose: only an operator can tell
				continue
			}
			if running, err := ledger.IsHeld(ctx, p.Ledger.ForKey(key)); err != nil || running {
				continue // its instance is up and answers for it
			}
		}
		doubt = append(doubt, b)
		byOwner[key] = append(byOwner[key], b)
	}
	p.exportDoubt(log, doubt, firstSeen)
	for key, bs := range byOwner {
		if key == p.Ledger.Key() {
			err = p.resolveAll(ctx, p.Ledger, bs, live, log)
		} else {
			err = p.takeOver(ctx, key, bs, log)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// exportDoubt publishes how many branches are left behind and how long the oldest has been seen
// (XA RECOVER tells no age, so age counts from the first pass that saw it).
func (p *Pipeline) exportDoubt(log *zap.Logger, doubt []Branch, firstSeen map[string]time.Time) {
	now := time.Now()
	seen := map[string]bool{}
	var oldest time.Duration
	for _, b := range doubt {
		seen[b.Tag] = true
		if _, ok := firstSeen[b.Tag]; !ok {
			firstSeen[b.Tag] = now
		}
		oldest = max(oldest, now.Sub(firstSeen[b.Tag]))
	}
	for tag := range firstSeen {
		if !seen[tag] {
			delete(firstSeen, tag)
		}
	}
	p.Metrics.InDoubtBranches.Set(float64(len(doubt)))
	p.Metrics.InDoubtOldestAge.Set(oldest.Seconds())
	if oldest > p.Config.Checkpoint.InDoubtAlertAge {
		log.Warn("in-doubt branch older than the alert age", zap.Duration("age", oldest), zap.Int("branches", len(doubt)))
	}
}

// takeOver resolves the branches of a stopped instance: it takes that instance's fence first (so a
// zombie of it can no longer write a decision), applies the ledger's verdicts, and lets go.
func (p *Pipeline) takeOver(ctx context.Context, key string, bs []Branch, log *zap.Logger) error {
	other := p.Ledger.ForKey(key)
	f, err := ledger.Acquire(ctx, other, ledger.FenceConfig{Owner: "resolver of " + p.Ledger.Key()})
	if errors.Is(err, ledger.ErrFenced) {
		return nil // it came back: its own recovery answers for its branches
	}
	if err != nil {
		return err
	}
	defer f.Release()
	p.Metrics.Takeovers.Inc()
	log.Info("resolving a stopped instance's branches", zap.String("instance", key), zap.Int("branches", len(bs)))
	return p.resolveAll(ctx, other, bs, math.MaxInt64, log)
}

// resolveAll applies the ledger's verdict to each branch, then marks the checkpoints done whose
// branches are all resolved.
func (p *Pipeline) resolveAll(ctx context.Context, led *ledger.Ledger, bs []Branch, below int64, log *zap.Logger) error {
	pending := map[int64]bool{}
	for _, b := range bs {
		commit, err := resolveBranch(ctx, led, p.Sink, b, log, metrics.OriginResolver)
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
	return markDone(ctx, led, pending, below, log, metrics.OriginResolver)
}
