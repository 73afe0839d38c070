// Names of the crash points, one per step of the protocol where a death leaves a distinct state.

package crashpoint

const (
	AfterFlush      = "after-flush"      // rows written into an active branch: expect rollback
	AfterPrepare    = "after-prepare"    // all branches prepared, no decision: expect rollback
	AfterDecide     = "after-decide"     // ledger row durable, nothing committed: expect commit
	BetweenCommits  = "between-commits"  // first branch committed, others prepared: expect commit
	AfterCommit     = "after-commit"     // all committed, ledger still COMMITTING: expect commit
	RecoveryBetween = "recovery-between" // recovery resolved one branch of several: expect the rest resolved
	// HeldBeforeCommit: held mode's data, offsets and owner row written, COMMIT not sent: expect
	// the epoch gone (a test that freezes relay here and kills the server under the COMMIT gets an
	// outcome nobody knows, which the ledger decides)
	HeldBeforeCommit = "held-before-commit"
)

// All lists every crash point.
var All = []string{AfterFlush, AfterPrepare, AfterDecide, BetweenCommits, AfterCommit, RecoveryBetween, HeldBeforeCommit}
