// XA for operator commands (relay txns, relay preflight): listing every prepared transaction on the
// server, resolving one by hand, probing that XA works.
//
// Invariant: commit is the only package that speaks XA; operator commands list, probe and resolve
// through these functions, and read tags only through tag.go.

package commit

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/relay-sh/relay/internal/xa"
)

// PreparedTxn is one prepared XA transaction on the server: relay's (Relay: its tag split into Job,
// Checkpoint and Subtask) or another program's.
type PreparedTxn struct {
	Tag        string // the gtrid
	Relay      bool   // a relay-shaped tag of any job, with no branch qualifier
	Job        string
	Checkpoint int64
	Subtask    int
}

// ListPrepared lists every prepared XA transaction on db, of every job and program (XA RECOVER).
func ListPrepared(ctx context.Context, db *sql.DB) ([]PreparedTxn, error) {
	all, err := xa.ListPrepared(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make([]PreparedTxn, 0, len(all))
	for _, r := range all {
		p := PreparedTxn{Tag: r.GTRID}
		if job, c, s, ok := splitTag(r.GTRID); ok && r.BQual == "" {
			p.Relay, p.Job, p.Checkpoint, p.Subtask = true, job, c, s
		}
		out = append(out, p)
	}
	return out, nil
}

// splitTag reads a relay-shaped tag <job>-<checkpoint>-<subtask> of any job. Job names have no '-'.
func splitTag(tag string) (job string, checkpoint int64, subtask int, ok bool) {
	job, _, found := strings.Cut(tag, "-")
	if !found {
		return "", 0, 0, false
	}
	checkpoint, subtask, ok = ParseTag(job, tag)
	return job, checkpoint, subtask, ok
}

// ErrRolledBack is the server's answer to committing a branch that is gone, rolled back (MariaDB
// answers so for a prepared branch that wrote nothing).
var ErrRolledBack = xa.ErrRolledBack

// ResolveByHand commits or rolls back the prepared branch tag from a connection other than its own
// (relay txns resolve): the operator's verdict, checked against the ledger by the caller.
func ResolveByHand(ctx context.Context, db *sql.DB, tag string, commit bool) error {
	return xa.Resolve(ctx, db, tag, commit)
}

// Probe runs stmt in an XA branch tagged tag on a connection of its own, prepares the branch and
// rolls it back: that the server and relay's user can do what a checkpoint does.
func Probe(ctx context.Context, db *sql.DB, tag, stmt string) error {
	b, err := xa.NewBranch(ctx, db)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Start(ctx, tag); err != nil {
		return err
	}
	if err := b.Exec(ctx, stmt); err != nil {
		return err
	}
	if err := b.Prepare(ctx); err != nil {
		return err
	}
	if err := b.Rollback(ctx); err != nil {
		return fmt.Errorf("%w (probe branch %s may be left prepared: relay txns resolve %s --rollback)", err, tag, tag)
	}
	return nil
}
