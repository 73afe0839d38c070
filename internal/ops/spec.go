// Spec drift: a job's pipeline spec held to the meanings its ledger records for its tables.
//
// Invariant: relay run writes into an aggregate table only when the spec gives it the meaning the
// ledger records for it, or when nothing of the job can be in it yet (the job has committed no
// offsets: the spec it starts with is recorded) or the ledger is from before relay recorded
// meanings (the table's meaning is recorded as it is). A changed meaning is never accepted; a new
// or a removed table changes the record only through AcceptSpec, under the job's fence, after the
// operator confirmed a plan that names the offsets the new tables start from.

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
)

var (
	// ErrSpecDrift means the spec changes the meaning of a table the job has written.
	ErrSpecDrift = errors.New("spec drift")
	// ErrSpecNotAccepted means the spec adds or removes a table of a job that has committed,
	// which relay spec accept has not recorded.
	ErrSpecNotAccepted = errors.New("spec not accepted")
)

// SpecReport is the comparison of the spec with the ledger (relay spec diff), and for relay spec
// accept its plan and then its outcome.
type SpecReport struct {
	Job      string           `json:"job"`
	Database string           `json:"database"` // the sink database the tables are in
	Applied  bool             `json:"applied"`  // accept: the new and removed tables are recorded
	Last     int64            `json:"last_checkpoint"`
	Start    []StartOffset    `json:"start_offsets"` // where a table accepted now starts
	Tables   []spec.TableDiff `json:"tables"`
	// Filled are the new tables that already hold rows (a table taken out and added back, or
	// written by something else): relay would add into them.
	Filled []string `json:"new_tables_with_rows"`
}

// StartOffset is a partition's committed offset: the first record a table added now counts.
type StartOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// CompareSpec compares plan with the meanings led records for the tables of the sink database. A
// ledger table that does not exist yet records nothing (a first start, or a ledger from before
// relay_table_specs).
func CompareSpec(ctx context.Context, plan *spec.Plan, sinkDB *sql.DB, led *ledger.Ledger) (*SpecReport, error) {
	dbName, err := sink.Database(ctx, sinkDB)
	if err != nil {
		return nil, err
	}
	r := &SpecReport{Job: led.Job(), Database: dbName}
	var rec spec.Recorded
	if rec.Meanings, err = led.Meanings(ctx, dbName); failed(err) {
		return nil, err
	}
	if rec.Claimed, err = led.Claimed(ctx, dbName); failed(err) {
		return nil, err
	}
	offs, last, err := led.PartitionOffsets(ctx)
	if failed(err) {
		return nil, err
	}
	r.Last, rec.Committed = last, last > 0
	parts := partitionsOf(offs)
	for _, t := range sortedTopics(parts) {
		for _, p := range parts[t] {
			r.Start = append(r.Start, StartOffset{Topic: t, Partition: p, Offset: offs[t][p]})
		}
	}
	if r.Tables, err = plan.Compare(rec); err != nil {
		return nil, err
	}
	for _, d := range r.in(spec.StateNew) {
		var rows bool
		err := sinkDB.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM `"+d.Table+"`)").Scan(&rows)
		if err != nil && !fault.IsMySQL(err, fault.ErNoSuchTable) {
			return nil, fmt.Errorf("rows of %s: %w", d.Table, err)
		}
		if rows {
			r.Filled = append(r.Filled, d.Table)
		}
	}
	return r, nil
}

// failed reports whether err is a failure, not a ledger table that does not exist yet.
func failed(err error) bool { return err != nil && !fault.IsMySQL(err, fault.ErNoSuchTable) }

func (r *SpecReport) in(states ...string) []spec.TableDiff {
	var out []spec.TableDiff
	for _, d := range r.Tables {
		for _, s := range states {
			if d.State == s {
				out = append(out, d)
			}
		}
	}
	return out
}

// Differs reports whether relay run would refuse the spec (a table changed, new or removed).
func (r *SpecReport) Differs() bool {
	return len(r.in(spec.StateChanged, spec.StateNew, spec.StateRemoved)) > 0
}

// Drift is ErrSpecDrift with every changed table's differences, or nil.
func (r *SpecReport) Drift() error {
	changed := r.in(spec.StateChanged)
	if len(changed) == 0 {
		return nil
	}
	var parts []string
	for _, d := range changed {
		cs := make([]string, len(d.Changes))
		for i, c := range d.Changes {
			cs[i] = c.String()
		}
		parts = append(parts, fmt.Sprintf("table %s.%s (%s) holds job %s's rows of the recorded meaning, and the spec changes it: %s",
			r.Database, d.Table, d.Key, r.Job, strings.Join(cs, "; ")))
	}
	return fmt.Errorf("%w: %s; relay never mixes two meanings in one table: restore the recorded value, or give the new meaning a new table name (a new table is added with relay spec accept); relay spec diff shows the comparison",
		ErrSpecDrift, strings.Join(parts, "; "))
}

// Refusal is why relay run must not start with this spec, or nil: Drift, or tables added or
// removed that relay spec accept has not recorded.
func (r *SpecReport) Refusal() error {
	if err := r.Drift(); err != nil {
		return err
	}
	added, removed := r.in(spec.StateNew), r.in(spec.StateRemoved)
	if len(added)+len(removed) == 0 {
		return nil
	}
	var parts []string
	for _, d := range added {
		parts = append(parts, fmt.Sprintf("table %s (%s) is new, and a new table of a job that has committed starts from the job's current offsets (%s): its totals are not comparable to the older tables'",
			d.Table, d.Key, r.startText()))
	}
	for _, d := range removed {
		parts = append(parts, fmt.Sprintf("table %s is no longer in the spec: it would no longer be written (its rows stay)", d.Table))
	}
	return fmt.Errorf("%w: job %s: %s; review the plan with relay spec accept, apply it with relay spec accept --yes, then start relay",
		ErrSpecNotAccepted, r.Job, strings.Join(parts, "; "))
}

func (r *SpecReport) startText() string {
	if len(r.Start) == 0 {
		return "none yet"
	}
	s := make([]string, len(r.Start))
	for i, o := range r.Start {
		s[i] = fmt.Sprintf("%s:%d=%d", o.Topic, o.Partition, o.Offset)
	}
	return strings.Join(s, ",")
}

// RecordSpec is relay run's part once Refusal passed, the tables are claimed and the fence is held
// (again at each fence taken): it records the meaning of the tables the ledger has none for yet
// (the job committed nothing, or the ledger is from before recorded meanings) and forgets the
// removed tables of a job that committed nothing. Whether it still committed nothing is judged
// again by RecordMeanings under lock, not by r, read before the fence.
func RecordSpec(ctx context.Context, r *SpecReport, led *ledger.Ledger, log *zap.Logger) error {
	set := map[string]string{}
	var drop []string
	for _, d := range r.Tables {
		switch d.State {
		case spec.StateFirstUse, spec.StateUnrecord:
			set[d.Table] = d.Meaning
		case spec.StateForgotten:
			drop = append(drop, d.Table)
		}
	}
	if len(set)+len(drop) == 0 {
		return nil
	}
	// Only a job that committed nothing replaces a recorded meaning (none of its rows exist yet),
	// and RecordMeanings checks that again under lock.
	if err := led.RecordMeanings(ctx, r.Database, set, drop, r.Last == 0); err != nil {
		return err
	}
	for _, d := range r.Tables {
		switch d.State {
		case spec.StateFirstUse:
			log.Info("recorded the table's meaning (the job has committed nothing yet: its spec is recorded as it starts)",
				zap.String("table", d.Table), zap.String("key", d.Key), zap.String("meaning", d.Meaning))
		case spec.StateUnrecord:
			log.Info("recorded the table's meaning: the ledger is from before relay recorded meanings, so the spec's is recorded as it is; from now on a change is refused",
				zap.String("table", d.Table), zap.String("key", d.Key), zap.String("meaning", d.Meaning))
		case spec.StateForgotten:
			log.Info("forgot the meaning of a table no longer in the spec (the job has committed nothing yet)", zap.String("table", d.Table))
		}
	}
	return nil
}

// AcceptSpec records the tables the spec adds and forgets the ones it removes, once confirm accepts
// the plan. It runs under the job's fence, so the offsets the plan names are where the next start
// resumes; it refuses a changed table, which no command accepts.
func AcceptSpec(ctx context.Context, e *Env, confirm Confirm) (*SpecReport, error) {
	plan, err := e.Config.Plan()
	if err != nil {
		return nil, err
	}
	led := e.Ledger
	fence, err := ledger.Acquire(ctx, led, ledger.FenceConfig{Operator: true, Owner: "relay spec accept by " + e.Operator, Cluster: e.Galera.On})
	if err != nil {
		return nil, fmt.Errorf("spec accept needs the job stopped: %w", err)
	}
	defer fence.Release()
	m := e.Config.MySQL
	if _, err := led.CheckSchema(ctx, e.Sink, plan.Schema(m.DLQTable, m.DetailTable)); err != nil {
		return nil, err
	}
	r, err := CompareSpec(ctx, plan, e.Sink, led)
	if err != nil {
		return nil, err
	}
	if err := r.Drift(); err != nil {
		return r, err
	}
	added, removed := r.in(spec.StateNew), r.in(spec.StateRemoved)
	if len(added)+len(removed) == 0 {
		return r, nil
	}
	if err := confirmed(confirm, r); err != nil {
		return r, err
	}
	set := map[string]string{}
	var drop, names []string
	for _, d := range added {
		set[d.Table] = d.Meaning
		names = append(names, "+"+d.Table)
	}
	for _, d := range removed {
		drop = append(drop, d.Table)
		names = append(names, "-"+d.Table)
	}
	if err := led.RecordMeanings(ctx, r.Database, set, drop, false); err != nil {
		return nil, err
	}
	r.Applied = true
	detail := fmt.Sprintf("database %s: %s; new tables start from offsets %s (last checkpoint %d)", r.Database, strings.Join(names, " "), r.startText(), r.Last)
	e.Log.Named("spec").Info("spec accepted", zap.String("job", led.Job()), zap.String("detail", detail), zap.String("operator", e.Operator))
	if err := led.Audit(ctx, "spec", ledger.AuditSpecAccept, e.Operator, false, detail); err != nil {
		return r, fmt.Errorf("spec accepted, but not recorded in relay_audit: %w", err)
	}
	return r, nil
}

// stateText says what relay run does with a table in each state.
var stateText = map[string]string{
	spec.StateUnchanged: "unchanged",
	spec.StateChanged:   "CHANGED: refused (relay run does not start; no command accepts it)",
	spec.StateNew:       "NEW: relay run refuses it until relay spec accept --yes records it",
	spec.StateRemoved:   "REMOVED: relay run refuses until relay spec accept --yes forgets it",
	spec.StateFirstUse:  "recorded at the next start (the job has committed nothing yet)",
	spec.StateForgotten: "forgotten at the next start (the job has committed nothing yet)",
	spec.StateUnrecord:  "recorded at the next start (the ledger is from before relay recorded meanings)",
}

// WriteText renders the comparison (and accept's plan) for people.
func (r *SpecReport) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	last := "none: the job has committed nothing yet"
	if r.Last > 0 {
		last = fmt.Sprint(r.Last)
	}
	fmt.Fprintf(tw, "job %s, sink database %s: the spec against the table meanings the ledger records (last checkpoint %s)\n", r.Job, r.Database, last)
	fmt.Fprintln(tw, "TABLE\tKEY\tSTATE")
	for _, d := range r.Tables {
		key := d.Key
		if key == "" {
			key = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Table, key, stateText[d.State])
		for _, c := range d.Changes {
			fmt.Fprintf(tw, "  %s\t\t\n", c)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.in(spec.StateNew)) > 0 {
		fmt.Fprintf(w, "new tables start from the job's committed offsets %s (a partition without one: from kafka.start_offset); they count only the records from there on, so their totals are not comparable to the older tables'\n",
			r.startText())
	}
	if len(r.Filled) > 0 {
		fmt.Fprintf(w, "new tables that already hold rows: %s (a table taken out and added back, or written by something else): relay adds into them, so a window that began before the start offsets mixes both in one row\n",
			strings.Join(r.Filled, ", "))
	}
	if len(r.in(spec.StateRemoved)) > 0 {
		fmt.Fprintln(w, "removed tables are no longer written from the next start; their rows and owner stay, and adding one back later is a new table")
	}
	if len(r.in(spec.StateChanged)) > 0 {
		fmt.Fprintln(w, "a changed table cannot be accepted: restore the recorded value, or give the new meaning a new table name")
	}
	return nil
}

// Done says what the applied accept did.
func (r *SpecReport) Done() string {
	if !r.Applied {
		return fmt.Sprintf("job %s: nothing to accept: relay run starts with this spec", r.Job)
	}
	return fmt.Sprintf("job %s: spec accepted; new tables start from offsets %s on the next start; recorded in relay_audit", r.Job, r.startText())
}
