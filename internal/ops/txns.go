// Txns: listing prepared branches with the ledger's verdict, and resolving one by hand.
//
// Invariant: a manual resolution agrees with the ledger unless forced, is never applied to a branch
// whose job has no ledger in the connected database (forced or not: that ledger may have decided
// it), and is applied only after the operator confirmed its plan; it is applied under the fence
// of the instance that may decide the branch's checkpoint (the verdict is read after taking it, so
// no decision can land in between), except a commit of an already decided branch, which is what a
// running relay would do itself and is allowed while it runs. Every resolution is logged with
// origin "manual" and leaves one relay_audit row.

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
)

var (
	// ErrNoBranch means XA RECOVER does not list the tag.
	ErrNoBranch = errors.New("no such prepared branch")
	// ErrContradiction means the requested action goes against the ledger's verdict.
	ErrContradiction = errors.New("contradicts the ledger")
	// ErrAttached means the branch still belongs to a live session, which alone may end it.
	ErrAttached = errors.New("branch is still attached to a running process")
	// ErrUnknownJob means the branch's job has no ledger in the connected database.
	ErrUnknownJob = errors.New("unknown job: resolve it from its own ledger")
)

// TxnList is `relay txns list`.
type TxnList struct {
	Branches []Txn `json:"branches"`
	// Foreign counts prepared XA transactions whose xid is not a relay tag (other applications).
	Foreign int `json:"foreign"`
	// Lost lists the configured job's checkpoints whose rows the server lost (ledger.Lost): their
	// branches are gone from XA RECOVER, and relay run refuses to start until they are acknowledged.
	Lost []LostInfo `json:"lost"`
}

// ListTxns lists every relay branch on the sink server: the job's, other jobs' of this ledger,
// preflight probes, and branches of unknown jobs (not in this ledger).
func ListTxns(ctx context.Context, e *Env) (*TxnList, error) {
	txns, foreign, err := e.inventory(ctx)
	if err != nil {
		return nil, err
	}
	if txns == nil {
		txns = []Txn{}
	}
	lost, err := lostInfo(ctx, e.Ledger)
	if err != nil {
		return nil, err
	}
	return &TxnList{Branches: txns, Foreign: foreign, Lost: lost}, nil
}

// WriteText renders the list for people.
func (l *TxnList) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(l.Branches) == 0 {
		fmt.Fprintln(tw, "no prepared relay branches")
	} else {
		writeTxns(tw, l.Branches)
	}
	if l.Foreign > 0 {
		fmt.Fprintf(tw, "(%d other prepared XA transactions do not carry a relay tag)\n", l.Foreign)
	}
	writeLost(tw, l.Lost)
	return tw.Flush()
}

// Resolution is the plan and then the outcome of `relay txns resolve`.
type Resolution struct {
	Txn
	Action string `json:"action"`
	Forced bool   `json:"forced"` // the action goes against the ledger's verdict
	Effect string `json:"effect"` // what the action does to the job's records
	// ServerRolledBack: a commit the server answered with XA_RBROLLBACK for an empty branch the
	// decision does not list (Action is then rollback).
	ServerRolledBack bool `json:"server_rolled_back"`
}

// WriteText renders the plan for people.
func (r *Resolution) WriteText(w io.Writer) error {
	state := r.LedgerState
	if state == "" {
		state = "no row"
	}
	verb := map[string]string{VerdictCommit: "commit", VerdictRollback: "roll back"}[r.Action]
	_, err := fmt.Fprintf(w, "plan: %s %s (job %s, checkpoint %d, subtask %d; ledger %s, verdict %s)\n  %s\n",
		verb, r.Tag, r.Job, r.Checkpoint, r.Subtask, state, r.Verdict, r.Effect)
	return err
}

// effect says what resolving t with action does to the job's records.
func effect(t Txn, action string) string {
	switch {
	case t.Kind == KindProbe:
		return "a preflight probe: rolling it back removes its one placeholder row; no record is affected"
	case action == t.Verdict && action == VerdictCommit:
		return fmt.Sprintf("checkpoint %d is decided: committing makes this branch's rows visible, as recovery would; nothing is counted twice or lost", t.Checkpoint)
	case action == t.Verdict:
		return fmt.Sprintf("checkpoint %d was never decided: the job's next run reads its records again from the last decided offsets; nothing is counted twice or lost", t.Checkpoint)
	case action == VerdictRollback:
		return fmt.Sprintf("AGAINST the ledger: checkpoint %d is decided and the job resumes after it, so the records this branch holds (subtask %d's share of the checkpoint) will never be counted", t.Checkpoint, t.Subtask)
	default:
		return fmt.Sprintf("AGAINST the ledger: checkpoint %d was never decided, so the job's next run reads its records again and what this branch holds is counted twice", t.Checkpoint)
	}
}

// attachedRetry bounds the wait for a session the server has not yet noticed is gone; past it, the
// session is taken to be alive.
var attachedRetry = fault.Policy{Attempts: 6, Initial: 250 * time.Millisecond, Max: time.Second}

var errGone = errors.New("branch no longer listed by XA RECOVER")

// Resolve commits (toCommit) or rolls back a prepared branch once confirm accepts the plan. It
// refuses to contradict the ledger unless force is set, and a branch of an unknown job always.
func Resolve(ctx context.Context, e *Env, tag string, toCommit, force bool, confirm Confirm) (*Resolution, error) {
	t, err := e.find(ctx, tag)
	if err != nil {
		return nil, err
	}
	if t.Kind == KindUnknown {
		return nil, fmt.Errorf("%w: refusing %s even with --force: %s%s", ErrUnknownJob, tag, t.why(), e.ledgersOf(ctx, t.Job))
	}
	action := VerdictRollback
	if toCommit {
		action = VerdictCommit
	}
	if t.Kind != KindProbe {
		led, err := owner(ctx, e.Ledger.DB(), t)
		if err != nil {
			return nil, err
		}
		fence, err := ledger.Acquire(ctx, led, ledger.FenceConfig{Operator: true, Owner: "relay txns resolve by " + e.Operator, Cluster: e.Galera.On})
		switch {
		case err == nil:
			defer fence.Release()
			// Under the fence no decision can land any more: read the verdict that stays.
			decided, err := led.Verdict(ctx, t.Checkpoint)
			if err != nil {
				return nil, err
			}
			if decided != (t.Verdict == VerdictCommit) {
				if t, err = e.find(ctx, tag); err != nil {
					return nil, err
				}
			}
		case errors.Is(err, ledger.ErrFenced) && toCommit && t.Verdict == VerdictCommit:
			// The decision is durable; committing its branch is what the running relay would do.
		case errors.Is(err, ledger.ErrFenced):
			return nil, fmt.Errorf("resolve %s: %w (while the job runs, its resolver settles the job's branches from the ledger; stop it to %s by hand)", tag, err, action)
		default:
			return nil, err
		}
	}
	forced := action != t.Verdict
	if forced && !force {
		return nil, fmt.Errorf("%w: refusing to %s %s: %s; use --force only if you know the ledger is wrong", ErrContradiction, action, tag, t.why())
	}
	res := &Resolution{Txn: t, Action: action, Forced: forced, Effect: effect(t, action)}
	if err := confirmed(confirm, res); err != nil {
		return res, err
	}
	err = fault.Do(ctx, attachedRetry, func(ctx context.Context) error {
		err := commit.ResolveByHand(ctx, e.Sink, tag, toCommit)
		if fault.IsMySQL(err, fault.XAErNota) {
			if _, lerr := e.find(ctx, tag); errors.Is(lerr, ErrNoBranch) {
				return errGone
			} else if lerr != nil {
				return lerr
			}
			return fault.Transient(err)
		}
		return err
	}, nil)
	switch {
	case fault.IsMySQL(err, fault.XAErNota):
		return nil, fmt.Errorf("%w: %s: MySQL answers XAER_NOTA while XA RECOVER lists it, so the session that prepared it is alive (a running relay, or a client still connected); stop that process, or wait until the server notices it is gone, then retry",
			ErrAttached, tag)
	case errors.Is(err, commit.ErrRolledBack):
		return e.rolledBack(ctx, res, tag)
	case errors.Is(err, errGone):
		return nil, fmt.Errorf("resolve %s: another process resolved it meanwhile: %w", tag, err)
	case err != nil:
		return nil, fmt.Errorf("resolve %s: %w", tag, err)
	}
	e.Log.Named("txns").Info("in-doubt branch resolved", zap.String("tag", tag), zap.String("job", t.Job),
		zap.Int64("checkpoint", t.Checkpoint), zap.String("action", action), zap.String("origin", metrics.OriginManual),
		zap.String("verdict", t.Verdict), zap.Bool("forced", forced), zap.String("operator", e.Operator))
	detail := fmt.Sprintf("checkpoint %d subtask %d (%s); ledger verdict %s", t.Checkpoint, t.Subtask, t.Kind, t.Verdict)
	if err := ledger.New(e.Ledger.DB(), t.Job).Audit(ctx, tag, action, e.Operator, forced, detail); err != nil {
		return res, fmt.Errorf("%s of %s done, but not recorded: %w", action, tag, err)
	}
	return res, nil
}

// rolledBack answers the server's XA_RBROLLBACK to a manual commit as recovery does
// (ledger.Checkpoint.RolledBack): a branch the decision does not list was empty and is settled;
// one it lists lost its rows, and its checkpoint is recorded LOST (relay run then refuses until
// the loss is acknowledged). Either way relay_audit has a row.
func (e *Env) rolledBack(ctx context.Context, res *Resolution, tag string) (*Resolution, error) {
	led := ledger.New(e.Ledger.DB(), res.Job)
	cs, err := led.Lookup(ctx, []int64{res.Checkpoint})
	if err != nil {
		return res, fmt.Errorf("resolve %s: the server rolled it back; reading its checkpoint: %w", tag, err)
	}
	c, ok := cs[res.Checkpoint]
	if !ok { // decided, then pruned: what it listed is unknown, so it may have lost rows
		c = ledger.Checkpoint{ID: res.Checkpoint, Tags: []string{tag}}
	}
	log := e.Log.Named("txns")
	if lost := c.RolledBack(tag); lost != nil {
		log.Error("decided branch rolled back by the server: its rows are lost", zap.String("tag", tag), zap.String("job", res.Job),
			zap.Int64("checkpoint", res.Checkpoint), zap.String("origin", metrics.OriginManual), zap.String("operator", e.Operator), zap.Error(lost))
		if err := led.MarkLost(ctx, c, tag, metrics.OriginManual, e.Operator); err != nil {
			return res, fmt.Errorf("resolve %s: %w (and recording it failed: %w)", tag, lost, err)
		}
		return res, fmt.Errorf("resolve %s: %w; checkpoint %d is now LOST and relay run refuses to start until you acknowledge it (docs/RUNBOOK.md, \"Branch rolled back by the server\")",
			tag, lost, res.Checkpoint)
	}
	res.Action, res.ServerRolledBack = VerdictRollback, true
	res.Effect = fmt.Sprintf("the server rolled back this branch (XA_RBROLLBACK): it wrote nothing, and checkpoint %d's decision does not list it, so nothing is lost", res.Checkpoint)
	log.Info("in-doubt branch resolved", zap.String("tag", tag), zap.String("job", res.Job), zap.Int64("checkpoint", res.Checkpoint),
		zap.String("action", VerdictRollback), zap.String("origin", metrics.OriginManual), zap.String("verdict", res.Verdict),
		zap.Bool("server_rolled_back", true), zap.String("operator", e.Operator))
	detail := fmt.Sprintf("checkpoint %d subtask %d (%s); ledger verdict %s; commit answered XA_RBROLLBACK: an empty branch the decision does not list, nothing lost",
		res.Checkpoint, res.Subtask, res.Kind, res.Verdict)
	if err := led.Audit(ctx, tag, ledger.AuditRollback, e.Operator, false, detail); err != nil {
		return res, fmt.Errorf("rollback of %s by the server, but not recorded: %w", tag, err)
	}
	return res, nil
}

// LossAck is the plan and then the outcome of `relay txns resolve <tag> --acknowledge-lost`.
type LossAck struct {
	Tag  string                `json:"tag"`
	Lost ledger.LostCheckpoint `json:"lost"`
}

// WriteText renders the plan for people.
func (a *LossAck) WriteText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "plan: acknowledge that checkpoint %d of job %s lost rows (decided %s UTC, %d records; branch %s rolled back by the server)\n"+
		"  the records of offsets %s are not in MySQL as the checkpoint said; relay run will resume after them and never write them.\n"+
		"  Recount them first (relay verify; see docs/RUNBOOK.md, \"Branch rolled back by the server\").\n",
		a.Lost.ID, a.Lost.Checkpoint.Instance, a.Lost.DecidedAt.Format("2006-01-02 15:04:05"), a.Lost.Records, a.Tag, a.Lost.Range())
	return err
}

// AcknowledgeLost records, once confirm accepts the plan, that an operator knows checkpoint of tag
// lost rows: the row goes from LOST to LOST_ACKED, with a relay_audit row, and relay run starts
// again. It takes the fence of the checkpoint's instance, so it refuses while that instance runs.
func AcknowledgeLost(ctx context.Context, e *Env, tag string, confirm Confirm) (*LossAck, error) {
	job := e.Ledger.Job()
	id, _, ok := commit.ParseTag(job, tag)
	if !ok {
		return nil, fmt.Errorf("acknowledge %s: not a tag of job %s (<job>-<checkpoint>-<subtask>)", tag, job)
	}
	lost, err := e.Ledger.Lost(ctx)
	if err != nil {
		return nil, err
	}
	a := &LossAck{Tag: tag}
	found := false
	for _, lc := range lost {
		if lc.ID == id {
			a.Lost, found = lc, true
		}
	}
	if !found {
		return nil, fmt.Errorf("acknowledge %s: checkpoint %d of job %s is not LOST (relay status lists lost checkpoints)", tag, id, job)
	}
	led, err := owner(ctx, e.Ledger.DB(), Txn{Job: job, Checkpoint: id})
	if err != nil {
		return nil, err
	}
	fence, err := ledger.Acquire(ctx, led, ledger.FenceConfig{Operator: true, Owner: "relay txns resolve --acknowledge-lost by " + e.Operator, Cluster: e.Galera.On})
	if err != nil {
		return nil, fmt.Errorf("acknowledge %s: %w", tag, err)
	}
	defer fence.Release()
	if err := confirmed(confirm, a); err != nil {
		return a, err
	}
	if err := e.Ledger.AcknowledgeLost(ctx, id, tag, e.Operator); err != nil {
		return a, err
	}
	e.Log.Named("txns").Info("lost checkpoint acknowledged", zap.String("tag", tag), zap.Int64("checkpoint", id),
		zap.String("origin", metrics.OriginManual), zap.String("operator", e.Operator))
	return a, nil
}

// ledgersOf says where job's ledger is, as far as the sink server shows, for a refusal's message.
func (e *Env) ledgersOf(ctx context.Context, job string) string {
	dbs, err := ledger.JobLedgers(ctx, e.Sink, job)
	switch {
	case err != nil:
		return fmt.Sprintf(" (looking for its ledger: %v)", err)
	case len(dbs) == 0:
		return " (no database on this server that relay's user can read has a ledger of it; see docs/RUNBOOK.md)"
	}
	return fmt.Sprintf(" (its ledger: database %s on this server)", strings.Join(dbs, ", "))
}

// owner is the ledger of the instance that may decide t's checkpoint: the one whose id block holds
// it. Without a block (a ledger older than id blocks), the job as a whole, whose fence is granted
// only while no instance runs.
func owner(ctx context.Context, db *sql.DB, t Txn) (*ledger.Ledger, error) {
	job := ledger.New(db, t.Job)
	key, ok, err := job.BlockOwner(ctx, t.Checkpoint)
	if err != nil || !ok {
		return job, err
	}
	m, err := job.Layout(ctx)
	if err != nil {
		return nil, err
	}
	return ledger.NewInstance(db, t.Job, 0, m).ForKey(key), nil
}

// find returns the prepared branch named tag with its verdict.
func (e *Env) find(ctx context.Context, tag string) (Txn, error) {
	txns, _, err := e.inventory(ctx)
	if err != nil {
		return Txn{}, err
	}
	for _, t := range txns {
		if t.Tag == tag {
			return t, nil
		}
	}
	return Txn{}, fmt.Errorf("%w: XA RECOVER does not list %q as a relay branch (already resolved, or not a <job>-<checkpoint>-<subtask> tag)", ErrNoBranch, tag)
}

// why explains the verdict in the words of the ledger.
func (t Txn) why() string {
	switch {
	case t.Kind == KindUnknown:
		return fmt.Sprintf("job %s has no ledger in this database; its ledger may be in another database of this server and may have decided checkpoint %d, so rolling it back could lose a committed checkpoint: run relay txns resolve with job %s's own configuration", t.Job, t.Checkpoint, t.Job)
	case t.Kind == KindProbe:
		return "a preflight probe branch is never part of a checkpoint: it must roll back"
	case t.Verdict == VerdictCommit:
		return fmt.Sprintf("the ledger decided checkpoint %d of job %s (%s, decided %s): its branches must commit", t.Checkpoint, t.Job, t.LedgerState, t.DecidedAt.Format(time.RFC3339))
	default:
		return fmt.Sprintf("checkpoint %d of job %s has no ledger row: it was never decided, so its branches must roll back", t.Checkpoint, t.Job)
	}
}
