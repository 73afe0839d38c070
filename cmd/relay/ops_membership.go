// relay membership switch | forget: move a stopped job between instances (i/M) and a consumer
// group; delete stopped group members' rows.

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/relay-sh/relay/internal/ops"
)

const membershipUsage = `usage: relay membership switch [--yes] [--json] [--config FILE] [--instance i/M]
       relay membership forget [--yes] [--json] [--config FILE]

Run 'relay membership switch --help' or 'relay membership forget --help' for details.
`

const membershipSwitchAbout = `Records the membership of this configuration (membership: group, or instance: i/M) as the job's,
so that processes configured so may start. relay run never switches a job between instances and a
consumer group by itself: a process of the other kind is refused (exit 3) until this has run.

It first prints the plan: the layout the ledger records and the new one, the processes of the job
that still hold their fence (the switch is refused until every one of them stopped: exit 3), and
how many partitions have a committed offset (offsets are kept per partition: each resumes where
its last owner stopped, so nothing is read twice or skipped). It acts only with --yes, or after you
type yes at a terminal; otherwise nothing changes and it exits 5. Recorded in relay_audit.

Switching from i/M to group: stop every instance, run this with membership: group
(RELAY_MEMBERSHIP=group), start the members. Back: stop every member, run this with the instance
layout (RELAY_INSTANCE=i/M, any i), start the instances. Changing M between two instance layouts
needs no switch (stop every instance of the old M first).
`

const membershipForgetAbout = `Deletes the lease and owner rows of the job's stopped group members (membership: group). Every start
of a member process is a member of its own (a new id; a static id's next owner epoch), and each
leaves these rows behind when it stops; relay status counts them as stale members. A live member's
resolver deletes them job.forget_members_after (24h) after their lease ran out; this does it now.
The member's relay_jobs row stays (it keeps the id's owner epoch for a static member that returns).

It first prints the plan: each member it forgets (how long ago its lease ran out) and each it keeps,
with why: it runs (its lock is held, or its lease still runs), or it has something in doubt (a
checkpoint not COMMITTED, or a branch in XA RECOVER: recovery or a live member's resolver settles
those first, then run this again). It acts only with --yes, or after you type yes at a terminal;
otherwise nothing changes and it exits 5. Runs while the job runs. Recorded in relay_audit.
`

func cmdMembership(ctx context.Context, args []string) error {
	return dispatch(ctx, "membership", membershipUsage, args, subcommand{"switch", cmdMembershipSwitch},
		subcommand{"forget", cmdMembershipForget})
}

func cmdMembershipForget(ctx context.Context, args []string) error {
	fs, path := opsFlags("membership forget", "[--yes] [--json] [--config FILE]", membershipForgetAbout,
		`  relay membership forget          # prints the plan, changes nothing (exit 5)
  relay membership forget --yes
`)
	yes := fs.Bool("yes", false, "apply the plan without asking")
	asJSON := fs.Bool("json", false, "print JSON {job, forget, kept, forgotten, applied}")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		r, err := ops.ForgetMembers(ctx, e, confirmer(*yes, *asJSON))
		if err != nil {
			return notConfirmed(err)
		}
		if *asJSON {
			return textOrJSON(true, r)
		}
		if !r.Applied {
			if err := r.WriteText(os.Stdout); err != nil {
				return err
			}
		}
		fmt.Println(r.Done())
		return nil
	})
}

func cmdMembershipSwitch(ctx context.Context, args []string) error {
	fs, path := opsFlags("membership switch", "[--yes] [--json] [--config FILE] [--instance i/M]", membershipSwitchAbout,
		`  RELAY_MEMBERSHIP=group relay membership switch         # prints the plan, changes nothing (exit 5)
  RELAY_MEMBERSHIP=group relay membership switch --yes
  RELAY_INSTANCE=0/3 relay membership switch --yes        # back to 3 instances
`)
	path.instanceFlag(fs)
	yes := fs.Bool("yes", false, "apply the plan without asking")
	asJSON := fs.Bool("json", false, "print JSON {job, from, to, running, partitions, applied}")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		r, err := ops.SwitchMembership(ctx, e, confirmer(*yes, *asJSON))
		if err != nil {
			return notConfirmed(err)
		}
		if *asJSON {
			return textOrJSON(true, r)
		}
		fmt.Println(r.Done())
		return nil
	})
}
