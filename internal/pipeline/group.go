// Group membership in the pipeline: a change of the assignment moves partitions in and out of the
// running session (docs/PROTOCOL.md, "Group membership").
//
// Invariant: a session of a group member reads exactly the partitions it took in the ledger
// (TakePartitions: at its start, after recovery, and at each grant while it runs), and decides them
// under the epochs it took them at (the fence's claims). A revoked partition leaves the session
// only once every record read of it is decided (the drain), with the poll stopped so nothing more
// of it is read; the group is told it is handed back only then. A lost assignment ends the session
// without another decision.

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/membership"
	"github.com/relay-sh/relay/internal/partition"
)

// errReassigned ends a session on a change of this member's assignment it could not make in
// place: a lost assignment, or a drain or take that failed (err). Without err it is not a failure:
// the next session starts at once on the new assignment.
type errReassigned struct {
	change *membership.Change
	err    error
}

func (e *errReassigned) Error() string {
	if e.err != nil {
		return fmt.Sprintf("the consumer group changed this member's partitions (%s), and moving them failed: %v", e.change.Kind, e.err)
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

// take takes partitions in the ledger (want: the member's assignment at a session's start, the
// partitions granted since while it runs; g: the member's grant they reflect) and adds them to the
// fence's claims at the owner epochs it took them at. What it returns holds those epochs and the
// partitions' committed offsets, read after the owner rows' locks: the latest, whoever decided them.
func (p *Pipeline) take(ctx context.Context, fence *ledger.Fence, want []ledger.Want, g membership.Grant) (ledger.Taken, error) {
	taken, err := p.Ledger.TakePartitions(ctx, fence.Epoch(), want)
	if err != nil {
		return taken, err
	}
	p.Member.Took(g, taken)
	claims := fence.Claims().Clone()
	for t, ps := range taken.Claims {
		for part, e := range ps {
			claims.Set(t, part, e)
		}
	}
	fence.SetClaims(claims)
	p.Log.Info("partitions taken", zap.Any("owner_epochs", taken.Claims), zap.Int("taken_by_others", len(taken.Stolen)),
		zap.Any("handed_over", taken.Handovers))
	return taken, nil
}

// reassign brings the session to the member's assignment as the group has it now: partitions
// revoked since are drained and released, partitions granted are taken and read. The poll is
// stopped meanwhile (quiesce): every record read before is folded into the epoch the drain decides,
// and none of a released partition is read after.
func (s *session) reassign(batches <-chan *polled, free chan<- *polled) error {
	p := s.p
	wants, g := p.Member.Wants()
	add, release := moves(s.fence.Claims(), wants)
	if len(add) == 0 && release.Len() == 0 {
		return nil
	}
	resume, err := s.quiesce(batches, free)
	if err != nil {
		return err
	}
	defer resume()
	if release.Len() > 0 {
		if err := s.drain(); err != nil {
			return err
		}
		if err := s.release(release); err != nil {
			return err
		}
	}
	if len(add) > 0 {
		if err := s.add(add, g); err != nil {
			return err
		}
	}
	p.Metrics.AssignedPartitions.Set(float64(s.positions.Len()))
	p.setState(Running)
	return nil
}

// moves compares what the session claims with what the member wants now: the partitions to take
// (add) and to drain and release (release).
func moves(claims partition.Claims, wants []ledger.Want) (add []ledger.Want, release partition.Claims) {
	wanted := partition.Claims{}
	release = partition.Claims{}
	for _, w := range wants {
		wanted.Set(w.Topic, w.Partition, w.Held)
		e, claimed := claims.Get(w.Topic, w.Partition)
		switch {
		case !claimed:
			add = append(add, w)
		case w.Held == 0:
			// Granted anew while claimed: the group took it back since (a revoke acknowledged on
			// the drain's bound, or a loss and a grant while this session's take ran) and may
			// have let another member take it meanwhile. Released and taken again, so the session
			// reads it from the ledger's offset at a new epoch.
			release.Set(w.Topic, w.Partition, e)
			add = append(add, w)
		}
	}
	for t, ps := range claims {
		for part, e := range ps {
			if _, ok := wanted.Get(t, part); !ok {
				release.Set(t, part, e)
			}
		}
	}
	return add, release
}

// release stops reading partitions whose every record read is decided (after the drain, with no
// checkpoint in flight), and gives up their claims: this session decides nothing more of them.
func (s *session) release(parts partition.Claims) error {
	if err := s.cons.Remove(parts); err != nil {
		return err
	}
	claims := s.fence.Claims().Clone()
	s.updateDecided(func(decided partition.Offsets) {
		for t, ps := range parts {
			for part := range ps {
				delete(claims[t], part)
				delete(decided[t], part)
				delete(s.positions[t], part)
				delete(s.begin[t], part)
				delete(s.takeovers[t], part)
				s.unmove(t, part)
				s.p.Metrics.ConsumerLag.DeleteLabelValues(t, fmt.Sprint(part))
			}
		}
	})
	s.fence.SetClaims(claims)
	s.p.Log.Info("partitions released", zap.Any("owner_epochs", parts))
	return nil
}

// add takes granted partitions and starts reading them from their committed offsets (or the start
// position), once the checkpoint in flight (cut without them) is decided. g is the member's grant
// want reflects.
func (s *session) add(want []ledger.Want, g membership.Grant) error {
	p := s.p
	if err := s.awaitInflight(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, p.Config.Checkpoint.RestartAllowance)
	defer cancel()
	taken, err := p.take(ctx, s.fence, want, g)
	if err != nil {
		return fmt.Errorf("take partitions: %w", err)
	}
	if taken.Claims.Len() == 0 {
		return nil
	}
	s.handedOver(taken.Handovers)
	start, err := s.cons.Add(ctx, taken.Claims, taken.Offsets)
	if err == nil {
		err = ledger.CheckRange(ctx, start, s.cons.AssignedWatermarks)
	}
	if err != nil {
		return err
	}
	s.started(start)
	if s.moved == nil {
		s.moved = partition.Offsets{}
	}
	for t, ps := range start {
		for part, off := range ps {
			s.moved.Set(t, part, off)
		}
	}
	p.Log.Info("partitions added", zap.Any("offsets", start))
	// librdkafka knows the new partitions' watermarks only after their first fetch: until then,
	// those Add read.
	s.exportLag(func(t string, part int32) (int64, bool) {
		if hi, ok := s.cons.HighWatermark(t, part); ok {
			return hi, true
		}
		_, hi, err := s.cons.AssignedWatermarks(t, part, 0)
		return hi, err == nil
	})
	return nil
}

// handedOver times the takeover of each partition taken after another process decided it, until
// the first checkpoint of this session that commits it (tookOver).
func (s *session) handedOver(hs []ledger.Handover) {
	if len(hs) == 0 {
		return
	}
	now := time.Now()
	s.decidedMu.Lock()
	defer s.decidedMu.Unlock()
	if s.takeovers == nil {
		s.takeovers = partition.Offsets{}
	}
	for _, h := range hs {
		s.takeovers.Set(h.Topic, h.Partition, now.Add(-h.Since).UnixNano())
	}
}

// tookOver observes the takeover of every handed-over partition that checkpoint offsets committed
// at now. Called with decidedMu held.
func (s *session) tookOver(offsets partition.Offsets, now time.Time) {
	for t, ps := range s.takeovers {
		for part, last := range ps {
			if _, ok := offsets.Get(t, part); ok {
				s.p.Metrics.PartitionTakeover.Observe(max(now.Sub(time.Unix(0, last)), 0).Seconds())
				delete(ps, part)
			}
		}
	}
}

// unmove forgets a partition's pending first record (moved): folded, or released unread.
func (s *session) unmove(t string, part int32) {
	delete(s.moved[t], part)
	if len(s.moved[t]) == 0 {
		delete(s.moved, t)
	}
}
