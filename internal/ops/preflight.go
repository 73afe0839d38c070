// Preflight: everything relay run needs from MySQL and Kafka, checked before the first start.
//
// Invariant: a check that says ok has exercised the real thing (an XA branch was prepared and
// rolled back on a real connection, XA RECOVER ran, the session settings were read back after relay
// set them), and a FAIL says which setting is wrong, by how much, and what to change. Checks never
// leave anything behind but the tables relay run would create anyway.

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/sink"
	"github.com/relay-sh/relay/internal/spec"
)

// Check statuses. A warn does not fail preflight.
const (
	CheckOK   = "ok"
	CheckWarn = "warn"
	CheckFail = "FAIL"
)

// Check is one preflight line.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

func (c Check) String() string { return fmt.Sprintf("%s %s: %s", c.Status, c.Name, c.Detail) }

// Failed counts the FAIL checks.
func Failed(cs []Check) int {
	n := 0
	for _, c := range cs {
		if c.Status == CheckFail {
			n++
		}
	}
	return n
}

type checks []Check

func (cs *checks) add(name, status, format string, args ...any) {
	*cs = append(*cs, Check{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
}

func (cs *checks) result(name string, err error, okFormat string, args ...any) bool {
	if err != nil {
		cs.add(name, CheckFail, "%v", err)
		return false
	}
	cs.add(name, CheckOK, okFormat, args...)
	return true
}

// Minimum server versions with usable XA: prepared branches that survive a disconnect.
var (
	minMySQL   = [3]int{5, 7, 7}
	minMariaDB = [3]int{10, 5, 2}
)

// Preflight runs every check of the servers for a configuration that passed Validate (cmd/relay
// never dials with one that did not: relay config check's errors are preflight's first lines).
func Preflight(ctx context.Context, e *Env) []Check {
	var cs checks
	cfg := e.Config
	cs.add("config", CheckOK, "valid: job %s, mode %s, %d subtasks, topics %s", cfg.Job.Name, cfg.Mode, cfg.Subtasks,
		strings.Join(cfg.Kafka.Topics, ","))
	if serverChecks(ctx, e, &cs) {
		jobChecks(ctx, e, &cs)
	}
	topicCheck(ctx, e, &cs)
	registryCheck(ctx, e, &cs)
	// Subtask indexes are unique across instances, so the last instance's last subtask is the longest.
	longest := commit.MaxTag(cfg.Job.Name, cfg.InstanceCount()*cfg.Subtasks)
	if n := len(longest); n > commit.MaxTagBytes {
		cs.add("tag_length", CheckFail, "tags of job %s can reach %d bytes (%s), XA allows %d: shorten job.name", cfg.Job.Name, n, longest, commit.MaxTagBytes)
	} else {
		cs.add("tag_length", CheckOK, "the longest tag (%s) is %d bytes, XA allows %d", longest, n, commit.MaxTagBytes)
	}
	return cs
}

// serverChecks checks the sink server; false when it cannot be reached.
func serverChecks(ctx context.Context, e *Env, cs *checks) bool {
	cfg := e.Config
	flavor, version, err := sink.DetectFlavor(ctx, e.Sink)
	if err != nil {
		cs.add("mysql", CheckFail, "cannot reach the sink database %s: %v", database.Redact(cfg.MySQL.DSN), err)
		return false
	}
	name, least := "MySQL", minMySQL
	if flavor == sink.MariaDB {
		name, least = "MariaDB", minMariaDB
	}
	v, ok := parseVersion(version)
	switch {
	case !ok:
		cs.add("mysql", CheckWarn, "%s %q: cannot read the version; XA needs %s >= %d.%d.%d", name, version, name, least[0], least[1], least[2])
	case less(v, least) && cfg.Mode == commit.ModeXA:
		cs.add("mysql", CheckFail, "%s %s is too old for XA mode: prepared branches need %s >= %d.%d.%d to survive a disconnect (or use mode held)",
			name, version, name, least[0], least[1], least[2])
	default:
		cs.add("mysql", CheckOK, "%s %s (XA needs >= %d.%d.%d)", name, version, least[0], least[1], least[2])
	}

	galeraCheck(ctx, e, cs)

	plan, err := cfg.Plan()
	if err != nil {
		cs.add("schema", CheckFail, "%v", err)
		return false
	}
	schemaErr := errors.Join(
		plan.Schema(cfg.MySQL.DLQTable, cfg.MySQL.DetailTable).Create(ctx, e.Sink, flavor),
		ledger.EnsureSchema(ctx, e.Ledger.DB()))
	schemaOK := cs.result("schema", schemaErr, "tables %s, %s and the ledger's relay_* exist (created if missing)", strings.Join(plan.Tables(), ", "), cfg.MySQL.DLQTable)

	if cfg.Mode == commit.ModeXA {
		if schemaOK {
			cs.result("xa", probeXA(ctx, e.Sink, cfg.MySQL.DLQTable), "XA START, END, PREPARE and ROLLBACK of a probe branch on %s", cfg.MySQL.DLQTable)
		}
		all, err := commit.ListPrepared(ctx, e.Sink)
		if err != nil {
			cs.add("xa_recover", CheckFail, "%v: relay's MySQL user may not list prepared branches (MySQL 8 needs the XA_RECOVER_ADMIN privilege)", err)
		} else {
			cs.add("xa_recover", CheckOK, "allowed (%d prepared XA transactions on the server)", len(all))
		}
	}

	binlog, err := database.ReadBinlog(ctx, e.Sink)
	switch {
	case err != nil:
		cs.add("binlog_format", CheckFail, "%v", err)
	case binlog.CheckReadCommitted() != nil:
		cs.add("binlog_format", CheckFail, "%v", binlog.CheckReadCommitted())
	case !binlog.On:
		cs.add("binlog_format", CheckOK, "binary log is off (binlog_format %s)", binlog.Format)
	case strings.EqualFold(binlog.Format, "ROW"):
		cs.add("binlog_format", CheckOK, "ROW")
	default:
		cs.add("binlog_format", CheckWarn, "%s: prepared XA transactions replicate safely only with binlog_format=ROW", binlog.Format)
	}

	sessionChecks(ctx, e, cs)

	maxConn, err1 := database.ServerVar(ctx, e.Sink, "SHOW GLOBAL VARIABLES LIKE 'max_connections'")
	threads, err2 := database.ServerVar(ctx, e.Sink, "SHOW GLOBAL STATUS LIKE 'Threads_connected'")
	if err := errors.Join(err1, err2); err != nil {
		cs.add("connections", CheckFail, "reading max_connections/Threads_connected: %v", err)
	} else {
		cs.result("connections", cfg.CheckServer(maxConn, threads), "max_connections %d, %d in use: room for %d subtasks and relay's ledger, fence and resolver connections",
			maxConn, threads, cfg.Subtasks)
	}
	return schemaOK
}

// galeraCheck says whether the sink is a Galera node and whether the mode fits it: Galera refuses
// XA (error 1235), so mode xa fails here at once, naming held mode, instead of failing every
// checkpoint of relay run.
func galeraCheck(ctx context.Context, e *Env, cs *checks) {
	g, err := database.ReadGalera(ctx, e.Sink)
	switch {
	case err != nil:
		cs.add("galera", CheckFail, "%v", err)
	case !g.On:
		cs.add("galera", CheckOK, "%s", g)
	case e.Config.Mode == commit.ModeXA:
		cs.add("galera", CheckFail, "%s: Galera refuses XA transactions (error 1235); use mode held (RELAY_MODE=held), or leave mode unset, which picks held on Galera", g)
	case e.ModePicked:
		cs.add("galera", CheckOK, "%s: mode unset, so held (Galera has no XA); sessions run with causal reads (wsrep_sync_wait=%d)", g, database.SyncWaitReads)
	default:
		cs.add("galera", CheckOK, "%s: fine for mode held; sessions run with causal reads (wsrep_sync_wait=%d)", g, database.SyncWaitReads)
	}
}

// sessionChecks reads back what relay's sessions really get (the server may clamp what relay sets)
// and holds it to the session-timeout rule.
func sessionChecks(ctx context.Context, e *Env, cs *checks) {
	cp := e.Config.Checkpoint
	var wait, global, lockWait int64
	err := e.Sink.QueryRowContext(ctx, `SELECT @@SESSION.wait_timeout, @@GLOBAL.wait_timeout, @@SESSION.innodb_lock_wait_timeout`).
		Scan(&wait, &global, &lockWait)
	if err != nil {
		cs.add("session_timeout", CheckFail, "reading wait_timeout: %v", err)
		return
	}
	eff, set := time.Duration(wait)*time.Second, e.Config.MySQL.SessionTimeout
	clamped := ""
	if set.Truncate(time.Second) != eff {
		clamped = fmt.Sprintf(", not the %s of mysql.session_timeout: the server changed it", set)
	}
	need := cp.Interval + cp.Timeout + cp.RestartAllowance
	if eff <= need {
		cs.add("session_timeout", CheckFail, "relay's sessions get wait_timeout %s%s (server global %s); it must exceed checkpoint.interval %s + checkpoint.timeout %s + checkpoint.restart_allowance %s = %s (short by %s): raise mysql.session_timeout (RELAY_MYSQL_SESSION_TIMEOUT) or lower the others",
			eff, clamped, time.Duration(global)*time.Second, cp.Interval, cp.Timeout, cp.RestartAllowance, need, need-eff+time.Second)
	} else {
		cs.add("session_timeout", CheckOK, "relay's sessions get wait_timeout %s%s (server global %s) > checkpoint.interval %s + checkpoint.timeout %s + checkpoint.restart_allowance %s = %s",
			eff, clamped, time.Duration(global)*time.Second, cp.Interval, cp.Timeout, cp.RestartAllowance, need)
	}
	lw := time.Duration(lockWait) * time.Second
	if lw >= cp.Timeout {
		cs.add("lock_wait_timeout", CheckFail, "relay's sessions get innodb_lock_wait_timeout %s; it must be below checkpoint.timeout %s so a blocked flush fails inside the checkpoint: lower mysql.lock_wait_timeout (RELAY_MYSQL_LOCK_WAIT_TIMEOUT)",
			lw, cp.Timeout)
	} else {
		cs.add("lock_wait_timeout", CheckOK, "relay's sessions get innodb_lock_wait_timeout %s < checkpoint.timeout %s", lw, cp.Timeout)
	}
	switch level, err := database.Isolation(ctx, e.Sink); {
	case err != nil:
		cs.add("isolation", CheckFail, "%v", err)
	case level != "READ-COMMITTED":
		cs.add("isolation", CheckFail, "relay's sink sessions run at %s, not READ-COMMITTED: the server did not take SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", level)
	default:
		cs.add("isolation", CheckOK, "relay's sink sessions run at READ-COMMITTED (no gap locks between subtasks' branches)")
	}
}

// jobChecks look at the ledger: the owner of the sink tables, and branches that no job of this
// ledger will ever resolve.
func jobChecks(ctx context.Context, e *Env, cs *checks) {
	ownerCheck(ctx, e, cs)
	specCheck(ctx, e, cs)
	txns, _, err := e.inventory(ctx)
	if err != nil {
		cs.add("orphans", CheckFail, "listing prepared branches: %v", err)
		return
	}
	var orphans []string
	for _, t := range txns {
		if t.Kind == KindUnknown {
			orphans = append(orphans, t.Tag)
		}
	}
	if len(orphans) == 0 {
		cs.add("orphans", CheckOK, "no prepared relay branch of a job missing from the ledger")
		return
	}
	// A warning, not a failure: another ledger database on the same server looks the same from here,
	// and that ledger may have decided them, so nothing here may suggest rolling them back.
	cs.add("orphans", CheckWarn, "%d prepared branches name jobs that have no ledger in this database (%s): they hold their row locks until resolved; their jobs' ledgers may be in other databases of this server and may have decided them, so resolve each from its own job's configuration (relay txns resolve there); see docs/RUNBOOK.md, \"A prepared branch of an unknown job\"",
		len(orphans), strings.Join(orphans, ", "))
}

// ownerCheck refuses tables another job of this ledger owns, and warns about an unclaimed aggregate
// table that already holds rows although the job never committed: someone else wrote them (a job
// of another ledger, or one from before relay recorded owners), and relay run would add to them.
func ownerCheck(ctx context.Context, e *Env, cs *checks) {
	m := e.Config.MySQL
	plan, err := e.Config.Plan()
	if err != nil {
		cs.add("table_owner", CheckFail, "%v", err)
		return
	}
	unclaimed, err := e.Ledger.CheckSchema(ctx, e.Sink, plan.Schema(m.DLQTable, m.DetailTable))
	if err != nil {
		cs.add("table_owner", CheckFail, "%v", err)
		return
	}
	if len(unclaimed) == 0 {
		cs.add("table_owner", CheckOK, "job %s owns its tables", e.Config.Job.Name)
		return
	}
	_, committed, err := e.Ledger.PartitionOffsets(ctx)
	var full string // an unclaimed aggregate table that holds rows
	for _, t := range plan.Tables() {
		var rows bool
		if err == nil && committed == 0 && slices.Contains(unclaimed, t) {
			err = e.Sink.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM `"+t+"`)").Scan(&rows)
		}
		if rows && full == "" {
			full = t
		}
	}
	switch {
	case err != nil:
		cs.add("table_owner", CheckFail, "%v", err)
	case full != "":
		cs.add("table_owner", CheckWarn, "%s has no owner job but holds rows, and job %s never committed: another job wrote them (one of another ledger database, or from before relay recorded owners); relay run would add into them: give job %s its own table unless they are its own",
			full, e.Config.Job.Name, e.Config.Job.Name)
	default:
		cs.add("table_owner", CheckOK, "no job owns %s yet: relay run claims it for job %s", strings.Join(unclaimed, ", "), e.Config.Job.Name)
	}
}

// specCheck holds the spec to the meanings the ledger records for the job's tables, as relay run
// does at start.
func specCheck(ctx context.Context, e *Env, cs *checks) {
	plan, err := e.Config.Plan()
	if err != nil {
		cs.add("spec", CheckFail, "%v", err)
		return
	}
	r, err := CompareSpec(ctx, plan, e.Sink, e.Ledger)
	if err == nil {
		err = r.Refusal()
	}
	if err != nil {
		cs.add("spec", CheckFail, "%v", err)
		return
	}
	var s []string
	for _, d := range r.Tables {
		s = append(s, d.Table+" "+stateText[d.State])
	}
	cs.add("spec", CheckOK, "every table keeps its recorded meaning: %s", strings.Join(s, "; "))
}

// registryCheck (a registry input format) runs relay run's start-up check of each topic's
// subject once: where relay run would wait (the registry not answering, no schema under a
// subject yet) preflight fails, saying so.
func registryCheck(ctx context.Context, e *Env, cs *checks) {
	cfg := e.Config
	plan, err := cfg.Plan()
	if err != nil || plan.InputFormat() == spec.FormatJSON {
		return // the schema check reported a plan that does not compile
	}
	dec, err := cfg.Decoder(plan)
	if err == nil {
		err = format.CheckTopics(ctx, dec, cfg.Kafka.Topics)
	}
	cs.result("schema_registry", err, "the %s schemas under %s-value give every field of the spec", plan.InputFormat(),
		strings.Join(cfg.Kafka.Topics, "-value, "))
}

func topicCheck(ctx context.Context, e *Env, cs *checks) {
	c, parts, err := e.partitions(ctx)
	if err != nil {
		cs.add("topics", CheckFail, "%v (brokers %s)", err, e.Config.Kafka.Brokers.String())
		return
	}
	defer c.Close()
	// The job's resume offsets must lie within what the topics hold now (relay run refuses
	// otherwise): a topic deleted and recreated under the same name looks fine by name alone.
	offs, _, err := e.Ledger.PartitionOffsets(ctx)
	if err != nil {
		cs.add("topics", CheckFail, "%v", err)
		return
	}
	resume := partition.Offsets{}
	for t, ps := range parts {
		for _, p := range ps {
			if off, ok := offs.Get(t, p); ok {
				resume.Set(t, p, off)
			}
		}
	}
	if err := ledger.CheckRange(ctx, resume, c.Kafka().QueryWatermarkOffsets); err != nil {
		cs.add("topics", CheckFail, "%v", err)
		return
	}
	var s []string
	for _, t := range sortedTopics(parts) {
		s = append(s, fmt.Sprintf("%s (%d partitions)", t, len(parts[t])))
	}
	cs.add("topics", CheckOK, "%s; the job's resume offsets lie within them", strings.Join(s, ", "))
}

// probeXA prepares and rolls back a branch that inserts one dead-letter row no job can write (its
// job is the probe's tag, which no job name matches). The dead-letter table exists whatever the
// pipeline spec's aggregate tables are; theirs are held to InnoDB by the schema check.
func probeXA(ctx context.Context, db *sql.DB, table string) error {
	tag := fmt.Sprintf("relaypreflight-%d-%d", time.Now().UnixNano(), os.Getpid())
	// The tag is the job: unique per probe, so the probe never waits on another one's lock.
	stmt := "INSERT INTO `" + table + "` (job, topic, kpartition, koffset, reason, payload, payload_bytes, checkpoint_id) VALUES ('" + tag + "', '', 0, 0, 'preflight', '', 0, 0)"
	if err := commit.Probe(ctx, db, tag, stmt); err != nil {
		return err
	}
	// The rollback must have taken the row with it; a table that kept it would keep a failed
	// epoch's totals too. A leftover is removed: preflight leaves nothing behind.
	const probeRow = "` WHERE job = ?"
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+probeRow, tag).Scan(&n); err != nil {
		return fmt.Errorf("probe row: %w", err)
	}
	if n == 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM `"+table+probeRow, tag); err != nil {
		return fmt.Errorf("%s kept the row of the rolled-back probe branch %s, and deleting it failed (%w): it is not transactional", table, tag, err)
	}
	return fmt.Errorf("%s kept the row of the rolled-back probe branch %s (deleted now): it is not transactional, and a crash would duplicate its rows", table, tag)
}

// parseVersion reads the leading x.y.z of a server version string.
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 3 {
		return v, false
	}
	for i, p := range parts {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(p[:end])
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
