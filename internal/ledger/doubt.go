// In-doubt record: since when each prepared branch of the job has been known to be left behind.
//
// Invariant: XA RECOVER tells no age, so a branch's first_seen_at is the server time a relay
// process first listed it as left behind (recovery, or a resolver pass) and it is never moved
// later, across restarts and instances; a row lives no longer than its branch: every resolver pass
// drops the rows of tags XA RECOVER no longer lists. Ages are measured on the ledger server's clock.

package ledger

import (
	"context"
	"fmt"
	"time"
)

const inDoubtTable = `CREATE TABLE IF NOT EXISTS relay_in_doubt (
	job VARCHAR(64) NOT NULL,
	tag VARCHAR(64) NOT NULL,
	checkpoint_id BIGINT NOT NULL,
	first_seen_at DATETIME(6) NOT NULL,
	PRIMARY KEY (job, tag)
) ENGINE=InnoDB`

// NoteInDoubt records now as the first sighting of each branch (tag → checkpoint id) that has no
// record yet.
func (l *Ledger) NoteInDoubt(ctx context.Context, branches map[string]int64) error {
	if len(branches) == 0 {
		return nil
	}
	args := make([]any, 0, 3*len(branches))
	for tag, id := range branches {
		args = append(args, l.job, tag, id)
	}
	_, err := l.db.ExecContext(ctx, `INSERT IGNORE INTO relay_in_doubt (job, tag, checkpoint_id, first_seen_at) VALUES `+
		repeatJoin("(?, ?, ?, UTC_TIMESTAMP(6))", len(branches)), args...)
	if err != nil {
		return fmt.Errorf("note in-doubt branches: %w", err)
	}
	return nil
}

// InDoubtAges notes the branches in doubt (tag → checkpoint id), forgets the records of tags that
// listed (every tag of the job XA RECOVER shows) no longer holds, and returns how long each branch
// in doubt has been: since its checkpoint's decision when the ledger has one (a decided branch was
// prepared before it), else since its first sighting.
func (l *Ledger) InDoubtAges(ctx context.Context, doubt map[string]int64, listed []string) (map[string]time.Duration, error) {
	if err := l.NoteInDoubt(ctx, doubt); err != nil {
		return nil, err
	}
	forget := `DELETE FROM relay_in_doubt WHERE job = ?`
	args := []any{l.job}
	if len(listed) > 0 {
		forget += ` AND tag NOT IN (` + placeholders(len(listed)) + `)`
		for _, t := range listed {
			args = append(args, t)
		}
	}
	if _, err := l.db.ExecContext(ctx, forget, args...); err != nil {
		return nil, fmt.Errorf("forget resolved in-doubt branches: %w", err)
	}
	ages := map[string]time.Duration{}
	if len(doubt) == 0 {
		return ages, nil
	}
	args = []any{l.job}
	for tag := range doubt {
		args = append(args, tag)
	}
	rows, err := l.db.QueryContext(ctx, `SELECT d.tag, TIMESTAMPDIFF(MICROSECOND,
			LEAST(d.first_seen_at, COALESCE(c.decided_at, d.first_seen_at)), UTC_TIMESTAMP(6))
		FROM relay_in_doubt d LEFT JOIN relay_checkpoints c ON c.job = d.job AND c.checkpoint_id = d.checkpoint_id
		WHERE d.job = ? AND d.tag IN (`+placeholders(len(doubt))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("in-doubt ages: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var tag string
		var us int64
		if err := rows.Scan(&tag, &us); err != nil {
			return nil, fmt.Errorf("in-doubt ages: %w", err)
		}
		ages[tag] = time.Duration(max(us, 0)) * time.Microsecond
	}
	return ages, rows.Err()
}
