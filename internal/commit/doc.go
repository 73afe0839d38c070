// Package commit is relay's commit protocol: how the rows of one checkpoint epoch become visible in
// MySQL exactly once, together with the Kafka offsets they cover (docs/PROTOCOL.md).
//
// Invariants:
//   - Data becomes visible only with the offsets it covers. XA mode: each subtask's rows are one XA
//     branch, prepared at the barrier; the COMMIT of the checkpoint's ledger row is the commit
//     point, written only after every branch prepared; branches commit only after it. Held mode:
//     each subtask's COMMIT carries its own partitions' offsets and is the decision for them.
//   - Who decides: the coordinator, as the owner of the job's fence, and only before the fence's
//     lease deadline (held: each subtask, under its session's owner epoch, before that deadline).
//   - Recovery acts on the ledger's verdict alone: a branch is committed only when its checkpoint
//     has a ledger row, rolled back only when it has none; the resolver does the same later for
//     branches recovery could not reach, never touching the live session's.
//   - Checkpoint ids only grow, above every id in the ledger and XA RECOVER: a tag is never reused.
//
// Files, top to bottom: tag.go (the tag format), mode.go (the modes), protocol.go (Protocol, New,
// Deps, Settings), participant.go (one subtask's transaction), xa.go and held.go (its two
// implementations), subtask.go (the sink writer's goroutine: batches, barrier, decision), write.go
// (its rows), coordinator.go (barrier replies, the decision, the commits), recovery.go (at every
// start), resolver.go (periodically).
package commit
