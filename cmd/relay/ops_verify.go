// relay verify: the reconciliation an operator runs after an incident.

package main

import (
	"context"
	"fmt"

	"github.com/relay-sh/relay/internal/ops"
)

const verifyAbout = `Recounts the topic the way relay counts it (read_committed, the configuration's spec: its decoder,
limits and fold, exact sums) from --from up to the offsets of the job's last commit (mode xa: the
last committed checkpoint; mode held: each partition's offset row), and diffs the result against
every aggregate table of the spec, key by key: "missing" (counted, no row in MySQL), "extra" (a row
nothing accounts for), "differs" (a measure differs). It also checks that every bad record in the
range has exactly one dead-letter row of the job (bad_input_policy dlq) and, with the append sink
(mysql.detail_table), one detail row per good record and no source offset twice. MySQL is read in
one consistent snapshot of that commit, so verify may run while relay runs.

With --expected FILE (a loadgen --totals file of the same spec) it compares the tables with that
file instead, the dead-letter rows by reason with the file's bad_records, and the detail rows with
good_orders.

While it reads, it logs "verify progress" lines on stderr every 5 seconds (records_read,
offsets_done of offsets_total). A range the topic does not hold (recreated or truncated topic,
records deleted unread) fails at once, exit 1, naming the partition, the offsets and the
watermarks; with --timeout the error names where each unfinished partition stood.

Records deleted by retention cannot be recounted: --from earliest then notes where each partition
starts. --from <checkpoint id> starts at that ledger checkpoint's offsets, for a table that only
holds what relay wrote after it (e.g. emptied when the offsets were reset to that checkpoint; mode
xa only).

--json prints {job, source, checkpoint, ranges: [{topic, partition, from, to, good}], records,
good, bad, keys_expected, keys_actual, difference_count (over all tables), tables: [{table,
key_columns, measure_columns, keys_expected, keys_actual, difference_count}], differences: [{table,
kind, key: {window_start, <dimension column>: value...}, expected: {<measure column>: value...} |
null, actual: {...} | null}], dead_letter: {expected, actual, missing, extra, missing_count,
extra_count}, detail: {table, expected, rows, duplicates} | null, notes, clean}.
`

func cmdVerify(ctx context.Context, args []string) error {
	fs, path := opsFlags("verify", "[--from earliest|<checkpoint id>] [--expected FILE] [--limit N] [--timeout D] [--json] [--config FILE]", verifyAbout,
		`  relay verify                              # exit 0: MySQL matches the topic
  relay verify --json | jq '.differences[]'
  relay loadgen --brokers B --topic T --totals expected.json ... && relay verify --expected expected.json
`)
	var o ops.VerifyOptions
	fs.StringVar(&o.From, "from", "earliest", "where the recount starts: earliest, or a ledger checkpoint id")
	fs.StringVar(&o.Expected, "expected", "", "compare with this loadgen totals file instead of recounting")
	fs.IntVar(&o.Limit, "limit", 20, "differences to list (all are counted); 0 lists every one")
	timeout := fs.Duration("timeout", 0, "give up after this long (0: no limit)")
	asJSON := fs.Bool("json", false, "print JSON (fields above) instead of text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	return withEnv(ctx, path, func(ctx context.Context, e *ops.Env) error {
		r, err := ops.Verify(ctx, e, o)
		if err != nil {
			return err
		}
		if err := textOrJSON(*asJSON, r); err != nil {
			return err
		}
		if !r.Clean {
			return codedError{exitDifferences, fmt.Errorf("verify: MySQL differs from the %s: %d keys differ, dead-letter rows: %d missing, %d extra",
				r.Source, r.DiffCount, r.DeadLetter.MissingCount, r.DeadLetter.ExtraCount)}
		}
		return nil
	})
}
