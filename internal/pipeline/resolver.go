// Resolver: the periodic pass over XA RECOVER for branches this job left behind.
//
// Invariant: the resolver never touches a branch of the live session (checkpoint id at or above the
// session's first id); older branches of the job are resolved from the ledger verdict, like recovery.
// MySQL has no XA timeout, so this pass is what keeps a forgotten branch from holding locks forever.
package pipeline

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

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
	branches, err := JobBranches(ctx, p.Sink, p.Config.Job.Name)
	if err != nil {
		return err
	}
	live := p.sessionFirstID.Load()
	now := time.Now()
	seen := map[string]bool{}
	var oldest time.Duration
	var left []Branch
	for _, b := range branches {
		if b.Checkpoint >= live {
			continue
		}
		seen[b.Tag] = true
		if _, ok := firstSeen[b.Tag]; !ok {
			firstSeen[b.Tag] = now
		}
		oldest = max(oldest, now.Sub(firstSeen[b.Tag]))
		left = append(left, b)
	}
	for tag := range firstSeen {
		if !seen[tag] {
			delete(firstSeen, tag)
		}
	}
	p.Metrics.InDoubtBranches.Set(float64(len(left)))
	p.Metrics.InDoubtOldestAge.Set(oldest.Seconds())
	if oldest > p.Config.Checkpoint.InDoubtAlertAge {
		log.Warn("in-doubt branch older than the alert age", zap.Duration("age", oldest), zap.Int("branches", len(left)))
	}
	pending := map[int64]bool{}
	for _, b := range left {
		commit, err := resolveBranch(ctx, p.Ledger, p.Sink, b, log, metrics.OriginResolver)
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
	if len(left) == 0 {
		return nil
	}
	return markDone(ctx, p.Ledger, pending, live, log, metrics.OriginResolver)
}
