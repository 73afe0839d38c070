// relay offsets reset: move a stopped job's resume offsets.

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/ops"
)

const offsetsUsage = `usage: relay offsets reset --to earliest|latest|<RFC 3339 time>|<topic:partition=offset,...> [--yes] [--json] [--config FILE]

Run 'relay offsets reset --help' for details.
`

const offsetsResetAbout = `Moves where the job resumes reading, for every partition of the configured topics, by writing a
new commit of the offsets alone (mode xa: a COMMITTED ledger checkpoint row without transactions;
mode held: every partition's offset row); relay resumes from it on its next start.

It first prints the plan, per partition: the ledger's offset (OLD), the new one (NEW), the
partition's watermarks (LOW, HIGH), and what the move does: RE-READ offsets the job already counted
and reads again (their records are counted twice in MySQL) and SKIPPED offsets it will never read
(their records are never counted). Both count offsets, so they bound the records: transaction
markers and aborted records among them are never counted anyway. It acts only with --yes, or
after you type yes at a terminal; otherwise nothing changes and it exits 5. While it waits for
your answer it holds the job's fence (a relay started meanwhile exits 3).

  --to earliest        the first retained offset (re-reads everything still in the topic)
  --to latest          the end of each partition (skips everything not read yet)
  --to 2025-11-24T16:00:00Z
                       the first record at or after that time (the end when there is none)
  --to orders:0=1200,orders:3=980
                       these partitions at these offsets (within the partition's retained range);
                       the others keep their current offsets

Only while the job is stopped: it takes the job's fence (exit 3 while a relay runs; a job run as
several instances needs every instance stopped), and it refuses (exit 1) while XA RECOVER lists
prepared branches of the job: they belong to the current offsets; start relay once (recovery
resolves them) or use relay txns resolve. Totals already in MySQL are not changed: re-reading
records counts them again, skipping loses them. Recorded in relay_audit.
`

func cmdOffsets(ctx context.Context, args []string) error {
	return dispatch(ctx, "offsets", offsetsUsage, args, subcommand{"reset", cmdOffsetsReset})
}

func cmdOffsetsReset(ctx context.Context, args []string) error {
	fs, path := opsFlags("offsets reset", "--to earliest|latest|<time>|<topic:partition=offset,...> [--yes] [--json] [--config FILE]", offsetsResetAbout,
		`  relay offsets reset --to latest                 # prints the plan, changes nothing (exit 5)
  relay offsets reset --to latest --yes
  relay offsets reset --to 2025-11-24T16:00:00Z --yes
  relay offsets reset --to orders:0=1200,orders:1=1175 --yes
`)
	to := fs.String("to", "", "where to move the offsets (required): earliest, latest, an RFC 3339 time, or topic:partition=offset,...")
	yes := fs.Bool("yes", false, "apply the plan without asking")
	asJSON := fs.Bool("json", false, "print JSON {job, to, applied, previous_checkpoint, checkpoint, reread, skipped, partitions: [{topic, partition, old, new, low_watermark, high_watermark, reread, skipped}]}")
	if err := parse(fs, args); err != nil {
		return err
	}
	target, err := ops.ParseResetTarget(*to)
	if err != nil {
		return usageError{"offsets reset: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		r, err := ops.ResetOffsets(ctx, e, target, confirmer(*yes, *asJSON))
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
