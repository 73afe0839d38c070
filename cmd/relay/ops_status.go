// relay status: the job at a glance, read-only.

package main

import (
	"context"
	"time"

	"github.com/relay-sh/relay/internal/ops"
)

const statusAbout = `Shows one job: for each instance, whether a relay holds its fence (and who: host, pid, MySQL
connection), its owner epoch and its lease (when it runs out on the ledger server's clock, or how
long ago it expired: an owner that stopped renewing, which the next relay run takes over), and
whether that relay is ready: it asks the /readyz the current owner recorded with its lease (so
after a takeover, the new owner's; --readyz overrides it for the configured instance, and
http_addr of the configuration on this host is the fallback), and says "running" only on a 200,
as a readiness probe would; the last decided checkpoint (id, state, decided_at, age; in mode
held the newest partition offset row); each partition's resume offset against its high watermark
(lag; on a transactional topic the last commit marker counts as 1); the job's prepared XA branches
with the ledger's verdict (decided checkpoint: commit; no ledger row: rollback); ledger rows still
COMMITTING; and the last manual actions (relay txns resolve, relay offsets reset). For a job run
as a consumer group (membership group) it shows, instead of fences, the group: its state in Kafka
(kafka.group_id: state, members, assignor), each member (id, host, whether it runs and is ready
by the /readyz it recorded with its lease, owner epoch, the partitions it holds at their owner
epochs, its last checkpoint and the sum of their lag), the partitions whose member stopped
(UNOWNED: nobody reads them until the group hands them on), the stale members (lock free, lease
run out; one is left by every start of a member process) as a count, how long ago the oldest
stopped, and the newest five, and the count of members already forgotten (their rows deleted by
a live member's resolver job.forget_members_after after they stopped, or by relay membership
forget).
It changes nothing and locks nothing: safe to run while relay runs.

--json prints one object with these fields (stable; null means "none" or "unknown"):
  job, mode, server_time
  fences: [{instance, held, holder, owner, owner_epoch, acquired_at, ready, readiness, readyz_url,
           lease_until, lease_remaining_seconds, lease_expired}]   (one per instance: the job, or
          job/0..job/M-1 when it runs as M instances; ready is the answer of the holder's /readyz
          at readyz_url, null when not asked or no answer, with readiness saying why; the lease
          fields are null when nobody holds the fence; lease_remaining_seconds is 0 once expired)
  group: {group_id, state, kafka_members, assignor, kafka_error, members, stale, stale_count,
          stale_oldest_seconds, forget_members_after, forgotten_count, unowned} | null   (null unless the job runs as a group; fences is empty then. members:
          [{id, key, host, live, ready, readiness, readyz_url, owner_epoch, acquired_at,
          lease_remaining_seconds, stopped_seconds, partitions, last_checkpoint: {id, decided_at, age_seconds} |
          null, lag}] for each member running or within its lease; stale: the newest five of the others; partitions and unowned:
          [{topic, partition, owner_epoch, member, decisions, taken_at, written_at, lag}];
          kafka_members null and kafka_error set when Kafka did not describe the group)
  last_checkpoint: {id, state, decided_at, committed_at, age_seconds, records, tags} | null
                   (ages are never negative: measured to server_time, read after every row)
  partitions: [{topic, partition, offset, high_watermark, lag, waiting, out_of_range}]
              (out_of_range: why offset lies outside the partition, e.g. a recreated topic, and
              what to do; lag and waiting are null then, and relay run refuses to start)
  branches: [{tag, job, kind, checkpoint, subtask, verdict, ledger_state, decided_at, age_seconds,
              state, live_owner}]   (state as in relay txns list --help)
  committing: [{id, state, decided_at, committed_at, age_seconds, records, tags}]
  lost: [{id, decided_at, records, tags, lost_tags, offsets}]   (checkpoints a listed
        branch of which the server rolled back, not yet acknowledged: relay run refuses to start;
        docs/RUNBOOK.md, "Branch rolled back by the server")
  manual_actions: [{id, job, target, action, origin, operator, at, forced, detail}]
`

func cmdStatus(ctx context.Context, args []string) error {
	fs, path := opsFlags("status", "[--json] [--readyz URL] [--config FILE]", statusAbout,
		`  RELAY_JOB_NAME=orders_eu relay status
  relay status --config relay.yaml --json | jq '.partitions[] | select(.lag > 10000)'
`)
	asJSON := fs.Bool("json", false, "print JSON (fields above) instead of a table")
	readyz := fs.String("readyz", "", "URL of the running relay's /readyz (default: the one its owner recorded with its lease, else http_addr of the configuration on this host)")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		r, err := ops.Status(ctx, e, *readyz)
		if err != nil {
			return err
		}
		return textOrJSON(*asJSON, r)
	})
}
