// The commit protocol: what differs between XA mode and held mode, behind one interface.
//
// Invariant: the mode is chosen once, in New; nothing outside its two implementations (xa.go,
// held.go) asks which one runs. The consume loop, the session and the subtasks call the protocol
// where the modes differ, and the coordinator drives either through the same phases.

package commit

import (
	"context"
	"database/sql"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
)

// Deps are the opened resources the protocol runs on.
type Deps struct {
	Ledger  *ledger.Ledger
	Sink    *sql.DB
	Log     *zap.Logger
	Metrics *metrics.Metrics
}

// Settings are the protocol's configuration (config.Config.Commit derives them).
type Settings struct {
	Job               string        // job.name: the tags' prefix
	BatchRows         int           // rows per statement
	LockWait          time.Duration // mysql.lock_wait_timeout: a statement waiting a fifth of it has its blockers logged
	CheckpointTimeout time.Duration // of each phase, and of a refused statement's probe
	ResolveInterval   time.Duration // between two resolver passes
	InDoubtAlertAge   time.Duration // an in-doubt branch older than this is logged
	// ForgetMembersAfter is job.forget_members_after: how long after its lease ran out a stopped
	// group member's rows are deleted by the resolver.
	ForgetMembersAfter time.Duration
}

// Protocol is one way of making each epoch's writes durable exactly once.
type Protocol interface {
	// Recover finishes what earlier runs left (what is in doubt is the mode's to say) before a
	// session starts, and returns where it resumes: the offsets the ledger holds (recovery.go).
	Recover(ctx context.Context, fence *ledger.Fence) (Recovered, partition.Offsets, error)
	// PartitionAffine reports whether each partition's records stay on one subtask (partition mod
	// subtasks), whose transaction commits their offsets with their rows. Such subtasks share
	// aggregate keys: the fold gives each record only its owner's tables and flushes them only at
	// the barrier.
	PartitionAffine() bool
	// newParticipant opens a subtask's transaction on a connection of its own. Unexported: only a
	// Subtask opens one, and only its goroutine uses it.
	newParticipant(ctx context.Context, db *sql.DB) (Participant, error)
	// BarrierOffsets are the offsets subtask i (of n) writes with its rows at the barrier of a
	// checkpoint cut at cut, decided being the offsets of the last decision. A subtask given
	// offsets opens a transaction for them even when it wrote no rows, and its vote commits them;
	// XA mode returns none, since its decision row carries every partition's offsets.
	BarrierOffsets(decided, cut partition.Offsets, i, n int) partition.Offsets
	// Complete finishes a checkpoint past its barrier through c.
	Complete(ctx context.Context, c *Coordinator, cp *Pending) error
	// leftBehind lists the prepared transactions of job's earlier sessions, which the resolver
	// settles from the ledger's verdict: XA mode's branches (XA RECOVER). Held mode leaves none
	// (the server rolls an open transaction back with its connection) and asks the server nothing.
	leftBehind(ctx context.Context, job string) ([]Branch, error)
}

// New is the one place the mode is read.
func New(mode Mode, d Deps) Protocol {
	if mode == ModeHeld {
		return heldProtocol{d: d}
	}
	return xaProtocol{d: d}
}
