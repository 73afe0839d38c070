// The protocol's modes.
//
// Invariant: the mode is fixed before a pipeline starts (config resolves ModeAuto once the server
// is known); at run time it is read in one place, New (protocol.go), and nothing else in this
// package asks which mode runs. (The operator commands read it to say what a job's tables hold.)

package commit

// Mode selects the commit protocol.
type Mode string

const (
	// ModeXA commits each epoch through MySQL XA, with the ledger row as the decision (docs/PROTOCOL.md, "The epoch, end to end").
	ModeXA Mode = "xa"
	// ModeHeld commits each epoch as one ordinary transaction per subtask (docs/PROTOCOL.md, "Held mode").
	ModeHeld Mode = "held"
	// ModeAuto (mode unset, the default) is xa, or held on a Galera node, which has no XA:
	// ResolveMode picks one once the server is known.
	ModeAuto Mode = ""
)
