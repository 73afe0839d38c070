// Lost checkpoints: a decided checkpoint one of whose listed branches the server rolled back.
//
// Invariant: once relay (or relay txns resolve) has seen the server roll back a branch the ledger's
// decision lists, the checkpoint's row says LOST before the error is returned, in the same
// transaction as its relay_audit row; nothing moves a LOST row to COMMITTED (markDone reads only
// COMMITTING rows), and relay run refuses to start while the job has a LOST row, until an operator
// acknowledges the loss (LOST_ACKED). The branch is gone from XA RECOVER after that one answer, so
// this row is the only durable trace of the lost records.

package ledger

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/partition"
)

// ErrLossUnacknowledged means the job has a checkpoint whose rows the server lost and no operator
// has acknowledged it yet.
var ErrLossUnacknowledged = fault.Fatal("a decided checkpoint lost rows and no operator has acknowledged the loss")

// Audit actions of a lost branch.
const (
	AuditBranchLost       = "branch_lost"       // the server rolled back a branch the decision lists
	AuditLostAcknowledged = "lost_acknowledged" // an operator acknowledged a lost checkpoint
)

// MarkLost records that the server rolled back tag, a listed branch of decided checkpoint c: the
// row goes to LOST (it is written back when it was pruned) and one relay_audit row names the tag.
// origin is who saw it (recovery, resolver, manual); operator is who ran it.
func (l *Ledger) MarkLost(ctx context.Context, c Checkpoint, tag, origin, operator string) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mark %d lost: %w", c.ID, err)
	}
	defer func() { _ = tx.Rollback() }()
	instance := c.Instance
	if instance == "" {
		instance = l.key
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_checkpoints
		(job, checkpoint_id, state, owner_epoch, tags, offsets, records, instance, decided_at)
		VALUES (?, ?, ?, 0, ?, '{}', 0, ?, UTC_TIMESTAMP(6))
		ON DUPLICATE KEY UPDATE state = IF(state = ?, state, VALUES(state)), committed_at = NULL`,
		l.job, c.ID, Lost, strings.Join(c.Tags, ","), instance, LostAcked); err != nil {
		return fmt.Errorf("mark %d lost: %w", c.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_audit (job, target, action, origin, operator, at, forced, detail)
		VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), FALSE, ?)`, l.job, tag, AuditBranchLost, origin, operator,
		fmt.Sprintf("checkpoint %d: the server rolled back this listed branch (XA_RBROLLBACK); its rows are lost", c.ID)); err != nil {
		return fmt.Errorf("mark %d lost: %w", c.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mark %d lost: commit: %w", c.ID, err)
	}
	return nil
}

// Lost lists the job's LOST rows (not yet acknowledged), oldest first, each with the tag the
// server rolled back (from relay_audit).
func (l *Ledger) Lost(ctx context.Context) ([]LostCheckpoint, error) {
	cs, err := l.checkpoints(ctx, `WHERE job = ? AND state = ? ORDER BY checkpoint_id`, l.job, Lost)
	if err != nil {
		return nil, fmt.Errorf("lost checkpoints: %w", err)
	}
	out := make([]LostCheckpoint, len(cs))
	for i, c := range cs {
		out[i] = LostCheckpoint{Checkpoint: c}
	}
	for i := range out {
		if err := l.describeLoss(ctx, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LostCheckpoint is a LOST row with what the operator needs to recount it.
type LostCheckpoint struct {
	Checkpoint
	LostTags []string `json:"lost_tags"`
	// From holds each partition's offset before the checkpoint (the previous row of its instance);
	// the lost records lie in [From, Offsets). A partition missing here has an unknown start.
	From partition.Offsets `json:"from"`
}

func (l *Ledger) describeLoss(ctx context.Context, lc *LostCheckpoint) error {
	rows, err := l.db.QueryContext(ctx, `SELECT DISTINCT target FROM relay_audit WHERE job = ? AND action = ? AND target LIKE ?`,
		l.job, AuditBranchLost, fmt.Sprintf("%%-%d-%%", lc.ID))
	if err != nil {
		return fmt.Errorf("lost checkpoint %d: %w", lc.ID, err)
	}
	for rows.Next() {
		var tag string
		if err := rows.Scan(&tag); err != nil {
			rows.Close()
			return fmt.Errorf("lost checkpoint %d: %w", lc.ID, err)
		}
		if tagCheckpoint(tag) == lc.ID {
			lc.LostTags = append(lc.LostTags, tag)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lost checkpoint %d: %w", lc.ID, err)
	}
	sort.Strings(lc.LostTags)
	prev, err := scanCheckpoint(l.db.QueryRowContext(ctx, `SELECT `+checkpointCols+` FROM relay_checkpoints
		WHERE job = ? AND instance = ? AND checkpoint_id < ? ORDER BY checkpoint_id DESC LIMIT 1`, l.job, lc.Instance, lc.ID))
	if err == nil {
		lc.From = prev.Offsets
	} else {
		lc.From = partition.Offsets{}
	}
	return nil
}

// Range says, per partition, which offsets the lost checkpoint covered: "topic[p] from-to" (the
// start "?" when no earlier row of the instance is left).
func (lc LostCheckpoint) Range() string {
	var parts []string
	for t, ps := range lc.Offsets {
		for p, to := range ps {
			from := "?"
			if f, ok := lc.From.Get(t, p); ok {
				if f == to {
					continue
				}
				from = fmt.Sprint(f)
			}
			parts = append(parts, fmt.Sprintf("%s[%d] %s-%d", t, p, from, to-1))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "unknown offsets (the row was pruned before the loss was seen)"
	}
	return strings.Join(parts, ", ")
}

// tagCheckpoint is the checkpoint id a <job>-<checkpoint>-<subtask> tag names, or -1.
func tagCheckpoint(tag string) int64 {
	rest, _, ok := cutLast(tag)
	if !ok {
		return -1
	}
	_, id, ok := cutLast(rest)
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// Refusal is relay run's error for a job with unacknowledged lost checkpoints: each one, what it
// covered, and what to do.
func Refusal(lost []LostCheckpoint) error {
	var b strings.Builder
	for _, lc := range lost {
		tags := strings.Join(lc.LostTags, ",")
		ack := fmt.Sprintf("<job>-%d-<subtask>", lc.ID)
		if len(lc.LostTags) > 0 {
			ack = lc.LostTags[0]
		} else {
			tags = "unknown"
		}
		fmt.Fprintf(&b, "; checkpoint %d (decided %s UTC, %d records; branch %s rolled back by the server; offsets %s): "+
			"recount those records (relay verify), then acknowledge: relay txns resolve %s --acknowledge-lost --yes",
			lc.ID, lc.DecidedAt.Format("2006-01-02 15:04:05"), lc.Records, tags, lc.Range(), ack)
	}
	return fmt.Errorf("%w%s (docs/RUNBOOK.md, \"Branch rolled back by the server\")", ErrLossUnacknowledged, b.String())
}

// AcknowledgeLost moves lost checkpoint id to LOST_ACKED and records who did it; relay run starts
// again. It changes nothing and says so when the row is not LOST.
func (l *Ledger) AcknowledgeLost(ctx context.Context, id int64, tag, operator string) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("acknowledge %d: %w", id, err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, `UPDATE relay_checkpoints SET state = ? WHERE job = ? AND checkpoint_id = ? AND state = ?`,
		LostAcked, l.job, id, Lost)
	if err != nil {
		return fmt.Errorf("acknowledge %d: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("acknowledge %d: checkpoint is not LOST (acknowledged meanwhile?)", id)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO relay_audit (job, target, action, origin, operator, at, forced, detail)
		VALUES (?, ?, ?, 'manual', ?, UTC_TIMESTAMP(6), FALSE, ?)`, l.job, tag, AuditLostAcknowledged, operator,
		fmt.Sprintf("checkpoint %d: loss acknowledged; the job resumes after it", id)); err != nil {
		return fmt.Errorf("acknowledge %d: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("acknowledge %d: commit: %w", id, err)
	}
	return nil
}
