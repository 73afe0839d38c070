// Status's report for people. Invariant: it renders a StatusReport as it stands (the JSON is the
// operator interface); it reads no database and no topic.

package ops

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText renders the report for people.
func (r *StatusReport) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "job\t%s (mode %s)\n", r.Job, r.Mode)
	fmt.Fprintf(tw, "server\t%s\n", r.Server)
	for _, f := range r.Fences {
		fmt.Fprintf(tw, "fence %s\t%s: %s\n", f.Instance, f.runState(), f.Holder)
		if f.AcquiredAt != nil {
			fmt.Fprintf(tw, "  last owner\t%s, owner epoch %d, since %s\n", f.Owner, f.OwnerEpoch, f.AcquiredAt.Format(time.RFC3339))
		}
		if f.LeaseUntil != nil {
			fmt.Fprintf(tw, "  lease\t%s\n", f.leaseState(r.ServerTime))
		}
		if f.ReadyzURL != "" {
			fmt.Fprintf(tw, "  readiness asked at\t%s\n", f.ReadyzURL)
		}
	}
	if c := r.LastCheckpoint; c != nil {
		fmt.Fprintf(tw, "last checkpoint\t%d %s, decided %s (%s ago), %d records\n", c.ID, c.State,
			c.DecidedAt.Format(time.RFC3339), ageString(c.AgeSeconds), c.Records)
	} else {
		fmt.Fprintf(tw, "last checkpoint\tnone (the job has not committed a checkpoint)\n")
	}
	if r.Group != nil {
		r.Group.writeText(tw)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSET\tHIGH WATERMARK\tLAG\tWAITING")
	for _, p := range r.Partitions {
		off, lag, waiting := "-", "-", "-"
		if p.Offset != nil {
			off = fmt.Sprint(*p.Offset)
		}
		if p.Lag != nil {
			lag = fmt.Sprint(*p.Lag)
		}
		if p.OutOfRange != nil {
			lag = "OUT OF RANGE"
		}
		if p.Waiting != nil {
			waiting = fmt.Sprint(*p.Waiting)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", p.Topic, p.Partition, off, p.HighWatermark, lag, waiting)
	}
	fmt.Fprintf(tw, "(lag: offsets up to the high watermark, transaction markers and aborted records included; waiting: committed records among them, counted when lag <= %d)\n", countLimit)
	for _, p := range r.Partitions {
		if p.OutOfRange != nil {
			fmt.Fprintf(tw, "OUT OF RANGE\t%s\n", *p.OutOfRange)
		}
	}
	fmt.Fprintln(tw)
	if len(r.Branches) == 0 {
		fmt.Fprintln(tw, "prepared branches\tnone")
	} else {
		fmt.Fprintf(tw, "prepared branches\t%d (XA RECOVER)\n", len(r.Branches))
		writeTxns(tw, r.Branches)
	}
	if len(r.Committing) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "COMMITTING CHECKPOINT\tDECIDED\tAGE\tTAGS")
		for _, c := range r.Committing {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", c.ID, c.DecidedAt.Format(time.RFC3339), ageString(c.AgeSeconds), strings.Join(c.Tags, ","))
		}
	}
	writeLost(tw, r.Lost)
	if len(r.ManualActions) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "MANUAL ACTION\tTARGET\tAT\tOPERATOR\tFORCED")
		for _, a := range r.ManualActions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", a.Action, a.Target, a.At.Format(time.RFC3339), a.Operator, a.Forced)
		}
	}
	return tw.Flush()
}

// leaseState says when the lease runs out, on the server's clock (now).
func (f InstanceFence) leaseState(now time.Time) string {
	until := f.LeaseUntil.Format("2006-01-02T15:04:05.000Z07:00")
	if *f.LeaseExpired {
		return fmt.Sprintf("EXPIRED %s ago (until %s): the holder stopped renewing; a relay run takes the fence over", ageString(ageSeconds(now, *f.LeaseUntil)), until)
	}
	left := time.Duration(*f.LeaseRemainingSeconds * float64(time.Second)).Round(100 * time.Millisecond)
	return fmt.Sprintf("renewed, runs %s more (until %s, server clock)", left, until)
}

// runState says "running" only when /readyz said 200, as a readiness probe would.
func (f InstanceFence) runState() string { return runState(f.Held, f.Ready, "fence held", f.Readiness) }

// runState says how a process holding its lock (held; what it holds) is, by its /readyz answer
// (ready, why).
func runState(held bool, ready *bool, what, why string) string {
	switch {
	case !held:
		return "not running"
	case ready == nil:
		return what + ", readiness unknown (" + why + ")"
	case *ready:
		return "running, ready"
	}
	return "NOT READY (" + why + ")"
}

func ageString(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}

// writeTxns renders branches as table rows.
func writeTxns(w io.Writer, txns []Txn) {
	fmt.Fprintln(w, "TAG\tJOB\tKIND\tCHECKPOINT\tSUBTASK\tLEDGER\tVERDICT\tAGE\tSTATE")
	for _, t := range txns {
		state := t.LedgerState
		if state == "" {
			state = "no row"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", t.Tag, t.Job, t.Kind, t.Checkpoint, t.Subtask, state, t.Verdict, t.Age(), t.StateText())
	}
}

// writeLost lists the job's unacknowledged lost checkpoints and what to do about them.
func writeLost(w io.Writer, lost []LostInfo) {
	if len(lost) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "LOST CHECKPOINT\tDECIDED\tRECORDS\tBRANCH ROLLED BACK\tOFFSETS")
	for _, c := range lost {
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\n", c.ID, c.DecidedAt.Format(time.RFC3339), c.Records, strings.Join(c.LostTags, ","), c.Offsets)
	}
	fmt.Fprintln(w, "(rows lost: relay run refuses to start; recount, then relay txns resolve <tag> --acknowledge-lost; docs/RUNBOOK.md, \"Branch rolled back by the server\")")
}

// writeText renders the group, as a section of its own: Kafka's view, one row per member, the
// unowned partitions and the newest stale members.
func (g *GroupStatus) writeText(w io.Writer) {
	fmt.Fprintln(w)
	if g.KafkaMembers != nil {
		fmt.Fprintf(w, "consumer group %s: %s in Kafka, members %d, assignor %s\n", g.GroupID, g.State, *g.KafkaMembers, g.Assignor)
	} else {
		fmt.Fprintf(w, "consumer group %s: %s (%s)\n", g.GroupID, g.State, g.KafkaError)
	}
	if len(g.Members) == 0 {
		fmt.Fprintln(w, "no member running")
	} else {
		fmt.Fprintln(w, "MEMBER\tHOST\tSTATE\tOWNER EPOCH\tPARTITIONS (OWNER EPOCH)\tLAST CHECKPOINT\tLAG")
	}
	for _, m := range g.Members {
		live := runState(m.Live, m.Ready, "lock held", m.Readiness)
		if !m.Live && m.LeaseRemainingSeconds != nil {
			live += " (lock free; lease runs " + ageString(*m.LeaseRemainingSeconds) + " more)"
		}
		last, lag := "none", "-"
		if c := m.LastCheckpoint; c != nil {
			last = fmt.Sprintf("%d, %s ago", c.ID, ageString(c.AgeSeconds))
		}
		if m.Lag != nil {
			lag = fmt.Sprint(*m.Lag)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Host, live, m.OwnerEpoch, partitionList(m.Partitions, false), last, lag)
	}
	if len(g.Unowned) > 0 {
		fmt.Fprintf(w, "UNOWNED partitions (their last owner does not run; the group hands them to a live member): %s\n", partitionList(g.Unowned, true))
	}
	if g.StaleCount > 0 {
		fmt.Fprintf(w, "stale members (lock free, lease run out): %d, the oldest stopped %s ago (a live member's resolver deletes their rows %s after that; relay membership forget now), the newest %d:\n",
			g.StaleCount, ageString(*g.StaleOldestSeconds), g.ForgetMembersAfter, len(g.Stale))
		for _, m := range g.Stale {
			fmt.Fprintf(w, "  %s\t%s\towner epoch %d\tsince %s\tstopped %s ago\n", m.ID, m.Host, m.OwnerEpoch, m.AcquiredAt.Format(time.RFC3339), ageString(*m.StoppedSeconds))
		}
	}
	if g.ForgottenCount > 0 {
		fmt.Fprintf(w, "forgotten members (rows deleted; only the relay_jobs row keeps each id's owner epoch): %d\n", g.ForgottenCount)
	}
}

// partitionList renders partitions as topic[p]@owner_epoch (with the member, when asked).
func partitionList(ps []MemberPartition, member bool) string {
	if len(ps) == 0 {
		return "none"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%s[%d]@%d", p.Topic, p.Partition, p.OwnerEpoch)
		if member {
			out[i] += " of " + p.Member
		}
	}
	return strings.Join(out, " ")
}
