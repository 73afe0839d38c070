// Status: one job's fence, last decision, per-partition lag and prepared branches, as one report.
//
// Invariant: gathering status changes nothing and locks nothing (no locking reads, no fence), so it
// is safe to run as often as an operator or a monitor likes, while relay runs. "Running" means what
// a readiness probe means by it: the fence is held and that process's /readyz answers 200; the lock
// alone only says a process exists (it may be recovering, or stuck with an old checkpoint). The
// /readyz asked is the one the current owner epoch recorded with its lease, so after a takeover it
// is the new owner's. Every time and age is the ledger server's clock, read after the rows it is
// compared with, so no age is negative.

package ops

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// StatusReport is `relay status`; its JSON field names are part of the operator interface.
type StatusReport struct {
	Job  string `json:"job"`
	Mode string `json:"mode"`
	// Server is what the sink server is: "not a Galera node", or the Galera node and its
	// cluster's state (a node outside the primary component refuses relay's queries).
	Server string          `json:"server"`
	Fences []InstanceFence `json:"fences"` // one per instance (docs/PROTOCOL.md, "Several instances"); none for a group
	// Group is the job's consumer group and its members when the job runs as one (membership
	// group: the ledger's layout is ledger.LayoutGroup); null otherwise.
	Group          *GroupStatus     `json:"group"`
	LastCheckpoint *CheckpointInfo  `json:"last_checkpoint"` // null: the job never decided a checkpoint
	Partitions     []PartitionLag   `json:"partitions"`
	Branches       []Txn            `json:"branches"`
	Committing     []CheckpointInfo `json:"committing"`
	// Lost: decided checkpoints a listed branch of which the server rolled back, not yet
	// acknowledged; relay run refuses to start while there is one.
	Lost          []LostInfo          `json:"lost"`
	ManualActions []ledger.AuditEntry `json:"manual_actions"` // newest first, at most 5
	ServerTime    time.Time           `json:"server_time"`    // the ledger server's clock, read after everything else
}

// InstanceFence says whether a process holds one instance of the job, and who took it last.
type InstanceFence struct {
	Instance   string     `json:"instance"` // the job, or job/i when it runs as several instances
	Held       bool       `json:"held"`
	Holder     string     `json:"holder"` // ledger.Holder's description
	Owner      string     `json:"owner"`  // last owner recorded in relay_jobs ("" when none)
	OwnerEpoch int64      `json:"owner_epoch"`
	AcquiredAt *time.Time `json:"acquired_at"`
	// Ready is the answer of the holder's /readyz (true: 200): null when nobody holds the fence or
	// when it was not asked (no address known) or did not answer. Readiness says why, in /readyz's
	// own words or the error.
	Ready     *bool  `json:"ready"`
	Readiness string `json:"readiness"`
	// ReadyzURL is the /readyz status asked ("" when none): --readyz, else the one the current
	// owner epoch recorded with its lease, else (for the configured instance) http_addr on this host.
	ReadyzURL string `json:"readyz_url"`
	// The lease of the current owner epoch, on the ledger server's clock (all null when nobody
	// holds the fence or its owner has no lease): when it runs out, how long it still runs (0 once
	// expired) and whether it expired, i.e. the holder stopped renewing (a relay run takes over).
	LeaseUntil            *time.Time `json:"lease_until"`
	LeaseRemainingSeconds *float64   `json:"lease_remaining_seconds"`
	LeaseExpired          *bool      `json:"lease_expired"`
}

// CheckpointInfo is one ledger row, summarised.
type CheckpointInfo struct {
	ID          int64      `json:"id"`
	State       string     `json:"state"`
	DecidedAt   time.Time  `json:"decided_at"`
	CommittedAt *time.Time `json:"committed_at"`
	AgeSeconds  float64    `json:"age_seconds"` // since decided_at, on the ledger server's clock
	Records     int64      `json:"records"`
	Tags        []string   `json:"tags"`
}

// PartitionLag is one partition's resume offset against its high watermark.
type PartitionLag struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	Offset        *int64 `json:"offset"` // next offset relay reads; null: not in the ledger yet (start_offset applies)
	HighWatermark int64  `json:"high_watermark"`
	Lag           *int64 `json:"lag"` // high_watermark - offset; null when offset is
	// Waiting counts the committed records between offset and high_watermark, read with
	// read_committed: lag also counts transaction markers and aborted records, which relay never
	// receives, so a caught-up job can show lag > 0 but waiting 0. Null when not counted (lag
	// over countLimit, or the read did not reach the high watermark in time).
	Waiting *int64 `json:"waiting"`
	// OutOfRange says why offset lies outside the partition's offsets (recreated or truncated
	// topic, records deleted unread) and what to do; relay run refuses to start then. Lag and
	// waiting are null: there is no honest number. Null when the offset is in range.
	OutOfRange *string `json:"out_of_range"`
}

// checkpointInfo summarises c; its age is set once the report's clock is read (withAges).
func checkpointInfo(c ledger.Checkpoint) CheckpointInfo {
	return CheckpointInfo{ID: c.ID, State: string(c.State), DecidedAt: c.DecidedAt, CommittedAt: c.CommittedAt,
		Records: c.Records, Tags: c.Tags}
}

// Status gathers the report. readyz overrides the /readyz URL asked for the configured instance
// ("": the one its owner recorded, else http_addr of the configuration on this host).
func Status(ctx context.Context, e *Env, readyz string) (*StatusReport, error) {
	led := e.Ledger
	r := &StatusReport{Job: led.Job(), Mode: string(e.Config.Mode), Server: e.Galera.String(), Partitions: []PartitionLag{}, Branches: []Txn{},
		Committing: []CheckpointInfo{}}
	layout, err := led.Layout(ctx)
	if err != nil {
		return nil, err
	}
	if r.Fences, err = fences(ctx, led, layout); err != nil {
		return nil, err
	}
	for i := range r.Fences {
		f := &r.Fences[i]
		if f.Instance == led.Key() {
			switch {
			case readyz != "":
				f.ReadyzURL = readyz
			case f.ReadyzURL == "":
				f.ReadyzURL = ReadyzURL(e.Config.HTTPAddr)
			}
		}
		askReadiness(ctx, f)
	}
	decided, err := e.lastCommit(ctx, r)
	if err != nil {
		return nil, err
	}
	if r.Partitions, err = e.lags(ctx, decided); err != nil {
		return nil, err
	}
	if layout == ledger.LayoutGroup {
		if r.Group, err = e.group(ctx, r.Partitions); err != nil {
			return nil, err
		}
	}
	branches, err := commit.JobBranches(ctx, e.Sink, led.Job())
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(branches))
	for i, b := range branches {
		ids[i] = b.Checkpoint
	}
	rows, err := led.Lookup(ctx, ids)
	if err != nil {
		return nil, err
	}
	committing, err := led.Committing(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range committing {
		r.Committing = append(r.Committing, checkpointInfo(c))
	}
	if r.Lost, err = lostInfo(ctx, led); err != nil {
		return nil, err
	}
	if r.ManualActions, err = led.AuditLog(ctx, 5); err != nil {
		return nil, err
	}
	// The clock is read last: every decided_at above was written before it.
	if r.ServerTime, err = ledger.ServerNow(ctx, led.DB()); err != nil {
		return nil, err
	}
	for _, b := range branches {
		t := Txn{Tag: b.Tag, Job: led.Job(), Kind: KindJob, Checkpoint: b.Checkpoint, Subtask: b.Subtask, Verdict: VerdictRollback}
		if c, ok := rows[b.Checkpoint]; ok {
			t.withDecision(c, r.ServerTime)
		}
		r.Branches = append(r.Branches, t)
	}
	if err := e.classify(ctx, r.Branches); err != nil {
		return nil, err
	}
	r.withAges()
	return r, nil
}

// withAges sets the checkpoints' ages against the report's clock.
func (r *StatusReport) withAges() {
	if c := r.LastCheckpoint; c != nil {
		c.AgeSeconds = ageSeconds(r.ServerTime, c.DecidedAt)
	}
	for i := range r.Committing {
		r.Committing[i].AgeSeconds = ageSeconds(r.ServerTime, r.Committing[i].DecidedAt)
	}
	if r.Group != nil {
		r.Group.withAges(r.ServerTime)
	}
}

// fences reports every instance of the job's layout m (none for a group, whose members status
// reports instead).
func fences(ctx context.Context, led *ledger.Ledger, m int) ([]InstanceFence, error) {
	var err error
	out := make([]InstanceFence, m)
	for i := range out {
		il := ledger.NewInstance(led.DB(), led.Job(), i, m)
		f := InstanceFence{Instance: il.Key(), Holder: ledger.Holder(ctx, il)}
		if f.Held, err = ledger.IsHeld(ctx, il); err != nil {
			return nil, fmt.Errorf("fence %s: %w", il.Key(), err)
		}
		o, err := il.Owner(ctx)
		if err != nil {
			return nil, err
		}
		if o != nil {
			f.Owner, f.OwnerEpoch, f.AcquiredAt = o.Owner, o.Epoch, &o.AcquiredAt
		}
		lease, err := il.Lease(ctx)
		if err != nil {
			return nil, err
		}
		// A lease only means something while its owner holds the lock: a released or dead owner's
		// row may still run, but nobody owns the job.
		if lease != nil && f.Held {
			until, left, expired := lease.Until, max(lease.Remaining.Seconds(), 0), lease.Remaining <= 0
			f.LeaseUntil, f.LeaseRemainingSeconds, f.LeaseExpired = &until, &left, &expired
			f.ReadyzURL = localReadyz(lease.Readyz)
		}
		out[i] = f
	}
	return out, nil
}

// ReadyzURL is where a relay configured with httpAddr (relay's http_addr) answers /readyz when it
// runs on this host: a wildcard or empty host means loopback. "" when the port is chosen at start
// (0), so nobody can know it.
func ReadyzURL(httpAddr string) string { return AdvertisedReadyz(httpAddr, "127.0.0.1") }

// AdvertisedReadyz is the /readyz URL a relay bound at addr (its listener's address) records with
// its lease, for relay status on any host: a wildcard host becomes this host's name.
func AdvertisedReadyz(addr, hostname string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = hostname
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz"
}

// localReadyz is a recorded /readyz URL as status asks it: one naming this host asks loopback
// (a host's own name need not resolve inside a container).
func localReadyz(recorded string) string {
	u, err := url.Parse(recorded)
	if err != nil || recorded == "" {
		return recorded
	}
	if name, err := os.Hostname(); err == nil && strings.EqualFold(u.Hostname(), name) {
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	}
	return u.String()
}

// askReadiness fills in f's readiness from f.ReadyzURL, only while some process holds its fence.
func askReadiness(ctx context.Context, f *InstanceFence) {
	switch {
	case !f.Held:
		f.Readiness = "not running"
		f.ReadyzURL = ""
	case f.ReadyzURL == "":
		f.Readiness = "not asked: its owner recorded no /readyz address (an operator command, or a relay older than this one) and this configuration names none; pass --readyz"
	default:
		f.Ready, f.Readiness = askReadyz(ctx, f.ReadyzURL)
	}
}

// askReadyz asks readyz: ready is null when it did not answer, and why says what it answered (its
// body) or why not.
func askReadyz(ctx context.Context, readyz string) (ready *bool, why string) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
	if err != nil {
		return nil, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Sprintf("no answer from %s: %v", readyz, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	ok := resp.StatusCode == http.StatusOK
	return &ok, strings.TrimSpace(string(body))
}

// lastCommit fills in the last checkpoint and returns the offsets the job resumes from (each
// partition's row, committed with the decision or the data that covers it). In held mode, which
// writes no checkpoint rows, the last checkpoint is the newest of those offset rows.
func (e *Env) lastCommit(ctx context.Context, r *StatusReport) (partition.Offsets, error) {
	led := e.Ledger
	offs, id, err := led.PartitionOffsets(ctx)
	if err != nil {
		return nil, err
	}
	if e.Config.Mode == commit.ModeHeld {
		if id == 0 {
			return offs, nil
		}
		at, err := led.OffsetsCommittedAt(ctx)
		if err != nil {
			return nil, err
		}
		info := checkpointInfo(ledger.Checkpoint{ID: id, State: ledger.Committed, DecidedAt: at, CommittedAt: &at})
		r.LastCheckpoint = &info
		return offs, nil
	}
	last, err := led.LastDecided(ctx)
	if err != nil || last == nil {
		return offs, err
	}
	info := checkpointInfo(*last)
	r.LastCheckpoint = &info
	return offs, nil
}

// LostInfo is a LOST checkpoint (ledger.LostCheckpoint) for status and txns list.
type LostInfo struct {
	ID        int64     `json:"id"`
	DecidedAt time.Time `json:"decided_at"`
	Records   int64     `json:"records"`
	Tags      []string  `json:"tags"`      // every branch the decision lists
	LostTags  []string  `json:"lost_tags"` // those the server rolled back (relay_audit)
	Offsets   string    `json:"offsets"`   // the offsets the checkpoint covered: "topic[p] from-to, ..."
}

// lostInfo lists the job's unacknowledged lost checkpoints, never nil.
func lostInfo(ctx context.Context, led *ledger.Ledger) ([]LostInfo, error) {
	lost, err := led.Lost(ctx)
	if err != nil {
		return nil, err
	}
	out := []LostInfo{}
	for _, c := range lost {
		out = append(out, LostInfo{ID: c.ID, DecidedAt: c.DecidedAt, Records: c.Records, Tags: c.Tags, LostTags: c.LostTags, Offsets: c.Range()})
	}
	return out, nil
}
