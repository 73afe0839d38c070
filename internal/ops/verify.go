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
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/spec"
	"github.com/relay-sh/relay/internal/xa"
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

// snapshot is MySQL as of the job's last commit: every aggregate table and the job's dead-letter
// and append-sink rows within the ranges that commit covers.
type snapshot struct {
	checkpoint int64
	ranges     []Range
	notes      []string
	tables     [][]spec.Row // by aggregate, sorted by key
	dlq        []BadRecord
	detail     *DetailDiff // Rows and Duplicates; Expected comes from the recount
}

var snapshotRetry = fault.Policy{Attempts: 10, Initial: 200 * time.Millisecond, Max: 2 * time.Second}

var errNoCheckpoint = errors.New("the job has no decided checkpoint: nothing was committed to verify")

// snapshot reads MySQL as of the job's last commit, the ranges starting at begin.
func (e *Env) snapshot(ctx context.Context, plan *spec.Plan, begin ledger.Offsets) (*snapshot, error) {
	var s *snapshot
	err := fault.Do(ctx, snapshotRetry, func(ctx context.Context) error {
		var err error
		s, err = e.trySnapshot(ctx, plan, begin)
		return err
	}, nil)
	return s, err
}

// resumePoint is the job's last commit: the newest checkpoint id among the partitions' offset rows,
// and those offsets. Each row commits with what it covers: with the data in held mode, with the
// decision in XA mode, whose branches commit after it, hence no row may be COMMITTING.
func (e *Env) resumePoint(ctx context.Context) (int64, ledger.Offsets, error) {
	led := e.Ledger
	offs, id, err := led.PartitionOffsets(ctx)
	if err != nil {
		return 0, nil, err
	}
	if id == 0 {
		return 0, nil, errNoCheckpoint
	}
	if e.Config.Mode == config.ModeHeld {
		return id, offs, nil
	}
	committing, err := led.Committing(ctx)
	if err != nil {
		return 0, nil, err
	}
	if len(committing) > 0 {
		// Retried: a running relay finishes within a checkpoint; a stopped one left branches in doubt.
		return 0, nil, fault.Transient(fmt.Errorf("checkpoint %d is still COMMITTING (branches %s): let relay recover it, or resolve them, then verify again",
			committing[0].ID, strings.Join(committing[0].Tags, ",")))
	}
	return id, offs, nil
}

// trySnapshot takes the snapshot between two reads of the resume point; when both agree, no commit
// happened in between, so the snapshot holds exactly what that resume point covers.
func (e *Env) trySnapshot(ctx context.Context, plan *spec.Plan, begin ledger.Offsets) (*snapshot, error) {
	id, offs, err := e.resumePoint(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := e.Sink.Conn(ctx)
	if err != nil {
		return nil, err
	}
	// A read-only snapshot transaction: on any doubt the connection is discarded, never pooled open.
	ok := false
	defer func() {
		if ok {
			_ = conn.Close()
		} else {
			xa.Discard(conn)
		}
	}()
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("verify snapshot: %w", err)
		}
	}
	id2, offs2, err := e.resumePoint(ctx)
	if err != nil {
		return nil, err
	}
	if id2 != id || !offs2.Equal(offs) {
		return nil, fault.Transient(fmt.Errorf("checkpoint %d committed while the snapshot was taken", id2))
	}
	s := &snapshot{checkpoint: id}
	s.ranges, s.notes = rangesOf(begin, offs)
	cfg := e.Config.MySQL
	if s.tables, err = readTables(ctx, conn, plan); err != nil {
		return nil, err
	}
	if s.dlq, err = readDeadLetters(ctx, conn, cfg.DLQTable, e.Ledger.Job()); err != nil {
		return nil, err
	}
	if cfg.DetailTable != "" {
		s.detail = &DetailDiff{Table: cfg.DetailTable}
		for _, rg := range s.ranges {
			var n, distinct int64
			if err := conn.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT src_offset) FROM `"+cfg.DetailTable+
				"` WHERE src_topic = ? AND src_partition = ? AND src_offset >= ? AND src_offset < ?", rg.Topic, rg.Partition, rg.From, rg.To).
				Scan(&n, &distinct); err != nil {
				return nil, fmt.Errorf("read %s: %w", cfg.DetailTable, err)
			}
			s.detail.Rows += n
			s.detail.Duplicates += n - distinct
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return nil, fmt.Errorf("verify snapshot: %w", err)
	}
	ok = true
	return s, nil
}

// rangesOf pairs each partition's first offset to recount with the offset the commit covers.
func rangesOf(begin, to ledger.Offsets) ([]Range, []string) {
	var out []Range
	var notes []string
	parts := partitionsOf(begin)
	for _, t := range sortedTopics(parts) {
		for _, p := range parts[t] {
			lo, _ := begin.Get(t, p)
			hi, ok := to.Get(t, p)
			if !ok {
				// Not committed yet (a partition added since): nothing of it is in MySQL.
				hi = lo
			}
			if hi < lo {
				notes = append(notes, fmt.Sprintf("%s:%d: the committed offset %d is below the first offset to recount %d", t, p, hi, lo))
				hi = lo
			}
			out = append(out, Range{Topic: t, Partition: p, From: lo, To: hi})
		}
	}
	return out, notes
}

// readTables reads every aggregate table of plan.
func readTables(ctx context.Context, q spec.Querier, plan *spec.Plan) ([][]spec.Row, error) {
	out := make([][]spec.Row, len(plan.Tables()))
	for a := range out {
		var err error
		if out[a], err = plan.Read(ctx, q, a); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readDeadLetters(ctx context.Context, q spec.Querier, table, job string) ([]BadRecord, error) {
	rows, err := q.QueryContext(ctx, "SELECT topic, kpartition, koffset, reason FROM `"+table+"` WHERE job = ?", job)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	var out []BadRecord
	for rows.Next() {
		var b BadRecord
		if err := rows.Scan(&b.Topic, &b.Partition, &b.Offset, &b.Reason); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// recount reads [from, committed offsets) of every partition: it returns the fold of its good
// records and the snapshot's tables.
func (e *Env) recount(ctx context.Context, r *VerifyReport, plan *spec.Plan, from string) (want, got [][]spec.Row, err error) {
	start := ledger.Offsets{}
	if from != "" && from != "earliest" {
		id, err := strconv.ParseInt(from, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("--from %q is neither earliest nor a checkpoint id", from)
		}
		if e.Config.Mode != config.ModeXA {
			return nil, nil, fmt.Errorf("--from %d: mode %s keeps no checkpoint rows; use --from earliest", id, e.Config.Mode)
		}
		rows, err := e.Ledger.Lookup(ctx, []int64{id})
		if err != nil {
			return nil, nil, err
		}
		c, ok := rows[id]
		if !ok {
			return nil, nil, fmt.Errorf("--from %d: no such checkpoint in the ledger (relay keeps the newest 1000)", id)
		}
		start = c.Offsets
	}
	c, err := e.consumer()
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	begin, err := c.Assign(ctx, start)
	if err != nil {
		return nil, nil, err
	}
	parts := partitionsOf(begin)
	for _, t := range sortedTopics(parts) {
		for _, p := range parts[t] {
			if lo, _ := begin.Get(t, p); lo > 0 {
				if _, set := start.Get(t, p); !set {
					r.Notes = append(r.Notes, fmt.Sprintf("%s:%d starts at offset %d: older records were deleted by retention and cannot be recounted", t, p, lo))
				}
			}
		}
	}
	snap, err := e.snapshot(ctx, plan, begin)
	if err != nil {
		return nil, nil, err
	}
	// A range the topic does not hold (recreated, truncated, records deleted) would be waited for
	// forever: fail now, saying which and why.
	firsts, ends := ledger.Offsets{}, ledger.Offsets{}
	for _, rg := range snap.ranges {
		firsts.Set(rg.Topic, rg.Partition, rg.From)
		ends.Set(rg.Topic, rg.Partition, rg.To)
	}
	q := c.Kafka().QueryWatermarkOffsets
	if err := errors.Join(ledger.CheckRange(ctx, firsts, q), ledger.CheckRange(ctx, ends, q)); err != nil {
		return nil, nil, fmt.Errorf("verify: the range to recount is not in the topic: %w", err)
	}
	r.Checkpoint = &snap.checkpoint
	r.Ranges = snap.ranges
	r.Notes = append(r.Notes, snap.notes...)
	ranges := map[string]map[int32]*Range{}
	for i := range r.Ranges {
		rg := &r.Ranges[i]
		if ranges[rg.Topic] == nil {
			ranges[rg.Topic] = map[int32]*Range{}
		}
		ranges[rg.Topic][rg.Partition] = rg
	}
	tables, bad, err := e.count(ctx, c, r, plan, ranges)
	if err != nil {
		return nil, nil, err
	}
	want = make([][]spec.Row, len(snap.tables))
	for a := range want {
		want[a] = tables.Rows(a)
	}
	var rows []BadRecord
	for _, b := range snap.dlq {
		if rg := ranges[b.Topic][b.Partition]; rg != nil && b.Offset >= rg.From {
			rows = append(rows, b)
		}
	}
	if e.Config.Input.BadInputPolicy != "dlq" {
		bad = nil // skip: counted only; fail: relay stops instead
	}
	r.DeadLetter = diffDeadLetters(bad, rows)
	if r.Detail = snap.detail; r.Detail != nil {
		r.Detail.Expected = r.Good
	}
	return want, snap.tables, nil
}

// progressEvery paces a recount's progress lines.
const progressEvery = 5 * time.Second

// count folds every record of the ranges exactly as the pipeline does (the plan's decoder and
// Plan.Fold, into one Tables: routing does not change a total), logging its progress. When
// ctx ends first, the error names where each unfinished partition stood. (A range out of the topic
// was refused before it started; a topic recreated shorter meanwhile ends it with the consumer's
// out-of-range error.)
func (e *Env) count(ctx context.Context, c *consumer.Consumer, r *VerifyReport, plan *spec.Plan, ranges map[string]map[int32]*Range) (*spec.Tables, []BadRecord, error) {
	dec := plan.NewDecoder()
	tables := plan.NewTables()
	var bad []BadRecord
	open := map[string]map[int32]bool{}
	next := map[*Range]int64{} // the next offset to cover in each range
	var covered, total int64
	left := 0
	var done []kafka.TopicPartition
	advance := func(rg *Range, to int64) {
		if to > next[rg] {
			covered += to - next[rg]
			next[rg] = to
		}
	}
	finish := func(t string, p int32) {
		if open[t][p] {
			delete(open[t], p)
			left--
			advance(ranges[t][p], ranges[t][p].To)
			topic := t
			done = append(done, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	for t, ps := range ranges {
		open[t] = map[int32]bool{}
		for p, rg := range ps {
			open[t][p] = true
			next[rg] = rg.From
			total += max(rg.To-rg.From, 0)
			left++
			if rg.From >= rg.To {
				finish(t, p)
			}
		}
	}
	// unfinished names where each open range stands, for an error that says why verify stopped.
	unfinished := func() string {
		var s []string
		parts := partitionsOf(openEnds(open, ranges))
		for _, t := range sortedTopics(parts) {
			for _, p := range parts[t] {
				rg := ranges[t][p]
				s = append(s, fmt.Sprintf("%s:%d at offset %d of [%d,%d)", t, p, next[rg], rg.From, rg.To))
			}
		}
		return fmt.Sprintf("%d partitions unfinished after %d records (%s)", left, r.Records, strings.Join(s, ", "))
	}
	log := e.Log.Named("verify")
	progress := func() {
		log.Info("verify progress", zap.Int64("records_read", r.Records), zap.Int64("offsets_done", covered),
			zap.Int64("offsets_total", total), zap.Int("partitions_left", left))
	}
	// The first line comes at once: it tells the operator how much there is to read.
	progress()
	var rec spec.Record
	batch := consumer.DefaultBatch()
	for nextLog := time.Now().Add(progressEvery); left > 0; {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("recount: %s: %w", unfinished(), err)
		}
		if now := time.Now(); !now.Before(nextLog) {
			nextLog = now.Add(progressEvery)
			progress()
		}
		if err := c.Read(200*time.Millisecond, batch); err != nil {
			return nil, nil, err
		}
		if len(batch.Records) == 0 {
			// Nothing delivered: the rest of a range may be transaction markers or aborted records,
			// which are never delivered but move the position.
			if err := positionsDone(c.Kafka(), open, ranges, finish); err != nil {
				return nil, nil, err
			}
		}
		for _, msg := range batch.Records {
			t, p, off := msg.Topic, msg.Partition, msg.Offset
			rg := ranges[t][p]
			if rg == nil {
				continue
			}
			if open[t][p] && off < rg.To {
				advance(rg, off+1)
				r.Records++
				if reason, _ := dec.Decode(msg.Value, &rec); reason == spec.OK {
					plan.Fold(&rec, []*spec.Tables{tables})
					r.Good++
					rg.Good++
				} else {
					bad = append(bad, BadRecord{Topic: t, Partition: p, Offset: off, Reason: reason.String()})
					r.Bad++
				}
			}
			if off+1 >= rg.To {
				finish(t, p)
			}
		}
		if len(done) > 0 {
			// Stop fetching what lies past the range.
			if err := c.Kafka().Pause(done); err != nil {
				return nil, nil, fmt.Errorf("recount: pause: %w", err)
			}
			done = done[:0]
		}
	}
	return tables, bad, nil
}

// openEnds is the end offset of every range still open.
func openEnds(open map[string]map[int32]bool, ranges map[string]map[int32]*Range) ledger.Offsets {
	out := ledger.Offsets{}
	for t, ps := range open {
		for p := range ps {
			out.Set(t, p, ranges[t][p].To)
		}
	}
	return out
}

func positionsDone(c *kafka.Consumer, open map[string]map[int32]bool, ranges map[string]map[int32]*Range, finish func(string, int32)) error {
	var tps []kafka.TopicPartition
	for t, ps := range open {
		for p := range ps {
			topic := t
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
		}
	}
	pos, err := c.Position(tps)
	if err != nil {
		return fmt.Errorf("recount: positions: %w", err)
	}
	for _, tp := range pos {
		if tp.Offset >= 0 && int64(tp.Offset) >= ranges[*tp.Topic][tp.Partition].To {
			finish(*tp.Topic, tp.Partition)
		}
	}
	return nil
}

// compareFile reads a loadgen totals file of the job's spec and the tables it is compared with;
// dead letters are compared by reason.
func (e *Env) compareFile(ctx context.Context, r *VerifyReport, plan *spec.Plan, path string) (want, got [][]spec.Row, err error) {
	f, err := loadgen.ReadFile(path, plan)
	if err != nil {
		return nil, nil, fmt.Errorf("--expected: %w", err)
	}
	if got, err = readTables(ctx, e.Sink, plan); err != nil {
		return nil, nil, err
	}
	rows, err := readDeadLetters(ctx, e.Sink, e.Config.MySQL.DLQTable, e.Config.Job.Name)
	if err != nil {
		return nil, nil, err
	}
	r.DeadLetter = DeadLetterDiff{Expected: f.BadRecords, Actual: byReason(rows), Missing: []BadRecord{}, Extra: []BadRecord{}}
	if r.DeadLetter.Expected == nil {
		r.DeadLetter.Expected = map[string]int{}
	}
	for _, n := range f.BadRecords {
		r.Bad += int64(n)
	}
	r.Good = f.GoodOrders
	if t := e.Config.MySQL.DetailTable; t != "" {
		r.Detail = &DetailDiff{Table: t, Expected: f.GoodOrders}
		var distinct int64
		if err := e.Sink.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT src_topic, src_partition, src_offset) FROM `"+t+"`").
			Scan(&r.Detail.Rows, &distinct); err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", t, err)
		}
		r.Detail.Duplicates = r.Detail.Rows - distinct
	}
	return f.Tables.Rows, got, nil
}

// compare lists, table by table, every key whose MySQL row (got) differs from the expected one.
func (r *VerifyReport) compare(plan *spec.Plan, want, got [][]spec.Row) error {
	var err error
	for a, table := range plan.Tables() {
		key, measures := plan.ColumnNames(a)
		t := TableReport{Table: table, KeyColumns: key, MeasureColumns: measures, KeysExpected: len(want[a]), KeysActual: len(got[a])}
		// values is a row's key and measures by column name.
		values := func(row *spec.Row) (k, m map[string]string) {
			cols, ferr := plan.Format(a, *row)
			if ferr != nil {
				err = cmp.Or(err, ferr)
				return nil, nil
			}
			k, m = map[string]string{}, map[string]string{}
			for i, c := range key {
				k[c] = cols[i]
			}
			for i, c := range measures {
				m[c] = cols[len(key)+i]
			}
			return k, m
		}
		spec.Compare(want[a], got[a], func(w, g *spec.Row) {
			d := KeyDiff{Table: table, Kind: DiffDiffers}
			if w != nil {
				d.Key, d.Expected = values(w)
			}
			if g != nil {
				d.Key, d.Actual = values(g)
			}
			switch {
			case g == nil:
				d.Kind = DiffMissing
			case w == nil:
				d.Kind = DiffExtra
			}
			r.Differences = append(r.Differences, d)
			t.DiffCount++
		})
		r.Tables = append(r.Tables, t)
		r.KeysExpected += t.KeysExpected
		r.KeysActual += t.KeysActual
		r.DiffCount += t.DiffCount
	}
	return err
}

// diffDeadLetters pairs bad records with dead-letter rows by source position and reason.
func diffDeadLetters(bad, rows []BadRecord) DeadLetterDiff {
	d := DeadLetterDiff{Expected: byReason(bad), Actual: byReason(rows), Missing: []BadRecord{}, Extra: []BadRecord{}}
	seen := map[BadRecord]int{}
	for _, b := range rows {
		seen[b]++
	}
	for _, b := range bad {
		if seen[b] == 0 {
			d.Missing = append(d.Missing, b)
			continue
		}
		seen[b]--
	}
	for _, b := range rows {
		if seen[b] > 0 {
			d.Extra = append(d.Extra, b)
			seen[b]--
		}
	}
	return d
}

func byReason(bs []BadRecord) map[string]int {
	m := map[string]int{}
	for _, b := range bs {
		m[b.Reason]++
	}
	return m
}

func equalCounts(a, b map[string]int) bool {
	for k, n := range a {
		if b[k] != n {
			return false
		}
	}
	for k, n := range b {
		if a[k] != n {
			return false
		}
	}
	return true
}

// WriteText renders the report for people.
func (r *VerifyReport) WriteText(w io.Writer) error {
	if r.Source == "recount" {
		fmt.Fprintf(w, "job %s: recounted %d records (%d good, %d bad) up to checkpoint %d\n", r.Job, r.Records, r.Good, r.Bad, *r.Checkpoint)
		var parts []string
		for _, rg := range r.Ranges {
			parts = append(parts, fmt.Sprintf("%s:%d [%d,%d)", rg.Topic, rg.Partition, rg.From, rg.To))
		}
		fmt.Fprintf(w, "  ranges: %s\n", strings.Join(parts, " "))
	} else {
		fmt.Fprintf(w, "job %s: compared with the expected totals file (%d bad records)\n", r.Job, r.Bad)
	}
	fmt.Fprintf(w, "  keys: %d expected, %d in MySQL; dead-letter rows: %d expected, %d found\n",
		r.KeysExpected, r.KeysActual, total(r.DeadLetter.Expected), total(r.DeadLetter.Actual))
	tables := map[string]TableReport{}
	for _, t := range r.Tables {
		tables[t.Table] = t
		fmt.Fprintf(w, "  table %s (%s): %d keys expected, %d in MySQL, %d differ\n",
			t.Table, strings.Join(t.KeyColumns, ", "), t.KeysExpected, t.KeysActual, t.DiffCount)
	}
	if d := r.Detail; d != nil {
		fmt.Fprintf(w, "  append sink %s: %d rows expected, %d found, %d duplicated\n", d.Table, d.Expected, d.Rows, d.Duplicates)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	for _, d := range r.Differences {
		t := tables[d.Table]
		// The key as window_start "dim" "dim", the measures as column value, in column order.
		key := d.Key[spec.WindowColumn]
		for _, c := range t.KeyColumns[1:] {
			key += fmt.Sprintf(" %q", d.Key[c])
		}
		measures := func(m map[string]string) string {
			var s []string
			for _, c := range t.MeasureColumns {
				s = append(s, c+" "+m[c])
			}
			return strings.Join(s, ", ")
		}
		switch d.Kind {
		case DiffMissing:
			fmt.Fprintf(w, "missing  %s %s: expected %s; MySQL has no row\n", d.Table, key, measures(d.Expected))
		case DiffExtra:
			fmt.Fprintf(w, "extra    %s %s: MySQL has %s; none expected\n", d.Table, key, measures(d.Actual))
		default:
			fmt.Fprintf(w, "differs  %s %s: expected %s; MySQL has %s\n", d.Table, key, measures(d.Expected), measures(d.Actual))
		}
	}
	if n := r.DiffCount - len(r.Differences); n > 0 {
		fmt.Fprintf(w, "... and %d more differing keys (--limit 0 lists all)\n", n)
	}
	if !equalCounts(r.DeadLetter.Expected, r.DeadLetter.Actual) {
		fmt.Fprintf(w, "dead-letter rows by reason differ: expected %v, found %v\n", r.DeadLetter.Expected, r.DeadLetter.Actual)
	}
	for _, b := range r.DeadLetter.Missing {
		fmt.Fprintf(w, "dead-letter missing  %s:%d@%d (%s)\n", b.Topic, b.Partition, b.Offset, b.Reason)
	}
	for _, b := range r.DeadLetter.Extra {
		fmt.Fprintf(w, "dead-letter extra    %s:%d@%d (%s)\n", b.Topic, b.Partition, b.Offset, b.Reason)
	}
	if n := r.DeadLetter.MissingCount + r.DeadLetter.ExtraCount - len(r.DeadLetter.Missing) - len(r.DeadLetter.Extra); n > 0 {
		fmt.Fprintf(w, "... and %d more dead-letter differences (--limit 0 lists all)\n", n)
	}
	if !r.Detail.clean() {
		fmt.Fprintf(w, "append sink %s differs: %d rows for %d good records, %d duplicated\n", r.Detail.Table, r.Detail.Rows, r.Detail.Expected, r.Detail.Duplicates)
	}
	if r.Clean {
		fmt.Fprintln(w, "no differences")
	}
	return nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
