// Package ops is the logic behind relay's operator commands: status, txns list/resolve, offsets
// reset, spec diff/accept, verify and preflight (docs/RUNBOOK.md, "Tools"), kept out of cmd/relay
// so it is testable without the binary.
//
// Invariant: an operator command never contradicts the ledger unless the operator forces it, and
// never acts on a branch whose job's ledger it cannot read, forced or not; every action that
// changes a branch or the resume offsets first hands its plan (what is committed, rolled back,
// read again or skipped) to the operator's Confirm and changes nothing without a yes, runs under
// the fence of the instance that could otherwise decide concurrently (the one exception:
// committing a branch the ledger already decided, as the running relay itself would), and leaves
// one relay_audit row; so does relay spec accept, which changes the recorded table meanings.
package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/ledger"
)

// Env is what every command works on: the validated configuration and the opened databases.
type Env struct {
	Config   config.Config
	Sink     *sql.DB
	Ledger   *ledger.Ledger // the configured job's ledger (its DB may be the sink's)
	Log      *zap.Logger
	Operator string // who runs the command (user@host pid), for audit rows and fence ownership
	// Galera is what the sink server said about wsrep when the command started; with mode unset
	// on a Galera node, Config.Mode is held and ModePicked is set (config.ResolveMode).
	Galera     database.Galera
	ModePicked bool
}

// Plan is what a command is about to change, rendered for people; as JSON for scripts.
type Plan interface{ WriteText(io.Writer) error }

// Confirm is shown a command's plan before the command changes anything and says whether to go on.
type Confirm func(Plan) (bool, error)

// ErrNotConfirmed means the operator did not confirm the plan: nothing changed.
var ErrNotConfirmed = errors.New("nothing changed")

// confirmed asks c about p; a no is ErrNotConfirmed.
func confirmed(c Confirm, p Plan) error {
	ok, err := c(p)
	if err != nil {
		return fmt.Errorf("confirmation: %w", err)
	}
	if !ok {
		return ErrNotConfirmed
	}
	return nil
}

// consumer opens a read_committed consumer on the configured topics. Its group id is not the job's:
// an operator command never touches the job's consumer group.
func (e *Env) consumer() (*consumer.Consumer, error) {
	k := e.Config.Kafka
	return consumer.New(consumer.Options{Brokers: k.Brokers.String(), Topics: k.Topics, GroupID: "relay-ops-" + e.Config.Job.Name,
		StartOffset: "earliest", Properties: k.Properties}, e.Log.Named("consumer"))
}

// partitions opens a consumer and lists the configured topics' partitions; the caller closes it.
func (e *Env) partitions(ctx context.Context) (*consumer.Consumer, map[string][]int32, error) {
	c, err := e.consumer()
	if err != nil {
		return nil, nil, err
	}
	parts, err := c.Partitions(ctx)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, parts, nil
}

// Kinds of a prepared branch, by the job its tag names.
const (
	KindJob      = "job"       // the configured job
	KindOtherJob = "other_job" // another job of this ledger
	KindProbe    = "probe"     // a preflight probe (probeXA), never part of a checkpoint
	// KindUnknown is a relay-shaped tag whose job is not in this ledger. XA branches are visible
	// server-wide, so its ledger may well live in another database of the server and have decided
	// it: from here it is unknown, never undecided, and no command here resolves it.
	KindUnknown = "unknown_job"
)

// Preflight's probe tags are relaypreflight-<UnixNano>-<pid>: a checkpoint no job's counter ever
// reaches, which keeps a real job named relaypreflight of another ledger from passing for a probe.
const (
	probeJob        = "relaypreflight"
	probeCheckpoint = 1_000_000_000_000_000_000 // UnixNano since 2001-09-09
)

// Verdicts: what the ledger says must happen to a branch.
const (
	VerdictCommit   = "commit"
	VerdictRollback = "rollback"
	VerdictUnknown  = "unknown" // KindUnknown: only the job's own ledger can say
)

// Txn is one prepared branch listed by XA RECOVER, with the ledger's verdict.
type Txn struct {
	Tag         string     `json:"tag"`
	Job         string     `json:"job"`
	Kind        string     `json:"kind"`
	Checkpoint  int64      `json:"checkpoint"`
	Subtask     int        `json:"subtask"`
	Verdict     string     `json:"verdict"`
	LedgerState string     `json:"ledger_state"` // COMMITTING, COMMITTED, or "" (no row: undecided)
	DecidedAt   *time.Time `json:"decided_at"`
	AgeSeconds  *float64   `json:"age_seconds"` // null: unknown (XA RECOVER has no age; only a decision has a time)
	// State says who will settle the branch (one of the State* values); LiveOwner is the live
	// owner of its instance, if any.
	State     string `json:"state"`
	LiveOwner string `json:"live_owner,omitempty"`
}

// States of a prepared branch: who settles it, and whether an operator has anything to do.
const (
	// StateInFlight: undecided, and its instance's live owner (fence held, lease running) took
	// the checkpoint id from the block its session is using: it is deciding it now; leave it.
	StateInFlight = "in_flight"
	// StateAwaitingCommit: decided; the live owner (or the next relay run) commits it.
	StateAwaitingCommit = "awaiting_commit"
	// StateLeftBehind: undecided, left by an earlier session while a live owner runs: its resolver
	// rolls it back.
	StateLeftBehind = "left_behind"
	// StateOrphaned: undecided and no owner of its instance is alive: the next relay run's
	// recovery rolls it back (or relay txns resolve --rollback).
	StateOrphaned = "orphaned"
	// StateUnknown: a branch of an unknown job (only its own ledger can say) or a preflight probe.
	StateUnknown = "unknown"
)

// StateText is t's state for people.
func (t Txn) StateText() string {
	owner := "no owner alive"
	if t.LiveOwner != "" {
		owner = "live owner " + t.LiveOwner
	}
	switch t.State {
	case StateInFlight:
		return fmt.Sprintf("in flight (%s, checkpoint %d): it decides it; leave it", owner, t.Checkpoint)
	case StateAwaitingCommit:
		if t.LiveOwner != "" {
			return fmt.Sprintf("decided, awaiting commit (%s commits it)", owner)
		}
		return "decided, awaiting commit (no owner alive: the next relay run commits it)"
	case StateLeftBehind:
		return fmt.Sprintf("undecided, left by an earlier session (%s: its resolver rolls it back)", owner)
	case StateOrphaned:
		return "undecided, no owner alive: recovery rolls it back at the next relay run"
	}
	if t.Kind == KindProbe {
		return "preflight probe: roll it back"
	}
	return "unknown job: only its own ledger can say"
}

// Age renders the branch's age for people.
func (t Txn) Age() string {
	if t.AgeSeconds == nil {
		return "unknown"
	}
	return ageString(*t.AgeSeconds)
}

// inventory lists every relay-shaped prepared branch on the sink server with its verdict; other
// XA transactions (not relay's tag shape) are only counted.
func (e *Env) inventory(ctx context.Context) (txns []Txn, foreign int, err error) {
	all, err := commit.ListPrepared(ctx, e.Sink)
	if err != nil {
		return nil, 0, err
	}
	jobs, err := ledger.Jobs(ctx, e.Ledger.DB())
	if err != nil {
		return nil, 0, err
	}
	byJob := map[string][]int64{}
	for _, r := range all {
		job, c, s := r.Job, r.Checkpoint, r.Subtask
		if !r.Relay {
			foreign++
			continue
		}
		t := Txn{Tag: r.Tag, Job: job, Kind: KindUnknown, Checkpoint: c, Subtask: s, Verdict: VerdictUnknown}
		switch {
		case job == e.Config.Job.Name:
			t.Kind, t.Verdict = KindJob, VerdictRollback
		case jobs[job]:
			t.Kind, t.Verdict = KindOtherJob, VerdictRollback
		case job == probeJob && c >= probeCheckpoint:
			t.Kind, t.Verdict = KindProbe, VerdictRollback
		}
		txns = append(txns, t)
		if t.Kind == KindJob || t.Kind == KindOtherJob {
			byJob[job] = append(byJob[job], c)
		}
	}
	rows := map[string]map[int64]ledger.Checkpoint{}
	for job, ids := range byJob {
		if rows[job], err = ledger.New(e.Ledger.DB(), job).Lookup(ctx, ids); err != nil {
			return nil, 0, err
		}
	}
	// Read after the rows: a decision that landed while they were read is not in the future.
	now, err := ledger.ServerNow(ctx, e.Ledger.DB())
	if err != nil {
		return nil, 0, err
	}
	for i := range txns {
		if c, ok := rows[txns[i].Job][txns[i].Checkpoint]; ok {
			txns[i].withDecision(c, now)
		}
	}
	if err := e.classify(ctx, txns); err != nil {
		return nil, 0, err
	}
	return txns, foreign, nil
}

// liveOwner is what classify learns of one instance: its live owner ("" when none) and the block
// its session draws checkpoint ids from.
type liveOwner struct {
	owner       string
	first, last int64
}

// classify sets each branch's State from its verdict and the state of the instance that may
// decide its checkpoint (owner): is a process holding its fence with a running lease, and is the
// checkpoint from the block of ids that process's session uses.
func (e *Env) classify(ctx context.Context, txns []Txn) error {
	live := map[string]liveOwner{}
	for i := range txns {
		t := &txns[i]
		if t.Kind != KindJob && t.Kind != KindOtherJob {
			t.State = StateUnknown
			continue
		}
		led, err := owner(ctx, e.Ledger.DB(), *t)
		if err != nil {
			return err
		}
		lo, ok := live[led.Key()]
		if !ok {
			if lo, err = liveOwnerOf(ctx, led); err != nil {
				return err
			}
			live[led.Key()] = lo
		}
		t.LiveOwner = lo.owner
		switch {
		case t.Verdict == VerdictCommit:
			t.State = StateAwaitingCommit
		case lo.owner == "":
			t.State = StateOrphaned
		case t.Checkpoint >= lo.first && t.Checkpoint <= lo.last:
			t.State = StateInFlight
		default:
			t.State = StateLeftBehind
		}
	}
	return nil
}

// liveOwnerOf reads whether a process holds led's fence with a running lease, and its id block.
func liveOwnerOf(ctx context.Context, led *ledger.Ledger) (liveOwner, error) {
	held, err := ledger.IsHeld(ctx, led)
	if err != nil || !held {
		return liveOwner{}, err
	}
	lease, err := led.Lease(ctx)
	if err != nil || lease == nil || lease.Remaining <= 0 {
		return liveOwner{}, err
	}
	lo := liveOwner{owner: fmt.Sprintf("%s, epoch %d", lease.Owner, lease.Epoch)}
	first, last, ok, err := led.NewestBlock(ctx)
	if err != nil {
		return liveOwner{}, err
	}
	if ok {
		lo.first, lo.last = first, last
	}
	return lo, nil
}

// withDecision fills in the verdict of a decided checkpoint.
func (t *Txn) withDecision(c ledger.Checkpoint, now time.Time) {
	t.Verdict = VerdictCommit
	t.LedgerState = string(c.State)
	at := c.DecidedAt
	t.DecidedAt = &at
	age := ageSeconds(now, at)
	t.AgeSeconds = &age
}

// ageSeconds is the time from at to now, both read from the ledger server's clock, never negative:
// callers read now after at, and a server clock stepped back is no reason for a negative age.
func ageSeconds(now, at time.Time) float64 { return max(now.Sub(at).Seconds(), 0) }
