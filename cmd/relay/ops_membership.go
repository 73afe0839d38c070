// relay membership switch: move a stopped job between instances (i/M) and a consumer group.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/ops"
)

const membershipUsage = `usage: relay membership switch [--yes] [--json] [--config FILE]

Run 'relay membership switch --help' for details.
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

func cmdMembership(ctx context.Context, args []string) error {
	return dispatch(ctx, "membership", membershipUsage, args, subcommand{"switch", cmdMembershipSwitch})
}

func cmdMembershipSwitch(ctx context.Context, args []string) error {
	fs, path := opsFlags("membership switch", "[--yes] [--json] [--config FILE]", membershipSwitchAbout,
		`  RELAY_MEMBERSHIP=group relay membership switch         # prints the plan, changes nothing (exit 5)
  RELAY_MEMBERSHIP=group relay membership switch --yes
  RELAY_INSTANCE=0/3 relay membership switch --yes        # back to 3 instances
`)
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
