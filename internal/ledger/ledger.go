// Package ledger is the durable record of checkpoints: their source offsets, their transaction tags
// and the commit decision, plus the fence that makes one process the owner of a job.
//
// Invariants:
//   - The row for checkpoint c in state COMMITTING is the commit decision for every tag it lists;
//     no row means abort. A decision is written only by the current owner: the write locks the job
//     row and checks the owner epoch in the same local transaction.
//   - Ownership is a GET_LOCK held on a dedicated connection for the process lifetime; losing that
//     connection loses ownership, and the owner must stop (Fence.Lost).
//   - Verdicts are read with locking reads, so a decision whose COMMIT is still in flight on a lost
//     connection is waited for instead of being read as "no row".
package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/partition"
)

// SchemaVersion is the ledger layout this build reads and writes. Version 2 added relay_leases,
// the owner's lease and recorded sessions: a version-1 relay would neither renew a lease nor
// record its sessions, so it must not run against a ledger that newer relays take over by lease.
// Version 3 added relay_owners, the owner row every decision writes (owner.go): an older relay
// would decide without writing it, which on a Galera cluster lets two owners both decide.
// Version 4 added relay_claims, the row every claim of a job writes (claim.go): an older relay's
// claim writes no row its siblings' claims write, so on a Galera cluster two claims of different
// layouts on two nodes would both commit.
const SchemaVersion = 4

// State of a checkpoint row.
type State string

const (
	Committing State = "COMMITTING" // decided: every listed branch must be committed
	Committed  State = "COMMITTED"  // every listed branch is committed
	Lost       State = "LOST"       // decided, but the server rolled back a listed branch (lost.go)
	LostAcked  State = "LOST_ACKED" // LOST, and an operator acknowledged it: relay runs again
)

// ErrFenced means another process owns the job (or took it over from this one).
var ErrFenced = fault.Fatal("fenced")

// ErrFenceLost means this process's lease could not be renewed (the lock session died or hung):
// nothing is decided, and no new connection opened, under that fence. Unlike ErrFenced it ends
// only the session: the fence is taken again before the next one, by the lease rule when the
// server still holds the old lock session.
var ErrFenceLost = fault.Classed("fence_lost", "fence lock session lost")

// ErrBranchLost means the server rolled back a branch the ledger decided to commit: its rows are
// lost. Nothing of relay retries past it: the branch is gone, a restart would carry on without it.
var ErrBranchLost = fault.Fatal("a branch the ledger decided to commit was rolled back by the server; its rows are lost")

// ErrNewerSchema means the ledger was written by a newer relay.
var ErrNewerSchema = fault.Fatal("ledger schema is newer than this relay")

// Checkpoint is one ledger row.
type Checkpoint struct {
	ID          int64
	State       State
	OwnerEpoch  int64
	Tags        []string
	Offsets     partition.Offsets
	Records     int64
	DecidedAt   time.Time
	CommittedAt *time.Time
	Instance    string // owner key of the instance that decided it
}

// Ledger reads and writes one job's rows on behalf of one instance of it.
type Ledger struct {
	db     *sql.DB
	job    string // the job: checkpoint rows, partition offsets and checkpoint ids are shared by its instances
	key    string // this instance's fence and owner row: the job itself, or job/i when it runs as several
	layout int    // how many instances the job runs as
}

// New binds a ledger to db and a job that runs as one instance; call EnsureSchema before use.
func New(db *sql.DB, job string) *Ledger { return &Ledger{db: db, job: job, key: job, layout: 1} }

// NewInstance binds a ledger to instance i of m of a job (docs/PROTOCOL.md, "Several instances").
func NewInstance(db *sql.DB, job string, i, m int) *Ledger {
	return &Ledger{db: db, job: job, key: InstanceKey(job, i, m), layout: m}
}

// InstanceKey names instance i of m: its lock, its owner row, the instance column of its rows.
func InstanceKey(job string, i, m int) string {
	if m <= 1 {
		return job
	}
	return job + "/" + strconv.Itoa(i)
}

// LayoutGroup is the layout of a job whose processes share its partitions through the consumer
// group: any number of members, each with a key of its own (MemberKey).
const LayoutGroup = 0

// NewMember binds a ledger to member id of a job run as a group (docs/PROTOCOL.md, "Group
// membership"): its own fence, lease and owner row, and per-partition owner rows for what it reads.
func NewMember(db *sql.DB, job, id string) *Ledger {
	return &Ledger{db: db, job: job, key: MemberKey(job, id), layout: LayoutGroup}
}

// MemberKey names member id of a job run as a group.
func MemberKey(job, id string) string { return job + "/g/" + id }

// Group reports whether this ledger serves a member of a group.
func (l *Ledger) Group() bool { return l.layout == LayoutGroup }

// ForKey is the ledger of another instance of the same job (the resolver acts for dead instances).
func (l *Ledger) ForKey(key string) *Ledger {
	return &Ledger{db: l.db, job: l.job, key: key, layout: l.layout}
}

// Job is the job this ledger serves.
func (l *Ledger) Job() string { return l.job }

// Key is this instance's owner key.
func (l *Ledger) Key() string { return l.key }

// DB is the ledger's database.
func (l *Ledger) DB() *sql.DB { return l.db }

var schema = []string{
	`CREATE TABLE IF NOT EXISTS relay_ledger_meta (
		name VARCHAR(64) NOT NULL PRIMARY KEY,
		value VARCHAR(255) NOT NULL
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS relay_jobs (
		job VARCHAR(64) NOT NULL PRIMARY KEY,
		owner_epoch BIGINT NOT NULL,
		owner VARCHAR(255) NOT NULL,
		acquired_at DATETIME(6) NOT NULL,
		id_reserved BIGINT NOT NULL DEFAULT 0,
		layout INT NOT NULL DEFAULT 1,
		conn_id BIGINT NOT NULL DEFAULT 0
	) ENGINE=InnoDB`,
	// One row per job, written by every claim of any of its processes and by a membership switch
	// (claim.go): on a Galera cluster, where locks are the node's alone, two of them racing on two
	// nodes write this row and certification fails the later. A table of its own, not a column of
	// relay_jobs: the ledger grows by CREATE only (relay's grants have no ALTER).
	`CREATE TABLE IF NOT EXISTS relay_claims (
		job VARCHAR(64) NOT NULL PRIMARY KEY,
		claims BIGINT NOT NULL
	) ENGINE=InnoDB`,
	// The owner's lease, apart from relay_jobs: renewals must not queue behind the job row's
	// lock, which a decision holds (and a decision stuck on a vanished host holds for good).
	`CREATE TABLE IF NOT EXISTS relay_leases (
		job VARCHAR(64) NOT NULL PRIMARY KEY,
		owner_epoch BIGINT NOT NULL,
		owner VARCHAR(255) NOT NULL,
		conn_id BIGINT NOT NULL,
		lease_until DATETIME(6) NOT NULL,
		sessions TEXT NOT NULL
	) ENGINE=InnoDB`,
	// Checkpoint ids are handed out in blocks; the block says which instance may have used an id.
	`CREATE TABLE IF NOT EXISTS relay_id_blocks (
		job VARCHAR(64) NOT NULL,
		first_id BIGINT NOT NULL,
		last_id BIGINT NOT NULL,
		owner_key VARCHAR(64) NOT NULL,
		reserved_at DATETIME(6) NOT NULL,
		PRIMARY KEY (job, first_id)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS relay_checkpoints (
		job VARCHAR(64) NOT NULL,
		checkpoint_id BIGINT NOT NULL,
		state VARCHAR(16) NOT NULL,
		owner_epoch BIGINT NOT NULL,
		tags TEXT NOT NULL,
		offsets LONGTEXT NOT NULL,
		records BIGINT NOT NULL,
		instance VARCHAR(64) NOT NULL,
		decided_at DATETIME(6) NOT NULL,
		committed_at DATETIME(6) NULL,
		PRIMARY KEY (job, checkpoint_id),
		KEY state_idx (job, state)
	) ENGINE=InnoDB`,
	// Each partition's next offset, written in the same local transaction as the decision that
	// covers it (XA mode) or as its data (held mode): one row per partition, whichever instance
	// owns it now, so a rescale resumes every partition where its last owner stopped.
	`CREATE TABLE IF NOT EXISTS relay_offsets (
		job VARCHAR(64) NOT NULL,
		topic VARCHAR(249) NOT NULL,
		kpartition INT NOT NULL,
		next_offset BIGINT NOT NULL,
		checkpoint_id BIGINT NOT NULL,
		owner_key VARCHAR(64) NOT NULL,
		updated_at DATETIME(6) NOT NULL,
		PRIMARY KEY (job, topic, kpartition)
	) ENGINE=InnoDB`,
	auditTable,
	inDoubtTable,
	tablesTable,
	ownersTable,
	partitionOwnersTable,
	meaningsTable,
	startTopicsTable,
}

// EnsureSchema creates the ledger tables and refuses a ledger written by a newer relay.
func EnsureSchema(ctx context.Context, db *sql.DB) error {
	for _, q := range schema {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("ledger schema: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT IGNORE INTO relay_ledger_meta (name, value) VALUES ('schema_version', ?)`,
		strconv.Itoa(SchemaVersion)); err != nil {
		return fmt.Errorf("ledger schema: %w", err)
	}
	// Versions 1 to 3 differ only by tables created above: relay_leases, relay_owners, relay_claims
	// (an owner claimed under them has no owner row: its decisions fail, and the job is taken again).
	if _, err := db.ExecContext(ctx, `UPDATE relay_ledger_meta SET value = ? WHERE name = 'schema_version' AND value IN ('1', '2', '3')`,
		strconv.Itoa(SchemaVersion)); err != nil {
		return fmt.Errorf("ledger schema: %w", err)
	}
	var v string
	if err := db.QueryRowContext(ctx, `SELECT value FROM relay_ledger_meta WHERE name = 'schema_version'`).Scan(&v); err != nil {
		return fmt.Errorf("ledger schema: %w", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n > SchemaVersion {
		return fmt.Errorf("%w: found version %s, this build knows %d", ErrNewerSchema, v, SchemaVersion)
	}
	return nil
}

// Decide writes the decision row for c, conditional on epoch still owning the job (and, for a
// member of a group, on claims still holding each partition of c, partowner.go). Its COMMIT is
// the commit point of the checkpoint. An error from the COMMIT itself leaves the outcome unknown:
// the caller must go through recovery, which reads the verdict with a locking read.
func (l *Ledger) Decide(ctx context.Context, epoch int64, claims partition.Claims, c Checkpoint) error {
	offs, err := json.Marshal(c.Offsets)
	if err != nil {
		return err
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("decide %d: %w", c.ID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := checkEpoch(ctx, tx, l.key, epoch); err != nil {
		return fmt.Errorf("decide %d: %w", c.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_checkpoints
		(job, checkpoint_id, state, owner_epoch, tags, offsets, records, instance, decided_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))`,
		l.job, c.ID, Committing, epoch, strings.Join(c.Tags, ","), string(offs), c.Records, l.key); err != nil {
		return fmt.Errorf("decide %d: %w", c.ID, err)
	}
	if err := l.stampPartitions(ctx, tx, claims, c.Offsets); err != nil {
		return fmt.Errorf("decide %d: %w", c.ID, err)
	}
	if err := l.writeOffsets(ctx, tx, c.ID, c.Offsets); err != nil {
		return fmt.Errorf("decide %d: %w", c.ID, err)
	}
	if err := l.stampOwner(ctx, tx, epoch); err != nil {
		return fmt.Errorf("decide %d: %w", c.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("decide %d: commit: %w", c.ID, fault.AtCommit(err))
	}
	return nil
}

// Guard runs fn (an XA COMMIT or ROLLBACK of recovery or the resolver) while holding the job
// row in share mode, after checking that epoch still owns the job. A takeover's epoch bump needs
// that row exclusively, so it waits for fn, and fn never runs after one: an owner frozen past its
// lease cannot wake up and roll back a branch the next owner is about to decide.
func (l *Ledger) Guard(ctx context.Context, epoch int64, fn func() error) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var cur int64
	if err := tx.QueryRowContext(ctx, `SELECT owner_epoch FROM relay_jobs WHERE job = ? LOCK IN SHARE MODE`, l.key).Scan(&cur); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	if cur != epoch {
		return fmt.Errorf("%w: owner epoch is %d, this process holds %d", ErrFenced, cur, epoch)
	}
	return fn()
}

func checkEpoch(ctx context.Context, tx *sql.Tx, key string, epoch int64) error {
	var cur int64
	var owner string
	err := tx.QueryRowContext(ctx, `SELECT owner_epoch, owner FROM relay_jobs WHERE job = ? FOR UPDATE`, key).Scan(&cur, &owner)
	if err != nil {
		return err
	}
	if cur != epoch {
		return fmt.Errorf("%w: owner epoch is %d (%s), this process holds %d", ErrFenced, cur, owner, epoch)
	}
	return nil
}

// MarkCommitted moves c to COMMITTED once all its branches are committed.
func (l *Ledger) MarkCommitted(ctx context.Context, id int64) error {
	_, err := l.db.ExecContext(ctx, `UPDATE relay_checkpoints SET state = ?, committed_at = UTC_TIMESTAMP(6)
		WHERE job = ? AND checkpoint_id = ? AND state = ?`, Committed, l.job, id, Committing)
	if err != nil {
		return fmt.Errorf("mark %d committed: %w", id, err)
	}
	return nil
}

// Verdict tells whether checkpoint id was decided. The read locks the row (or the gap where it
// would be), so a decision committing on a lost connection is waited for, not missed.
func (l *Ledger) Verdict(ctx context.Context, id int64) (decided bool, err error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	var st string
	err = tx.QueryRowContext(ctx, `SELECT state FROM relay_checkpoints WHERE job = ? AND checkpoint_id = ? LOCK IN SHARE MODE`,
		l.job, id).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("verdict %d: %w", id, err)
	}
	return true, nil
}

const checkpointCols = `checkpoint_id, state, owner_epoch, tags, offsets, records, decided_at, committed_at, instance`

func scanCheckpoint(sc interface{ Scan(...any) error }) (Checkpoint, error) {
	var c Checkpoint
	var tags, offs string
	var committed sql.NullTime
	if err := sc.Scan(&c.ID, &c.State, &c.OwnerEpoch, &tags, &offs, &c.Records, &c.DecidedAt, &committed, &c.Instance); err != nil {
		return c, err
	}
	if tags != "" {
		c.Tags = strings.Split(tags, ",")
	}
	if err := json.Unmarshal([]byte(offs), &c.Offsets); err != nil {
		return c, fmt.Errorf("checkpoint %d offsets: %w", c.ID, err)
	}
	if c.Offsets == nil {
		c.Offsets = partition.Offsets{}
	}
	if committed.Valid {
		t := committed.Time
		c.CommittedAt = &t
	}
	return c, nil
}

// RolledBack classifies the server's XA_RBROLLBACK answer to the commit of tag, a branch of the
// decided checkpoint c. The server answers so for a branch that wrote nothing; relay prepares a
// branch only after it wrote (an epoch with nothing to write opens none), and the decision lists
// exactly the branches that prepared. A listed branch rolled back lost its rows (ErrBranchLost); an
// unlisted one is not relay's writing and lost nothing.
func (c Checkpoint) RolledBack(tag string) error {
	if slices.Contains(c.Tags, tag) {
		return fmt.Errorf("%w: branch %s of checkpoint %d (decided %s UTC, %d records)", ErrBranchLost, tag, c.ID,
			c.DecidedAt.Format("2006-01-02 15:04:05"), c.Records)
	}
	return nil
}

// LastDecided returns the newest decided checkpoint, or nil when the job has none.
func (l *Ledger) LastDecided(ctx context.Context) (*Checkpoint, error) {
	row := l.db.QueryRowContext(ctx, `SELECT `+checkpointCols+` FROM relay_checkpoints
		WHERE job = ? ORDER BY checkpoint_id DESC LIMIT 1`, l.job)
	c, err := scanCheckpoint(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last checkpoint: %w", err)
	}
	return &c, nil
}

// Committing lists rows still in COMMITTING, oldest first.
func (l *Ledger) Committing(ctx context.Context) ([]Checkpoint, error) {
	out, err := l.checkpoints(ctx, `WHERE job = ? AND state = ? ORDER BY checkpoint_id`, l.job, Committing)
	if err != nil {
		return nil, fmt.Errorf("committing checkpoints: %w", err)
	}
	return out, nil
}

// Recent lists the newest n rows, newest first.
func (l *Ledger) Recent(ctx context.Context, n int) ([]Checkpoint, error) {
	out, err := l.checkpoints(ctx, `WHERE job = ? ORDER BY checkpoint_id DESC LIMIT ?`, l.job, n)
	if err != nil {
		return nil, fmt.Errorf("recent checkpoints: %w", err)
	}
	return out, nil
}

// checkpoints reads the checkpoint rows that where (a WHERE clause, with its order and limit) selects.
func (l *Ledger) checkpoints(ctx context.Context, where string, args ...any) ([]Checkpoint, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT `+checkpointCols+` FROM relay_checkpoints `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Checkpoint
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Prune deletes committed rows older than the newest keep rows; the newest decided row is always
// kept because it holds the resume offsets.
func (l *Ledger) Prune(ctx context.Context, newest int64, keep int64) error {
	_, err := l.db.ExecContext(ctx, `DELETE FROM relay_checkpoints WHERE job = ? AND state = ? AND checkpoint_id < ?`,
		l.job, Committed, newest-keep)
	return err
}
