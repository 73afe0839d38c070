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
// Three numbers are called epochs, and are not interchangeable:
//   - a checkpoint id (Work.Epoch, ledger.Checkpoint.ID, the <c> of an XA tag): which cut of the
//     input a row belongs to; it only grows, within a job.
//   - an owner epoch (ledger.Fence.Epoch): the generation of the process (or member) that holds the
//     job's fence, one more at each take; a decision names it and counts only while it is current.
//   - a partition's epoch (partition.Epoch, held in partition.Claims, from ledger.TakePartitions):
//     one more each time a group member takes that partition; a member's decision counts for it
//     only at the epoch it took it at. Its own type, so offsets cannot pass for claims.
//
// Files, top to bottom: tag.go (the tag format), mode.go (the modes), protocol.go (Protocol, New,
// Deps, Settings), participant.go (one subtask's transaction), xa.go and held.go (its two
// implementations), subtask.go (the sink writer's goroutine: batches, barrier, decision), write.go
// (its rows), coordinator.go (barrier replies, the decision, the commits), recovery.go (at every
// start), resolver.go (periodically), operator.go (XA for operator commands: list, resolve by hand,
// probe; no other package speaks XA).
package commit
