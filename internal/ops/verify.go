// Verify: recount a range of the topic the way the pipeline counts it and diff it against MySQL.
//
// Invariants: the recount decodes and folds with the job's own spec (config.Config.Plan: the
// pipeline's decoder and its one Plan.Fold, exact sums) and reads read_committed, and every
// aggregate table of the spec is compared key for key (spec.Plan.Read, spec.Compare), so a clean
// job shows no difference at all, to the last fractional digit. MySQL is
// read in one consistent snapshot taken between two equal reads of the partitions' offset rows (in
// XA mode with no checkpoint COMMITTING), so it holds exactly what those offsets cover (an XA
// decision, with its offsets, lands before any of its branches commits; a held offset row commits
// with its data), even while relay runs. A recount never starts on offsets the topic does not
// hold: it fails, naming the partition and its watermarks; while it reads, it tells its progress.

package ops

import (
	"context"

	"github.com/relay-sh/relay/internal/spec"
)

// VerifyOptions choose what MySQL is compared with.
type VerifyOptions struct {
	// From starts the recount: "earliest" (the partitions' first retained offsets) or the id of a
	// ledger checkpoint whose offsets start it (for a table that holds only what came after it).
	From string
	// Expected, when set, is a loadgen totals file compared with MySQL instead of a recount.
	Expected string
	// Limit caps the differences listed (all are counted); 0 lists every one.
	Limit int
}

// VerifyReport is `relay verify`; its JSON field names are part of the operator interface.
type VerifyReport struct {
	Job        string  `json:"job"`
	Source     string  `json:"source"`     // recount | expected_file
	Checkpoint *int64  `json:"checkpoint"` // recount: the checkpoint whose offsets end the range
	Ranges     []Range `json:"ranges"`
	Records    int64   `json:"records"` // records recounted (good + bad)
	Good       int64   `json:"good"`
	Bad        int64   `json:"bad"`
	// KeysExpected, KeysActual and DiffCount are over all aggregate tables; Tables breaks them down.
	KeysExpected int            `json:"keys_expected"`
	KeysActual   int            `json:"keys_actual"`
	DiffCount    int            `json:"difference_count"`
	Tables       []TableReport  `json:"tables"`      // in spec order
	Differences  []KeyDiff      `json:"differences"` // at most Limit of them, by table in spec order, then key
	DeadLetter   DeadLetterDiff `json:"dead_letter"`
	Detail       *DetailDiff    `json:"detail"` // null without an append sink (mysql.detail_table)
	Notes        []string       `json:"notes"`
	Clean        bool           `json:"clean"`
}

// Range is one partition's recounted offsets, [From, To), and the good records in it.
type Range struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	From      int64  `json:"from"`
	To        int64  `json:"to"`
	Good      int64  `json:"good"`
}

// DetailDiff compares the good records with the append sink's rows (mysql.detail_table).
type DetailDiff struct {
	Table      string `json:"table"`
	Expected   int64  `json:"expected"`   // good records (in the ranges, or the file's good_orders)
	Rows       int64  `json:"rows"`       // the table's rows (in the ranges)
	Duplicates int64  `json:"duplicates"` // rows beyond the first for one source offset
}

func (d *DetailDiff) clean() bool { return d == nil || d.Rows == d.Expected && d.Duplicates == 0 }

// TableReport is one aggregate table compared.
type TableReport struct {
	Table          string   `json:"table"`
	KeyColumns     []string `json:"key_columns"` // window_start, then the dimensions
	MeasureColumns []string `json:"measure_columns"`
	KeysExpected   int      `json:"keys_expected"`
	KeysActual     int      `json:"keys_actual"`
	DiffCount      int      `json:"difference_count"`
}

// Kinds of a key difference.
const (
	DiffMissing = "missing" // expected, not in MySQL
	DiffExtra   = "extra"   // in MySQL, not expected
	DiffDiffers = "differs" // in both, a measure differs
)

// KeyDiff is one primary key of one table whose MySQL row differs from what was expected. Values
// are as MySQL prints them (window_start UTC, 2006-01-02 15:04:05; decimals with the column's
// fractional digits), by column name.
type KeyDiff struct {
	Table    string            `json:"table"`
	Kind     string            `json:"kind"`
	Key      map[string]string `json:"key"`      // window_start and each dimension column
	Expected map[string]string `json:"expected"` // each measure column; null when extra
	Actual   map[string]string `json:"actual"`   // null when missing
}

// DeadLetterDiff compares bad records with the job's dead-letter rows.
type DeadLetterDiff struct {
	Expected map[string]int `json:"expected"` // bad records by reason that must have a row
	Actual   map[string]int `json:"actual"`   // the job's dead-letter rows by reason (in the range)
	Missing  []BadRecord    `json:"missing"`  // recount: bad records without a row (at most Limit)
	Extra    []BadRecord    `json:"extra"`    // recount: rows without a bad record, or repeated (at most Limit)
	// MissingCount and ExtraCount count them all.
	MissingCount int `json:"missing_count"`
	ExtraCount   int `json:"extra_count"`
}

// BadRecord is one bad record by its source position.
type BadRecord struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Reason    string `json:"reason"`
}

// Verify compares MySQL with a recount of the topic, or with an expected totals file.
func Verify(ctx context.Context, e *Env, o VerifyOptions) (*VerifyReport, error) {
	plan, err := e.Config.Plan()
	if err != nil {
		return nil, err
	}
	r := &VerifyReport{Job: e.Config.Job.Name, Ranges: []Range{}, Notes: []string{}, Tables: []TableReport{}, Differences: []KeyDiff{}}
	var want, got [][]spec.Row
	if o.Expected != "" {
		r.Source = "expected_file"
		want, got, err = e.compareFile(ctx, r, plan, o.Expected)
	} else {
		r.Source = "recount"
		want, got, err = e.recount(ctx, r, plan, o.From)
	}
	if err == nil {
		err = r.compare(plan, want, got)
	}
	if err != nil {
		return nil, err
	}
	dl := &r.DeadLetter
	dl.MissingCount, dl.ExtraCount = len(dl.Missing), len(dl.Extra)
	r.Clean = r.DiffCount == 0 && dl.MissingCount == 0 && dl.ExtraCount == 0 && equalCounts(dl.Expected, dl.Actual) && r.Detail.clean()
	if o.Limit > 0 {
		r.Differences = r.Differences[:min(len(r.Differences), o.Limit)]
		dl.Missing = dl.Missing[:min(len(dl.Missing), o.Limit)]
		dl.Extra = dl.Extra[:min(len(dl.Extra), o.Limit)]
	}
	return r, nil
}
