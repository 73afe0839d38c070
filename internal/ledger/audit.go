// Audit: the record of what operators did by hand to a job's branches, resume offsets and tables.
//
// Invariant: every manual action that changed a branch, the resume offsets or the recorded table
// meanings has exactly one row, written after the action succeeded; a running relay claims each
// commit or rollback row once (the counted flag flips under a row lock), so
// relay_transactions_total{origin="manual"} also covers actions taken while relay was stopped, and
// no action is counted twice across restarts.

package ledger

import (
	"context"
	"fmt"
	"time"
)

// Manual actions recorded in relay_audit.
const (
	AuditCommit        = "commit"         // a prepared branch committed by hand
	AuditRollback      = "rollback"       // a prepared branch rolled back by hand
	AuditOffsetsReset  = "offsets_reset"  // resume offsets replaced by a new checkpoint row
	AuditSpecAccept    = "spec_accept"    // tables added to or removed from the recorded meanings
	AuditLayoutSwitch  = "layout_switch"  // the job moved between instances and a consumer group
	AuditForgetMembers = "forget_members" // stopped group members' lease and owner rows deleted
)

// auditTable holds one row per manual action. target is the transaction tag, or "offsets".
const auditTable = `CREATE TABLE IF NOT EXISTS relay_audit (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	job VARCHAR(64) NOT NULL,
	target VARCHAR(255) NOT NULL,
	action VARCHAR(32) NOT NULL,
	origin VARCHAR(16) NOT NULL,
	operator VARCHAR(255) NOT NULL,
	at DATETIME(6) NOT NULL,
	forced BOOLEAN NOT NULL,
	detail TEXT NOT NULL,
	counted BOOLEAN NOT NULL DEFAULT FALSE,
	KEY job_counted_idx (job, counted)
) ENGINE=InnoDB`

// AuditEntry is one manual action.
type AuditEntry struct {
	ID       int64     `json:"id"`
	Job      string    `json:"job"`
	Target   string    `json:"target"`
	Action   string    `json:"action"`
	Origin   string    `json:"origin"`
	Operator string    `json:"operator"`
	At       time.Time `json:"at"`
	Forced   bool      `json:"forced"`
	Detail   string    `json:"detail"`
}

// Audit records a manual action on this ledger's job; origin is always "manual".
func (l *Ledger) Audit(ctx context.Context, target, action, operator string, forced bool, detail string) error {
	if _, err := l.db.ExecContext(ctx, `INSERT INTO relay_audit (job, target, action, origin, operator, at, forced, detail)
		VALUES (?, ?, ?, 'manual', ?, UTC_TIMESTAMP(6), ?, ?)`, l.job, target, action, operator, forced, detail); err != nil {
		return fmt.Errorf("audit %s %s: %w", action, target, err)
	}
	return nil
}

// AuditLog returns the job's newest n manual actions, newest first.
func (l *Ledger) AuditLog(ctx context.Context, n int) ([]AuditEntry, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT id, job, target, action, origin, operator, at, forced, detail
		FROM relay_audit WHERE job = ? ORDER BY id DESC LIMIT ?`, l.job, n)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var a AuditEntry
		if err := rows.Scan(&a.ID, &a.Job, &a.Target, &a.Action, &a.Origin, &a.Operator, &a.At, &a.Forced, &a.Detail); err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// ClaimManualResolves marks the job's not yet counted manual commits and rollbacks as counted and
// returns how many of each there were, for relay_transactions_total{origin="manual"}. The rows are
// locked while they are claimed, so two processes never count the same action.
func (l *Ledger) ClaimManualResolves(ctx context.Context) (map[string]int, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim manual resolves: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `SELECT id, action FROM relay_audit
		WHERE job = ? AND counted = FALSE AND action IN (?, ?) FOR UPDATE`, l.job, AuditCommit, AuditRollback)
	if err != nil {
		return nil, fmt.Errorf("claim manual resolves: %w", err)
	}
	out := map[string]int{}
	var ids []any
	for rows.Next() {
		var id int64
		var action string
		if err := rows.Scan(&id, &action); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim manual resolves: %w", err)
		}
		out[action]++
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim manual resolves: %w", err)
	}
	if len(ids) == 0 {
		return out, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE relay_audit SET counted = TRUE WHERE id IN (`+placeholders(len(ids))+`)`, ids...); err != nil {
		return nil, fmt.Errorf("claim manual resolves: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("claim manual resolves: commit: %w", err)
	}
	return out, nil
}
