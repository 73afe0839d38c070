// relay membership switch: move a stopped job between instances (i/M) and a consumer group.
//
// Invariant: the switch is recorded only while no process of the job holds its fence, after the
// operator saw the plan; relay run never switches between the two by itself (ledger.ErrLayoutSwitch).

package ops

import (
	"context"
	"fmt"
	"io"
	"strings"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
)

// MembershipReport is the plan of a membership switch and, once applied, its outcome.
type MembershipReport struct{ ledger.LayoutPlan }

// SwitchMembership records the configured membership (membership group, or instance i/M) as the
// job's, once confirm accepts the plan and no process of the job runs.
func SwitchMembership(ctx context.Context, e *Env, confirm Confirm) (*MembershipReport, error) {
	to := e.Config.InstanceCount()
	if e.Config.Group() {
		to = ledger.LayoutGroup
	}
	job := e.Ledger.Job()
	plan, err := ledger.SwitchLayout(ctx, e.Ledger.DB(), job, to, false)
	r := &MembershipReport{plan}
	if err != nil {
		return r, err
	}
	if err := confirmed(confirm, r); err != nil {
		return r, err
	}
	if r.LayoutPlan, err = ledger.SwitchLayout(ctx, e.Ledger.DB(), job, to, true); err != nil {
		return r, err
	}
	if len(r.Up) > 0 {
		return r, fmt.Errorf("%w: membership switch needs the job stopped: %s still up", ledger.ErrFenced, strings.Join(r.Up, ", "))
	}
	if !r.Applied {
		return r, nil // the job already runs so
	}
	e.Log.Named("membership").Info("membership switched", zap.String("job", job), zap.String("from", r.From), zap.String("to", r.To),
		zap.Int("partitions", r.Partitions), zap.String("operator", e.Operator))
	if err := e.Ledger.Audit(ctx, "layout", ledger.AuditLayoutSwitch, e.Operator, false, "from "+r.From+" to "+r.To); err != nil {
		return r, fmt.Errorf("membership switched, but not recorded: %w", err)
	}
	return r, nil
}

// WriteText renders the plan for people.
func (r *MembershipReport) WriteText(w io.Writer) error {
	from := r.From
	if from == "" {
		from = "nothing yet (the job never ran)"
	}
	fmt.Fprintf(w, "plan for job %s: switch from %s to %s\n", r.Job, from, r.To)
	if len(r.Up) > 0 {
		fmt.Fprintf(w, "refused until they stop: %s hold the job's fence (stop every process of the job first)\n", strings.Join(r.Up, ", "))
	}
	fmt.Fprintf(w, "offsets: %d partitions have a committed offset; each resumes where it stopped, whichever process reads it next (nothing is read twice or skipped)\n", r.Partitions)
	fmt.Fprintln(w, "prepared branches of the old processes are resolved from the ledger by the new ones (recovery and the resolver)")
	fmt.Fprintf(w, "after the switch, only processes configured as %s start; others are refused (exit 3)\n", r.To)
	return nil
}

// Done says what the applied switch did.
func (r *MembershipReport) Done() string {
	if !r.Applied {
		return fmt.Sprintf("job %s already runs as %s: nothing to switch", r.Job, r.To)
	}
	return fmt.Sprintf("job %s switched to %s; start its processes with that configuration; recorded in relay_audit", r.Job, r.To)
}
