// relay spec diff / accept: the spec against the table meanings the ledger records.

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/ops"
)

const specUsage = `usage: relay spec diff [--json] [--config FILE]
       relay spec accept [--yes] [--json] [--config FILE]

Run 'relay spec diff --help' or 'relay spec accept --help' for details.
`

const specStates = `Each aggregate table of the spec is compared with the meaning the ledger recorded for it (its
window, event time, dimensions, measures, filter and the paths and types of the fields they read;
not how the YAML is written):

  unchanged   the recorded meaning
  CHANGED     another meaning, with each difference as "<YAML path>: <recorded> -> <new>": relay
              run refuses to start, and no command accepts it (the table's rows hold totals of the
              recorded meaning): restore the value, or give the new meaning a new table name
  NEW         not recorded, and the job has committed: relay run refuses it until relay spec
              accept --yes records it; it starts from the job's committed offsets, so its totals
              are not comparable to the older tables'
  REMOVED     recorded, no longer in the spec: relay run refuses until relay spec accept --yes
              forgets it (its rows and owner stay; adding it back later is a new table)
  recorded at the next start
              the job has committed nothing yet (its spec is recorded as it starts), or the ledger
              is from before relay recorded meanings (the table's meaning is recorded as it is)
  forgotten at the next start
              recorded, no longer in the spec, and the job has committed nothing yet
`

const specDiffAbout = `Compares the configured spec (the pipeline block, or the default spec of input.* and mysql.table)
with the table meanings the ledger records, as relay run does at start. Changes nothing.

` + specStates + `
Exits 4 when relay run would refuse the spec (a table CHANGED, NEW or REMOVED), 0 otherwise.
`

const specAcceptAbout = `Records the tables the spec adds (NEW) and forgets the ones it removes (REMOVED), so that relay run
starts with the spec. It first prints the comparison and the offsets the new tables start from (the
job's committed offsets: a new table counts only the records from there on), and acts only with
--yes, or after you type yes at a terminal; otherwise nothing changes and it exits 5. A CHANGED
table is refused (exit 1): no command accepts a new meaning for a table that holds rows of the old.

Only while the job is stopped: it takes the job's fence (exit 3 while a relay runs; a job run as
several instances needs every instance stopped), so the offsets named are where the next start
resumes. Recorded in relay_audit.

` + specStates

func cmdSpec(ctx context.Context, args []string) error {
	return dispatch(ctx, "spec", specUsage, args, subcommand{"diff", cmdSpecDiff}, subcommand{"accept", cmdSpecAccept})
}

func cmdSpecDiff(ctx context.Context, args []string) error {
	fs, path := opsFlags("spec diff", "[--json] [--config FILE]", specDiffAbout,
		`  relay spec diff --config relay.yaml
  RELAY_INPUT_WINDOW=90s relay spec diff      # would a new window be refused?
`)
	asJSON := fs.Bool("json", false, "print JSON {job, database, applied, last_checkpoint, start_offsets: [{topic, partition, offset}], tables: [{table, key, state, changes: [{path, old, new}]}], new_tables_with_rows}")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		plan, err := e.Config.Plan()
		if err != nil {
			return err
		}
		r, err := ops.CompareSpec(ctx, plan, e.Sink, e.Ledger)
		if err != nil {
			return err
		}
		if err := textOrJSON(*asJSON, r); err != nil {
			return err
		}
		if r.Differs() {
			return codedError{exitDifferences, fmt.Errorf("spec diff: relay run would refuse this spec")}
		}
		return nil
	})
}

func cmdSpecAccept(ctx context.Context, args []string) error {
	fs, path := opsFlags("spec accept", "[--yes] [--json] [--config FILE]", specAcceptAbout,
		`  relay spec accept --config relay.yaml         # prints the plan, changes nothing (exit 5)
  relay spec accept --config relay.yaml --yes
`)
	yes := fs.Bool("yes", false, "apply the plan without asking")
	asJSON := fs.Bool("json", false, "print JSON (as relay spec diff's, with applied true once recorded)")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		r, err := ops.AcceptSpec(ctx, e, confirmer(*yes, *asJSON))
		if err != nil {
			if errors.Is(err, ops.ErrSpecDrift) {
				// The comparison shows what to restore; the plan of a refusal is all it prints.
				_ = textOrJSON(*asJSON, r)
			}
			return notConfirmed(err)
		}
		if *asJSON {
			return textOrJSON(true, r)
		}
		fmt.Println(r.Done())
		return nil
	})
}
