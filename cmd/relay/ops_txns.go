// relay txns list | resolve: prepared XA branches, and settling one by hand.

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/relay-sh/relay/internal/ops"
)

const txnsUsage = `usage: relay txns list [--json] [--config FILE]
       relay txns resolve <tag> --commit|--rollback [--force] [--yes] [--config FILE]
       relay txns resolve <tag> --acknowledge-lost [--yes] [--config FILE]

Prepared XA branches (XA RECOVER) with the ledger's verdict, and settling one by hand.
Run 'relay txns list --help' or 'relay txns resolve --help' for details.
`

const txnsListAbout = `Lists every prepared XA branch on the sink server whose xid is a relay tag
(<job>-<checkpoint>-<subtask>), with:
  kind     job (the configured job), other_job (another job of this ledger), probe (a preflight
           probe), or unknown_job (its job is not in this ledger's relay_jobs: XA branches are
           visible server-wide, so its ledger may be another database on the same server)
  ledger   the checkpoint's ledger state: COMMITTING, COMMITTED, or "no row"
  verdict  commit when the ledger decided the checkpoint, rollback otherwise; unknown for an
           unknown_job branch: only its own ledger can say, and relay txns resolve refuses it
           here, --force or not
  age      since the ledger's decision; "unknown" when undecided (XA RECOVER has no age)
  state    who settles it:
             in flight        undecided, and the live owner of its instance (fence held, lease
                              running) is deciding that checkpoint now: leave it
             awaiting commit  decided: the live owner, or the next relay run, commits it
             left behind      undecided, of an earlier session while an owner runs: that
                              relay's resolver rolls it back
             orphaned         undecided and no owner alive: the next relay run's recovery rolls
                              it back (or relay txns resolve --rollback)
A relay running for the job resolves its own branches from the ledger (at start and every
checkpoint.resolve_interval); branches listed for long are worth a look.

--json prints {branches: [{tag, job, kind, checkpoint, subtask, verdict, ledger_state,
decided_at, age_seconds, state, live_owner}], foreign} (state: in_flight, awaiting_commit,
left_behind, orphaned, or unknown for a probe or an unknown job's branch) where foreign counts prepared XA transactions that are not
relay's, and lost: [{id, decided_at, records, tags, lost_tags, offsets}] the job's checkpoints a
listed branch of which the server rolled back (gone from XA RECOVER; relay run refuses to start
until relay txns resolve <tag> --acknowledge-lost).
`

const txnsResolveAbout = `Commits (--commit) or rolls back (--rollback) one prepared branch, by its tag.

It first prints the plan: the branch, its job and checkpoint, the ledger's verdict, and what the
action does to the job's records (nothing lost or counted twice when it follows the ledger; lost,
or counted twice, when forced against it). It acts only with --yes, or after you type yes at a
terminal; otherwise nothing changes and it exits 5. While it waits for your answer it holds the
job's fence (when it takes one, see below), so the verdict cannot change under the plan (a relay
started meanwhile exits 3).

It refuses (exit 1) to contradict the ledger: committing a branch of a checkpoint the ledger never
decided, or rolling back one of a decided checkpoint, breaks the checkpoint's all-or-nothing
commit. --force overrides that refusal, for when you know the ledger is wrong; the audit row says
so. It always refuses a branch of an unknown job (kind unknown_job: no ledger for it in the
connected database), --force or not: its ledger may be another database and may have decided it.
Resolve it with that job's own configuration.

It takes the job's fence while it acts, so no relay can decide the checkpoint meanwhile: while the
job runs it refuses with exit 3 (the running relay resolves its own branches), except --commit of
a decided branch, which is what the relay would do anyway. A branch still attached to a live
session (MySQL answers XAER_NOTA) cannot be resolved from outside: stop that process first.

When the server answers a --commit with XA_RBROLLBACK (it rolled the branch back), the branch
was empty if the ledger's decision does not list it: that is success, nothing is lost. If the
decision lists it, its rows are lost: it fails, and the checkpoint is recorded LOST in the ledger;
relay run then refuses to start (exit 1, naming the checkpoint, the tag and its offsets) until
you recount those records and acknowledge the loss with --acknowledge-lost <tag> (the tag of the
lost branch; the plan shows the checkpoint and its offsets, and --yes applies it). relay status
and relay txns list show LOST checkpoints.

Every resolution is logged (origin "manual", with the tag) and recorded in relay_audit (job, tag,
action, operator, time, forced); a running relay counts it in
relay_transactions_total{origin="manual"}.
`

func cmdTxns(ctx context.Context, args []string) error {
	return dispatch(ctx, "txns", txnsUsage, args, subcommand{"list", cmdTxnsList}, subcommand{"resolve", cmdTxnsResolve})
}

func cmdTxnsList(ctx context.Context, args []string) error {
	fs, path := opsFlags("txns list", "[--json] [--config FILE]", txnsListAbout,
		`  relay txns list
  relay txns list --json | jq -r '.branches[] | select(.kind == "unknown_job") | .tag'
`)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		l, err := ops.ListTxns(ctx, e)
		if err != nil {
			return err
		}
		return textOrJSON(*asJSON, l)
	})
}

func cmdTxnsResolve(ctx context.Context, args []string) error {
	fs, path := opsFlags("txns resolve", "<tag> --commit|--rollback|--acknowledge-lost [--force] [--yes] [--config FILE]", txnsResolveAbout,
		`  relay txns resolve orders_eu-1043-0 --rollback          # prints the plan, changes nothing (exit 5)
  relay txns resolve orders_eu-1042-3 --commit --yes      # the ledger decided 1042: same as recovery
  relay txns resolve orders_eu-1043-0 --rollback --yes    # 1043 has no ledger row
  relay txns resolve orders_eu-1042-3 --rollback --force --yes   # against the ledger: only if it is wrong
  relay txns resolve orders_eu-1044-1 --acknowledge-lost --yes   # its rows are lost: recounted, go on
`)
	commit := fs.Bool("commit", false, "commit the branch")
	rollback := fs.Bool("rollback", false, "roll the branch back")
	force := fs.Bool("force", false, "act even against the ledger's verdict (recorded as forced); never for an unknown job")
	ackLost := fs.Bool("acknowledge-lost", false, "acknowledge that the LOST checkpoint of this (rolled back) branch lost its rows, so relay run starts again")
	yes := fs.Bool("yes", false, "apply the plan without asking")
	tag, err := parseWithArg(fs, args)
	if err != nil {
		return err
	}
	n := 0
	for _, b := range []bool{*commit, *rollback, *ackLost} {
		if b {
			n++
		}
	}
	if tag == "" || n != 1 || (*ackLost && *force) {
		return usageError{"txns resolve: give a tag and exactly one of --commit, --rollback or --acknowledge-lost (--force only with --commit or --rollback)"}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if *ackLost {
		return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
			a, err := ops.AcknowledgeLost(ctx, e, tag, confirmer(*yes, false))
			if err != nil {
				return notConfirmed(err)
			}
			fmt.Fprintf(os.Stdout, "checkpoint %d acknowledged as lost (%s); relay run resumes after it; recorded in relay_audit\n", a.Lost.ID, tag)
			return nil
		})
	}
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		r, err := ops.Resolve(ctx, e, tag, *commit, *force, confirmer(*yes, false))
		if err != nil {
			return notConfirmed(err)
		}
		done := map[string]string{ops.VerdictCommit: "committed", ops.VerdictRollback: "rolled back"}[r.Action]
		switch {
		case r.ServerRolledBack:
			fmt.Fprintf(os.Stdout, "the server rolled back %s: an empty branch checkpoint %d's decision does not list, nothing lost; recorded in relay_audit\n", tag, r.Checkpoint)
			return nil
		case r.Forced:
			fmt.Fprintf(os.Stdout, "%s %s AGAINST the ledger's verdict (%s), forced; recorded in relay_audit\n", done, tag, r.Verdict)
		default:
			fmt.Fprintf(os.Stdout, "%s %s (ledger verdict: %s); recorded in relay_audit\n", done, tag, r.Verdict)
		}
		return nil
	})
}
