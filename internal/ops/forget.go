// relay membership forget: delete stopped group members' lease and owner rows now, rather than
// job.forget_members_after after their leases ran out (when a live member's resolver does it).
//
// Invariant: a member is forgotten only as the resolver would forget it (ledger.PlanForget, with no
// bound beyond its lease): never one whose lock is held or whose lease still runs, never one with a
// checkpoint not COMMITTED or a branch of its id blocks in XA RECOVER; and only after the operator
// saw the plan.

package ops

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/ledger"
)

// ErrNotGroup means the configured job does not run as a consumer group: it has no members.
var ErrNotGroup = errors.New("not a consumer group job")

// ForgetReport is the plan of relay membership forget and, once applied, its outcome.
type ForgetReport struct {
	Job       string           `json:"job"`
	Forget    []ledger.Stopped `json:"forget"` // the members whose rows are deleted
	Kept      []ledger.Stopped `json:"kept"`   // the members refused, each with why
	Forgotten int              `json:"forgotten"`
	Applied   bool             `json:"applied"`
}

// ForgetMembers deletes the lease and owner rows of the job's stopped members, once confirm accepts
// the plan; members that run, or have anything in doubt, are kept and named.
func ForgetMembers(ctx context.Context, e *Env, confirm Confirm) (*ForgetReport, error) {
	r := &ForgetReport{Job: e.Ledger.Job(), Forget: []ledger.Stopped{}, Kept: []ledger.Stopped{}}
	if !e.Config.Group() {
		return r, fmt.Errorf("membership forget: %w: job %s runs as instances (membership: group is what leaves a member behind per process start)", ErrNotGroup, r.Job)
	}
	keep, err := e.doubtOwners(ctx)
	if err != nil {
		return r, err
	}
	plan, err := ledger.PlanForget(ctx, e.Ledger, 0, keep)
	if err != nil {
		return r, err
	}
	for _, m := range plan {
		if m.Kept == "" {
			r.Forget = append(r.Forget, m)
		} else {
			r.Kept = append(r.Kept, m)
		}
	}
	if len(r.Forget) == 0 {
		return r, nil // nothing to ask about
	}
	if err := confirmed(confirm, r); err != nil {
		return r, err
	}
	// The plan again, now: a member may have started or stopped since it was shown; what is
	// forgotten is what the rule allows at this moment, never more than that.
	if r.Forgotten, err = ledger.ForgetMembers(ctx, e.Ledger, 0, keep); err != nil {
		return r, err
	}
	r.Applied = true
	e.Log.Named("membership").Info("forgot stopped members", zap.String("job", r.Job), zap.Int("members", r.Forgotten),
		zap.Int("kept", len(r.Kept)), zap.String("operator", e.Operator))
	if err := e.Ledger.Audit(ctx, "members", ledger.AuditForgetMembers, e.Operator, false, fmt.Sprintf("forgot %d stopped members", r.Forgotten)); err != nil {
		return r, fmt.Errorf("members forgotten, but not recorded: %w", err)
	}
	return r, nil
}

// doubtOwners are the member keys whose id blocks hold a checkpoint with a branch of the job in XA
// RECOVER, each with the branch's tag: the resolver's keep, seen from here.
func (e *Env) doubtOwners(ctx context.Context) (map[string]string, error) {
	branches, err := commit.JobBranches(ctx, e.Sink, e.Ledger.Job())
	if err != nil {
		return nil, err
	}
	keep := map[string]string{}
	for _, b := range branches {
		key, ok, err := e.Ledger.BlockOwner(ctx, b.Checkpoint)
		if err != nil {
			return nil, err
		}
		if ok {
			keep[key] = "its branch " + b.Tag + " is in XA RECOVER (relay txns list)"
		}
	}
	return keep, nil
}

// WriteText renders the plan for people.
func (r *ForgetReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "plan for job %s: forget %d stopped members (their lease and owner rows; the relay_jobs row stays, keeping the member id's owner epoch)\n", r.Job, len(r.Forget))
	for _, m := range r.Forget {
		fmt.Fprintf(w, "  forget  %s\t%s\tlease ran out %s ago\n", m.ID, m.Owner, ageString(m.ExpiredFor.Seconds()))
	}
	for _, m := range r.Kept {
		fmt.Fprintf(w, "  keep    %s\t%s\t%s\n", m.ID, m.Owner, m.Kept)
	}
	return nil
}

// Done says what the command did.
func (r *ForgetReport) Done() string {
	if !r.Applied {
		return fmt.Sprintf("job %s: no stopped member to forget", r.Job)
	}
	return fmt.Sprintf("job %s: forgot %d stopped members; recorded in relay_audit", r.Job, r.Forgotten)
}
