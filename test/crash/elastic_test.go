// Elastic membership (issue 26): the members of a job run as a consumer group (membership group)
// join, leave, die and freeze while orders flow into 16 partitions, and the job stays exactly once.
//
// Invariant checked here, besides the end state of every crash test (exact totals, no branch left,
// offsets at the end): no partition is decided by two members. A watcher reads each partition's
// owner row and offset row together (one statement, one read view) every 50 ms while a test runs:
// an offset row a decision wrote after its partition's latest take must be the taker's (a start
// position, checkpoint 0, may be any member's), and no offset ever moves backwards. The tests also
// measure what the issue asks to be printed: how long a SIGKILLed member's partitions wait for a
// decision by another member, how long a graceful join or leave stalls a partition (compared with
// 2 checkpoint intervals plus the drain), and the rebalances.

package crash

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/crashpoint"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/loadgen"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/testenv"
)

const (
	elasticPartitions = 16
	// groupSession is the consumer group's session timeout the members run with (the broker's
	// smallest by default): a member that stops heartbeating loses its partitions after it.
	groupSession = 6 * time.Second
	// checkpointInterval is env's RELAY_CHECKPOINT_INTERVAL (a group's interval unless it sets
	// another).
	checkpointInterval = 200 * time.Millisecond
	// stallAllowance is what the test lets a graceful join or leave stall a partition beyond 2
	// checkpoint intervals plus the drain before it fails: the noise of 2 shared cores (a
	// checkpoint's commit, a heartbeat round). Every event is printed, and the report counts those
	// within the bound itself. Restarting the sessions of the members whose assignment changed
	// (relay before 5 Dec) stalled them 0.8-2.2 s, past it.
	stallAllowance = time.Second
	// steadyFor is how long the group runs unchanged before a measured join or leave.
	steadyFor = 2 * time.Second
)

// groupEnv makes a relay process a member of the job's consumer group.
var groupEnv = []string{"RELAY_MEMBERSHIP=group", "RELAY_SUBTASKS=1",
	fmt.Sprintf("RELAY_KAFKA_PROPERTIES=session.timeout.ms=%d", groupSession.Milliseconds())}

// member is one running member of a group job.
type member struct {
	*proc
	key  string // its ledger key, <job>/g/<id>: relay_partition_owners.member, relay_offsets.owner_key
	addr string // its http listener (/metrics)
}

// startMember starts a member and waits until it holds its fence: its key is the relay_jobs row
// whose owner names its pid.
func (e *env) startMember(extra ...string) *member {
	t := e.t
	t.Helper()
	p := e.start(append(slices.Clone(groupEnv), extra...)...)
	m := groupMember(t, p)
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%s pid %d", host, p.PID())
	testenv.Eventually(t, 60*time.Second, func() bool {
		p.exited(t)
		return e.db.QueryRow(`SELECT job FROM relay_jobs WHERE owner = ? AND job LIKE ?`, owner, e.job+"/g/%").Scan(&m.key) == nil
	}, "the member's fence row (owner "+owner+")")
	return m
}

// groupMember is a running relay as a member, for its series (stats); its key is left empty.
func groupMember(t *testing.T, p *proc) *member { return &member{proc: p, addr: httpAddr(t, p)} }

// memberStats are the membership series of one member's /metrics.
type memberStats struct {
	rebalances map[string]float64 // by kind
	fenced     float64
	drainSum   float64 // seconds, relay_revoke_drain_seconds
	drains     uint64
	// relay_partition_takeover_seconds: partitions taken over, and their summed takeover time
	takeoverSum float64
	takeovers   uint64
}

func (m *member) stats(t *testing.T) memberStats {
	t.Helper()
	s := scrapeMetrics(t, m.addr)
	out := memberStats{rebalances: map[string]float64{}}
	// A family with no sample yet is absent from the page: it reads as 0.
	for _, kind := range []string{"assigned", "revoked", "lost"} {
		for _, v := range s.matching("relay_rebalances_total", "kind", kind) {
			out.rebalances[kind] += v
		}
	}
	for _, v := range s.matching("relay_fenced_decisions_total") {
		out.fenced += v
	}
	for _, x := range s["relay_revoke_drain_seconds"].GetMetric() {
		out.drainSum += x.GetHistogram().GetSampleSum()
		out.drains += x.GetHistogram().GetSampleCount()
	}
	for _, x := range s["relay_partition_takeover_seconds"].GetMetric() {
		out.takeoverSum += x.GetHistogram().GetSampleSum()
		out.takeovers += x.GetHistogram().GetSampleCount()
	}
	return out
}

// partRow is one partition's owner row joined with its offset row.
type partRow struct {
	epoch   int64
	member  string
	takenAt time.Time
	hasOff  bool
	next    int64
	offKey  string
	updated time.Time
	// checkpoint is the offset row's checkpoint id: 0 for a start position (ledger.RecordStarts),
	// which any member records for every partition of a topic new to the job, before a decision.
	checkpoint int64
}

// decided says whether the partition's current owner committed a decision for it since it took it.
func (r partRow) decided() bool {
	return r.hasOff && r.offKey == r.member && r.updated.After(r.takenAt)
}

type advance struct {
	at   time.Time // relay_offsets.updated_at: the decision's time on the server
	next int64
	key  string
}

type take struct {
	at     time.Time
	epoch  int64
	member string
}

// ledgerWatch polls the job's owner and offset rows every 50 ms, keeps each partition's advances
// and takes, and records every violation of the invariant.
type ledgerWatch struct {
	e      *env
	mu     sync.Mutex
	last   map[int32]partRow
	seen   time.Time // when last was read
	adv    map[int32][]advance
	takes  map[int32][]take
	bad    []string
	polls  int
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *env) watch() *ledgerWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &ledgerWatch{e: e, last: map[int32]partRow{}, adv: map[int32][]advance{}, takes: map[int32][]take{},
		cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.poll(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	e.t.Cleanup(w.stop)
	return w
}

func (w *ledgerWatch) stop() {
	w.cancel()
	<-w.done
}

// poll reads every owner row with its offset row in one statement (one read view): an offset row
// and the owner row its decision stamped are always seen at the same point. Errors (no tables
// yet, MariaDB restarting) only skip a poll.
func (w *ledgerWatch) poll(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := w.e.db.QueryContext(qctx, `SELECT o.kpartition, o.owner_epoch, o.member, o.taken_at,
		f.next_offset, COALESCE(f.owner_key, ''), f.updated_at, COALESCE(f.checkpoint_id, 0)
		FROM relay_partition_owners o LEFT JOIN relay_offsets f ON f.job = o.job AND f.topic = o.topic AND f.kpartition = o.kpartition
		WHERE o.job = ? AND o.topic = ?`, w.e.job, w.e.topic)
	if err != nil {
		return
	}
	defer rows.Close()
	cur := map[int32]partRow{}
	for rows.Next() {
		var p int32
		var r partRow
		var next sql.NullInt64
		var updated sql.NullTime
		if err := rows.Scan(&p, &r.epoch, &r.member, &r.takenAt, &next, &r.offKey, &updated, &r.checkpoint); err != nil {
			return
		}
		r.hasOff, r.next, r.updated = next.Valid, next.Int64, updated.Time
		cur[p] = r
	}
	if rows.Err() != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, r := range cur {
		prev, had := w.last[p]
		if !had || r.epoch != prev.epoch {
			if had && r.epoch < prev.epoch {
				w.bad = append(w.bad, fmt.Sprintf("partition %d: owner epoch went back from %d to %d", p, prev.epoch, r.epoch))
			}
			w.takes[p] = append(w.takes[p], take{at: r.takenAt, epoch: r.epoch, member: r.member})
		}
		if r.hasOff && (!had || !prev.hasOff || r.next != prev.next || !r.updated.Equal(prev.updated)) {
			if had && prev.hasOff && r.next < prev.next {
				w.bad = append(w.bad, fmt.Sprintf("partition %d: offset moved backwards from %d (%s) to %d (%s)", p, prev.next, prev.offKey, r.next, r.offKey))
			}
			if !had || !prev.hasOff || r.next != prev.next {
				w.adv[p] = append(w.adv[p], advance{at: r.updated, next: r.next, key: r.offKey})
			}
			// A start position recorded by another member after the take is no decision: members
			// starting together each record the starts of the whole topic, the first one's stays.
			if r.updated.After(r.takenAt) && r.offKey != r.member && r.checkpoint != 0 {
				w.bad = append(w.bad, fmt.Sprintf("partition %d: offset %d written by %s at %s, after %s took the partition at epoch %d (%s)",
					p, r.next, r.offKey, r.updated.Format(time.StampMicro), r.member, r.epoch, r.takenAt.Format(time.StampMicro)))
			}
		}
		w.last[p] = r
	}
	w.seen = now
	w.polls++
}

// violations are the invariant's violations seen so far.
func (w *ledgerWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.bad)
}

// state returns the last rows read and when they were read.
func (w *ledgerWatch) state() (map[int32]partRow, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.last), w.seen
}

// owned lists the partitions key owns in rows.
func owned(rows map[int32]partRow, key string) []int32 {
	var ps []int32
	for p, r := range rows {
		if r.member == key {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// settled says whether the group settled on the live members: every partition is owned by one of
// them, each owns at least one, and each partition has a decision of its owner since it took it.
func settled(rows map[int32]partRow, live []*member) (bool, string) {
	keys := map[string]int{}
	for _, m := range live {
		keys[m.key] = 0
	}
	for p := int32(0); p < elasticPartitions; p++ {
		r, ok := rows[p]
		_, running := keys[r.member]
		switch {
		case !ok:
			return false, fmt.Sprintf("partition %d has no owner row", p)
		case !running:
			return false, fmt.Sprintf("partition %d is owned by %s, which does not run", p, r.member)
		case !r.decided():
			return false, fmt.Sprintf("partition %d: no decision of its owner %s since it took it at epoch %d", p, r.member, r.epoch)
		}
		keys[r.member]++
	}
	for k, n := range keys {
		if n == 0 {
			return false, fmt.Sprintf("member %s owns no partition", k)
		}
	}
	return true, ""
}

// readWatch reads the topic as any read_committed consumer would (its own librdkafka client, none
// of relay's code) and keeps when each record became readable: a partition stalls while records
// it could read wait for a decision.
type readWatch struct {
	mu     sync.Mutex
	seen   map[int32][]readable // per partition, in offset order
	cancel context.CancelFunc
	done   chan struct{}
}

type readable struct {
	off int64
	at  time.Time
}

func (e *env) watchReadable() *readWatch {
	t := e.t
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "group.id": "readable-" + e.job,
		"isolation.level": "read_committed", "enable.auto.commit": false, "fetch.wait.max.ms": 10})
	if err != nil {
		t.Fatal(err)
	}
	var tps []kafka.TopicPartition
	for p := int32(0); p < elasticPartitions; p++ {
		tps = append(tps, kafka.TopicPartition{Topic: &e.topic, Partition: p, Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &readWatch{seen: map[int32][]readable{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer c.Close()
		for ctx.Err() == nil {
			if m, ok := c.Poll(50).(*kafka.Message); ok {
				r.mu.Lock()
				r.seen[m.TopicPartition.Partition] = append(r.seen[m.TopicPartition.Partition], readable{int64(m.TopicPartition.Offset), time.Now()})
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { r.cancel(); <-r.done })
	return r
}

// stall is the longest a record readable in a span waited for its partition's decision.
type stall struct {
	wait     time.Duration
	p        int32
	off      int64
	readable time.Time
	decided  advance // key "" when not decided by the span's end
	found    bool
}

func (s stall) String() string {
	if !s.found {
		return "no record readable"
	}
	by := "not decided by the end of the span"
	if s.decided.key != "" {
		by = fmt.Sprintf("decided %s by %s", s.decided.at.Format("15:04:05.000"), s.decided.key)
	}
	return fmt.Sprintf("%s: partition %d offset %d readable %s, %s", s.wait.Round(time.Millisecond), s.p, s.off,
		s.readable.Format("15:04:05.000"), by)
}

// stall is the longest wait, from readable (r) to decided (w's advances), of the records readable
// in [from, to]; one not decided by until waits until until. only, if not nil, limits it to the
// partitions it names.
func (g *group) stall(from, to, until time.Time, only map[int32]bool) stall {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	g.w.mu.Lock()
	defer g.w.mu.Unlock()
	var worst stall
	for p, recs := range g.r.seen {
		if only != nil && !only[p] {
			continue
		}
		advs := g.w.adv[p]
		for _, rec := range recs {
			if rec.at.Before(from) || rec.at.After(to) {
				continue
			}
			i := sort.Search(len(advs), func(i int) bool { return advs[i].next > rec.off })
			end, by := until, advance{}
			if i < len(advs) && advs[i].at.Before(until) {
				end, by = advs[i].at, advs[i]
			}
			if w := end.Sub(rec.at); w > worst.wait || !worst.found {
				worst = stall{wait: w, p: p, off: rec.off, readable: rec.at, decided: by, found: true}
			}
		}
	}
	return worst
}

// group drives the members of one job: it starts and stops them, waits for the group to settle,
// and keeps what the test reports.
type group struct {
	e *env
	w *ledgerWatch
	r *readWatch
	// interval is the members' checkpoint.interval (the stall bound's 2 intervals), and extra what
	// each member runs with besides groupEnv.
	interval time.Duration
	extra    []string
	// session is the group session timeout extra sets (groupSession unless extra replaces
	// kafka.properties); 0 is relay's default (config.DefaultGroupSessionTimeout).
	session time.Duration
	live    []*member
	stats   map[string]memberStats // each member's last scrape, by key
	dead    map[string]bool        // keys of the members SIGKILLed
	// numbers for the report
	takeovers []time.Duration
	joins     []time.Duration // the longest stall of each join
	leaves    []time.Duration
	within    int // joins and leaves within 2 checkpoint intervals plus the drain
}

func (e *env) group() *group {
	return &group{e: e, w: e.watch(), r: e.watchReadable(), interval: checkpointInterval, session: groupSession, stats: map[string]memberStats{}, dead: map[string]bool{}}
}

func (g *group) keys() []string {
	var ks []string
	for _, m := range g.live {
		ks = append(ks, m.key)
	}
	return ks
}

// scrape reads a live member's membership series and keeps them for the report.
func (g *group) scrape(m *member) memberStats {
	s := m.stats(g.e.t)
	g.stats[m.key] = s
	return s
}

// settle waits until a read of the ledger made after since shows the group settled on the live
// members, and returns when that read was made.
func (g *group) settle(since time.Time, limit time.Duration, what string) time.Time {
	t := g.e.t
	t.Helper()
	var why string
	var at time.Time
	ok := testenv.Poll(limit, func() bool {
		for _, m := range g.live {
			m.exited(t)
		}
		if bad := g.w.violations(); len(bad) > 0 {
			t.Fatalf("%s: a partition was decided by two members:\n%s", what, strings.Join(bad, "\n"))
		}
		rows, seen := g.w.state()
		if !seen.After(since) {
			why = "no ledger read yet"
			return false
		}
		var done bool
		done, why = settled(rows, g.live)
		at = seen
		return done
	})
	if !ok {
		var logs strings.Builder
		for _, m := range g.live {
			fmt.Fprintf(&logs, "--- %s (%s):\n%s\n", m.key, m.Log, tail(m.Log, 12))
		}
		t.Fatalf("%s: the group did not settle on %d members %v within %s: %s\n%s", what, len(g.live), g.keys(), limit, why, logs.String())
	}
	return at
}

// drained is the drain of a join: the most revoke drain time (relay_revoke_drain_seconds) any
// member of before spent since its scrape there, handing partitions to the new ones.
func (g *group) drained(before map[string]memberStats) time.Duration {
	var worst float64
	for _, m := range g.live {
		b, ok := before[m.key]
		if !ok {
			continue
		}
		worst = max(worst, g.scrape(m).drainSum-b.drainSum)
	}
	return time.Duration(worst * float64(time.Second))
}

// steady runs the settled group a while before a measured event (the scenario: members join and
// leave a group that has been running, not one still settling from the last change), and prints
// the longest wait of a readable record meanwhile, for comparison.
func (g *group) steady() {
	start := time.Now()
	time.Sleep(steadyFor)
	g.e.t.Logf("steady %s: longest wait of a readable record %s; advances per partition %v", steadyFor, g.stall(start, time.Now(), time.Now(), nil), g.w.advancesIn(start, time.Now()))
}

// advancesIn counts each partition's advances in [from, to].
func (w *ledgerWatch) advancesIn(from, to time.Time) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int, elasticPartitions)
	for p, advs := range w.adv {
		for _, a := range advs {
			if !a.at.Before(from) && !a.at.After(to) && int(p) < len(out) {
				out[p]++
			}
		}
	}
	return out
}

// join starts n members and waits for the group to settle on them; with measure, after a steady
// while, it measures the stall (stalled).
func (g *group) join(n int, measure bool) {
	t := g.e.t
	t.Helper()
	if measure {
		g.steady()
	}
	before := map[string]memberStats{}
	for _, m := range g.live {
		before[m.key] = g.scrape(m)
	}
	from := len(g.live)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		g.live = append(g.live, g.e.startMember(g.extra...))
	}
	at := g.settle(t0, 90*time.Second, fmt.Sprintf("join %d → %d", from, len(g.live)))
	if !measure {
		t.Logf("join %d → %d: settled after %s", from, len(g.live), at.Sub(t0).Round(time.Millisecond))
		return
	}
	g.joins = append(g.joins, g.stalled(fmt.Sprintf("join %d → %d", from, len(g.live)), t0, at, g.drained(before), "the longest revoke drain of a member"))
}

// stalled prints the longest stall in [t0, at] (the longest wait of a record readable then for its
// decision), an event's start and the group's settling, of any partition and of the partitions
// moved, with the event's drain, and requires the first within 2 checkpoint intervals plus the
// drain plus stallAllowance.
func (g *group) stalled(what string, t0, at time.Time, drain time.Duration, drainIs string) time.Duration {
	t := g.e.t
	t.Helper()
	// A record readable just before the group settled is decided up to an interval or two later:
	// its wait is read once those decisions are seen, not cut short at the settling.
	time.Sleep(2*g.interval + 200*time.Millisecond)
	now := time.Now()
	st := g.stall(t0, at, now, nil)
	// Any partition's records wait up to an interval for the next cut, moved or not: the moved
	// ones' longest wait is the hand-over's own.
	moved := g.w.takenIn(t0, at)
	mst := g.stall(t0, at, now, moved)
	bound := 2*g.interval + drain
	t.Logf("%s at %s: settled after %s; longest stall %s; of the %d partitions moved %s; drain %s (%s); 2 intervals + drain = %s",
		what, t0.Format("15:04:05.000"), at.Sub(t0).Round(time.Millisecond), st, len(moved), mst, drain.Round(time.Millisecond), drainIs, bound.Round(time.Millisecond))
	if st.wait <= bound {
		g.within++
	}
	if st.wait > bound+stallAllowance {
		t.Fatalf("%s stalled a partition longer than 2 checkpoint intervals + the drain (%s) + %s: %s", what, bound.Round(time.Millisecond), stallAllowance, st)
	}
	return st.wait
}

// takenIn names the partitions taken (moved, or taken back) in [from, to].
func (w *ledgerWatch) takenIn(from, to time.Time) map[int32]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int32]bool{}
	for p, ts := range w.takes {
		for _, tk := range ts {
			if !tk.at.Before(from) && !tk.at.After(to) {
				out[p] = true
			}
		}
	}
	return out
}

// leave, after a steady while, stops member i with SIGTERM, requires a clean exit, waits for the
// group to settle on the others and measures the stall (stalled; the drain is the leaver's SIGTERM
// to its exit).
func (g *group) leave(i int) {
	t := g.e.t
	t.Helper()
	g.steady()
	m := g.live[i]
	g.scrape(m)
	from := len(g.live)
	t0 := time.Now()
	_ = m.Signal(syscall.SIGTERM)
	if err := m.wait(t, 60*time.Second); err != nil {
		t.Fatalf("member %s did not stop cleanly on SIGTERM: %v\n%s", m.key, err, tail(m.Log, 30))
	}
	drain := time.Since(t0)
	g.live = slices.Delete(g.live, i, i+1)
	at := g.settle(t0, 90*time.Second, fmt.Sprintf("leave %d → %d", from, len(g.live)))
	g.leaves = append(g.leaves, g.stalled(fmt.Sprintf("leave %d → %d (%s)", from, len(g.live), m.key), t0, at, drain, "its SIGTERM to its exit"))
}

// kill SIGKILLs member i, waits until every partition it held has a decision of another member
// (printing how long that took), checks that the survivors' relay_partition_takeover_seconds
// counted those partitions with what the ledger showed, then starts a member in its place. With
// relay's default session timeout (g.session 0) the takeover must be within failoverBound.
func (g *group) kill(i int) {
	t := g.e.t
	t.Helper()
	m := g.live[i]
	g.scrape(m)
	rows, _ := g.w.state()
	held := owned(rows, m.key)
	survivors := slices.Delete(slices.Clone(g.live), i, i+1)
	before := map[string]memberStats{}
	for _, s := range survivors {
		before[s.key] = g.scrape(s)
	}
	t0 := time.Now()
	m.Kill()
	g.dead[m.key] = true
	g.live = survivors
	session, bound := g.session, groupSession+90*time.Second
	if session == 0 {
		session, bound = config.DefaultGroupSessionTimeout, failoverBound
	}
	took := g.takenOver(held, m.key, t0, bound, "SIGKILLed member "+m.key)
	g.takeovers = append(g.takeovers, took)
	n, mean := g.tookOver(before, len(held))
	t.Logf("SIGKILL of %s: its %d partitions %v decided by other members %s after the kill (group session timeout %s); relay_partition_takeover_seconds: %d taken over, mean %s",
		m.key, len(held), held, took.Round(time.Millisecond), session, n, mean.Round(time.Millisecond))
	// Each was decided last at most an interval (and a commit) before the kill, and first by its new
	// owner no earlier than the session timeout after the last heartbeat: what the metric says must
	// lie between.
	if lo, hi := session-time.Second, took+2*g.interval+2*time.Second; mean < lo || mean > hi {
		t.Fatalf("relay_partition_takeover_seconds: the %d partitions taken over took %s on average, want between %s and %s (the ledger: all decided %s after the kill)",
			n, mean.Round(time.Millisecond), lo, hi.Round(time.Millisecond), took.Round(time.Millisecond))
	}
	g.join(1, false)
}

// tookOver waits until the members of before (scraped then) counted at least want more partitions
// taken over in relay_partition_takeover_seconds (a takeover is observed at its first committed
// checkpoint, which the ledger may show a moment before), and returns how many and their mean.
func (g *group) tookOver(before map[string]memberStats, want int) (int, time.Duration) {
	t := g.e.t
	t.Helper()
	var n uint64
	var sum float64
	if !testenv.Poll(10*time.Second, func() bool {
		n, sum = 0, 0
		for _, m := range g.live {
			b, ok := before[m.key]
			if !ok {
				continue
			}
			s := g.scrape(m)
			n += s.takeovers - b.takeovers
			sum += s.takeoverSum - b.takeoverSum
		}
		return n >= uint64(want)
	}) {
		t.Fatalf("relay_partition_takeover_seconds counted %d partitions taken over, want %d", n, want)
	}
	return int(n), time.Duration(sum / float64(max(n, 1)) * float64(time.Second))
}

// afterServerRestart waits for the group to settle again after MariaDB was SIGKILLed at t0 and is
// up again (now): every partition decided by a running member since then, so that what follows
// starts from a group that writes again, not from owner rows left from before the restart. A member
// may exit on it, as a single relay may (TestRandomKills): it is replaced, and counted with the
// SIGKILLed ones (it may leave a decided checkpoint COMMITTING too).
func (g *group) afterServerRestart(t0 time.Time) {
	t := g.e.t
	t.Helper()
	up := time.Now()
	var why string
	if !testenv.Poll(180*time.Second, func() bool {
		for i, m := range g.live {
			if !m.Alive() {
				t.Logf("member %s exited after the MariaDB restart (%v): replaced\n%s", m.key, m.Err(), tail(m.Log, 5))
				g.dead[m.key] = true
				g.live[i] = g.e.startMember(g.extra...)
			}
		}
		rows, seen := g.w.state()
		if !seen.After(t0) {
			return false
		}
		var done bool
		if done, why = settled(rows, g.live); !done {
			return false
		}
		for p := int32(0); p < elasticPartitions; p++ {
			if r := rows[p]; !r.updated.After(up) {
				why = fmt.Sprintf("partition %d: last decided %s, before MariaDB was up again (%s)", p, r.updated.Format("15:04:05.000"), up.Format("15:04:05.000"))
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the group did not settle on %v after the MariaDB restart: %s", g.keys(), why)
	}
}

// takenOver waits until each of ps is owned by another live member than from and decided by it,
// and returns the time since t0.
func (g *group) takenOver(ps []int32, from string, t0 time.Time, limit time.Duration, what string) time.Duration {
	t := g.e.t
	t.Helper()
	live := map[string]bool{}
	for _, k := range g.keys() {
		live[k] = true
	}
	var why string
	var at time.Time
	if !testenv.Poll(limit, func() bool {
		rows, seen := g.w.state()
		for _, p := range ps {
			r := rows[p]
			switch {
			case r.member == from || !live[r.member]:
				why = fmt.Sprintf("partition %d is still owned by %s", p, r.member)
				return false
			case !r.decided():
				why = fmt.Sprintf("partition %d: taken by %s, not decided by it yet", p, r.member)
				return false
			}
		}
		at = seen
		return seen.After(t0)
	}) {
		t.Fatalf("%s: its partitions were not decided by other members within %s: %s", what, limit, why)
	}
	return at.Sub(t0)
}

// finish, once the load stopped, waits until the running members wrote what the oracle computes
// from the committed records, stops them with SIGTERM, and checks the end state and that no
// partition was decided by two members.
func (g *group) finish(totals *loadgen.Totals) {
	e, t := g.e, g.e.t
	t.Helper()
	x := e.expected(totals)
	if !testenv.Poll(120*time.Second, func() bool {
		for _, m := range g.live {
			m.exited(t)
		}
		return e.diffOracle(x) == ""
	}) {
		t.Fatalf("the members did not reach the oracle's totals:\n%s", e.diffOracle(x))
	}
	var ps []*proc
	for _, m := range g.live {
		g.scrape(m)
		ps = append(ps, m.proc)
	}
	e.stopAll(ps)
	g.w.stop()
	if bad := g.w.violations(); len(bad) > 0 {
		t.Fatalf("a partition was decided by two members:\n%s", strings.Join(bad, "\n"))
	}
	// A member SIGKILLed after it committed a decided checkpoint's branches but before it marked
	// the checkpoint COMMITTED leaves it COMMITTING: no other member finishes its rows (a gap of
	// group mode, reported; an instance restarted under its own key finishes them). With no branch
	// of it left (checked first), nothing of it is in doubt: accepted, and counted.
	var stuck []int64
	e.checkEnd(totals, x, func(id int64) bool {
		var key string
		if err := e.db.QueryRow(`SELECT instance FROM relay_checkpoints WHERE job = ? AND checkpoint_id = ?`, e.job, id).Scan(&key); err != nil {
			t.Fatal(err)
		}
		if g.dead[key] {
			stuck = append(stuck, id)
		}
		return g.dead[key]
	})
	if len(stuck) > 0 {
		t.Logf("checkpoints left COMMITTING by SIGKILLed members, their branches all committed: %v", stuck)
	}
}

// end stops the load (stop), prints what it produced, waits for the oracle's totals and checks
// the end state (finish), and prints the report.
func (g *group) end(stop func() error, totals *loadgen.Totals) {
	t := g.e.t
	t.Helper()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, bad, good := totals.Snapshot()
	t.Logf("%d good orders, %d bad, %d aborted", good, len(bad), totals.Aborted)
	g.finish(totals)
	g.report()
}

// report prints the rebalances of every member (its last scrape) and the measured times.
func (g *group) report() {
	t := g.e.t
	sum := map[string]float64{}
	var drains uint64
	var drainSum, fenced float64
	for _, s := range g.stats {
		for k, v := range s.rebalances {
			sum[k] += v
		}
		drains += s.drains
		drainSum += s.drainSum
		fenced += s.fenced
	}
	mean := time.Duration(0)
	if drains > 0 {
		mean = time.Duration(drainSum / float64(drains) * float64(time.Second))
	}
	t.Logf("%d members ran; rebalances (last scrape of each) assigned %.0f revoked %.0f lost %.0f; revoke drains %d, mean %s; fenced decisions %.0f",
		len(g.stats), sum["assigned"], sum["revoked"], sum["lost"], drains, mean.Round(time.Millisecond), fenced)
	if len(g.takeovers)+len(g.joins)+len(g.leaves) > 0 {
		t.Logf("takeover after SIGKILL %v; longest stall per join %v, per leave %v (%d of %d within 2 checkpoint intervals + the drain); ledger reads %d",
			rounded(g.takeovers), rounded(g.joins), rounded(g.leaves), g.within, len(g.joins)+len(g.leaves), g.w.polls)
	}
}

func rounded(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond).String()
	}
	return out
}

// producers is how many loads run side by side: one transactional producer commits some 50
// transactions a second here, and its sticky partitioner puts each in one partition, so one alone
// leaves a partition without records for seconds, which would read as a stall.
const producers = 4

// produceOrders produces orders in the background (producers loads side by side, seeded from
// seed) until the returned stop is called, which returns the error of a load that ended before.
func (e *env) produceOrders(totals *loadgen.Totals, seed uint64) (stop func() error) {
	return e.produceOrdersAt(totals, seed, 500)
}

// produceOrdersAt is produceOrders with each load at rate orders a second.
func (e *env) produceOrdersAt(totals *loadgen.Totals, seed uint64, rate float64) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	produced := make(chan error, producers)
	for i := uint64(0); i < producers; i++ {
		go func() {
			err := e.produce(ctx, totals, loadgen.Options{Orders: 1 << 30, Rate: rate, Batch: 10,
				AbortRate: 0.1, BadRate: 0.005, SKUs: 50, Windows: 5, Seed: seed + i, TxnID: fmt.Sprintf("lg%d-%s", i, e.topic)})
			if ctx.Err() != nil {
				err = nil // stopped
			}
			produced <- err
		}()
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			for range producers {
				if perr := <-produced; perr != nil && err == nil {
					err = fmt.Errorf("a load ended before the test stopped it: %w", perr)
				}
			}
		})
		return err
	}
	e.t.Cleanup(func() { _ = stop() })
	return stop
}

// Exact totals in both modes while the members of a group job go 1 → 4 → 2 → 3, one SIGKILLed and
// replaced on the way, orders produced all along into 16 partitions; the takeover of the killed
// member's partitions and the stall of each graceful join and leave are measured and printed.
// RELAY_TEST_ELASTIC_LONG=1 (make crashtest) runs RELAY_TEST_ELASTIC_ROUNDS (default 4) rounds
// of joins, kills and leaves, and SIGKILLs MariaDB once a round (only one scripts/services.sh
// started). RELAY_TEST_SEED replays which members are killed and stopped.
func TestElasticMembers(t *testing.T) {
	t.Parallel() // bound by waits, not work: see TestMain
	for _, mode := range groupModes {
		t.Run(mode.name, func(t *testing.T) { elastic(t, mode.extra...) })
	}
}

// groupModes are the commit modes every elastic test runs in.
var groupModes = []struct {
	name  string
	extra []string
}{
	{"xa", nil},
	{"held", []string{"RELAY_MODE=held"}},
}

func elastic(t *testing.T, extra ...string) {
	long := os.Getenv("RELAY_TEST_ELASTIC_LONG") == "1"
	rounds := 0
	if long {
		rounds = 4
		if v, err := strconv.Atoi(os.Getenv("RELAY_TEST_ELASTIC_ROUNDS")); err == nil && v > 0 {
			rounds = v
		}
	}
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 0), 26))
	e := newEnv(t, elasticPartitions, append(slices.Clone(extra), "RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s")...)
	t.Logf("job %s topic %s (%d partitions); long rounds: %d", e.job, e.topic, elasticPartitions, rounds)
	totals := loadgen.NewTotals()
	stop := e.produceOrders(totals, rng.Uint64())
	g := e.group()
	// relay's defaults: the group's session timeout is 6 s, so a kill is taken over
	// within failoverBound.
	g.session, g.extra = 0, []string{"RELAY_KAFKA_PROPERTIES="}

	g.join(1, false)
	g.join(1, true) // 1 → 2
	g.join(2, true) // 2 → 4
	g.kill(rng.IntN(len(g.live)))
	for r := 0; r < rounds; r++ {
		if _, err := harness.ServicePID("../..", "mariadb"); err != nil {
			t.Logf("round %d: MariaDB not restarted: %v", r, err)
		} else {
			t0 := time.Now()
			restartService(t, "mariadb")
			g.afterServerRestart(t0)
			t.Logf("round %d: MariaDB SIGKILLed and restarted; the group settled again after %s", r, time.Since(t0).Round(time.Millisecond))
		}
		g.leave(rng.IntN(len(g.live))) // 4 → 3
		g.kill(rng.IntN(len(g.live)))
		g.leave(rng.IntN(len(g.live))) // 3 → 2
		g.join(2, true)                // 2 → 4
		g.kill(rng.IntN(len(g.live)))
	}
	g.leave(rng.IntN(len(g.live))) // 4 → 3
	g.leave(rng.IntN(len(g.live))) // 3 → 2
	g.join(1, true)                // 2 → 3
	g.end(stop, totals)
}

// Graceful joins (2 → 4, 2 → 3) and leaves (4 → 3 → 2) at checkpoint.interval 500 ms with relay's
// default group session timeout (6 s: no session.timeout.ms set), both modes, orders flowing into
// 16 partitions: neither may stall a partition longer than 2 intervals + the drain + stallAllowance
// (issue 34.4: on 7 Dec such a hand-over stalled one 3.6-4.3 s), and the totals stay exact.
// RELAY_TEST_HANDOVER_INTERVAL sets another interval (the issue asks for 500 ms and 1 s).
func TestElasticHandover(t *testing.T) {
	t.Parallel() // bound by waits, not work: see TestMain
	interval := setting(t, "RELAY_TEST_HANDOVER_INTERVAL", 500*time.Millisecond, time.ParseDuration)
	for _, mode := range groupModes {
		t.Run(mode.name, func(t *testing.T) { handover(t, interval, mode.extra...) })
	}
}

func handover(t *testing.T, interval time.Duration, extra ...string) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 0), 34))
	e := newEnv(t, elasticPartitions, append(slices.Clone(extra), "RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s",
		"RELAY_CHECKPOINT_INTERVAL="+interval.String())...)
	t.Logf("job %s topic %s (%d partitions); checkpoint.interval %s, relay's default session timeout", e.job, e.topic, elasticPartitions, interval)
	rate := setting(t, "RELAY_TEST_HANDOVER_RATE", 500.0, parseFloat)
	totals := loadgen.NewTotals()
	stop := e.produceOrdersAt(totals, rng.Uint64(), rate)
	g := e.group()
	// No session.timeout.ms: groupEnv's kafka.properties is replaced by RELAY_TEST_HANDOVER_PROPERTIES
	// (empty by default; e.g. heartbeat.interval.ms=3000, librdkafka's own, shows what relay's
	// heartbeat default saves).
	g.interval, g.session, g.extra = interval, 0, []string{"RELAY_KAFKA_PROPERTIES=" + os.Getenv("RELAY_TEST_HANDOVER_PROPERTIES")}
	g.join(2, false)
	g.join(2, true)                // 2 → 4
	g.leave(rng.IntN(len(g.live))) // 4 → 3
	g.leave(rng.IntN(len(g.live))) // 3 → 2
	g.join(1, true)                // 2 → 3
	g.end(stop, totals)
}

// A member frozen (SIGSTOP) past the group's session timeout while orders flow loses its
// partitions to the other member; continued (SIGCONT), it commits nothing for them: the checkpoint
// it was frozen in is never decided (refused by the partitions' owner epochs, and counted in
// relay_fenced_decisions_total, or abandoned on the lost assignment before its decision), no
// offset row of theirs is written by it after the take, none moves backwards, and the totals are
// exact. The member freezes itself inside a checkpoint with records of its partitions (a crash
// point with RELAY_CRASH_ACTION=stop: XA mode between prepare and the ledger decision, held mode
// between the rows and the offsets of its transaction). Its lease (job.lease) outlasts the freeze,
// so its own fence still holds when it wakes: only the partitions' owner epochs and the lost
// assignment stand in its way. The other member takes the partitions while it is frozen but
// cannot decide them yet: the frozen checkpoint holds the locks of rows both write.
func TestElasticZombie(t *testing.T) {
	t.Parallel() // bound by waits, not work: see TestMain
	point := map[string]string{"xa": crashpoint.AfterPrepare, "held": crashpoint.AfterFlush}
	for _, mode := range groupModes {
		t.Run(mode.name, func(t *testing.T) { zombie(t, point[mode.name], mode.extra...) })
	}
}

func zombie(t *testing.T, point string, extra ...string) {
	e := newEnv(t, elasticPartitions, append(slices.Clone(extra), "RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s", "RELAY_JOB_LEASE=40s")...)
	totals := loadgen.NewTotals()
	stop := e.produceOrders(totals, 2626)
	g := e.group()
	g.join(1, false)
	a := g.live[0]
	// The 10th checkpoint with records: the group has given z its partitions by then.
	z := e.startMember("RELAY_CRASH_AT="+point+":10", "RELAY_CRASH_ACTION=stop")
	testenv.Eventually(t, 90*time.Second, func() bool { z.exited(t); return z.Stopped() }, "the member to freeze itself at "+point)
	frozen := time.Now()
	var lost []int32
	testenv.Eventually(t, 10*time.Second, func() bool {
		rows, seen := g.w.state()
		lost = owned(rows, z.key)
		return seen.After(frozen)
	}, "a ledger read after the freeze")
	if len(lost) == 0 {
		t.Fatalf("%s froze at %s owning no partition", z.key, point)
	}
	inFlight := e.frozenCheckpoints(z.key)
	took := g.takenBy(lost, a.key, frozen, groupSession+60*time.Second, "frozen member "+z.key)
	t.Logf("%s froze at %s with partitions %v (prepared checkpoints %v); %s took them %s later (group session timeout %s)",
		z.key, point, lost, inFlight, a.key, took.Round(time.Millisecond), groupSession)

	if err := z.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woke := time.Now()
	g.live = append(g.live, z)
	at := g.settle(woke, 90*time.Second, "after the frozen member woke")
	st := z.stats(t)
	t.Logf("%s woke: relay_fenced_decisions_total %.0f, lost assignments %.0f; the group settled on both again %s after SIGCONT",
		z.key, st.fenced, st.rebalances["lost"], at.Sub(woke).Round(time.Millisecond))
	if st.rebalances["lost"] < 1 {
		t.Fatalf("%s woke with relay_rebalances_total{kind=\"lost\"} %v: its group session did not expire while it was frozen", z.key, st.rebalances["lost"])
	}
	// It froze with a checkpoint in flight (the crash point is inside it): told its assignment is
	// lost, it lets that checkpoint finish, whose decision the partitions' epochs refuse.
	if st.fenced < 1 {
		t.Fatalf("%s woke with a checkpoint in flight and relay_fenced_decisions_total %v: its refused decision was not counted", z.key, st.fenced)
	}
	for _, id := range inFlight {
		if st, ok := e.ledgerRows()[id]; ok {
			t.Fatalf("checkpoint %d, prepared by %s when it froze, was decided after another member took its partitions (%s)", id, z.key, st)
		}
	}
	if st.fenced < 1 {
		t.Logf("%s abandoned its frozen checkpoint on the lost assignment before deciding it: no decision to refuse", z.key)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	g.finish(totals)
	e.checkZombieCheckpoints(g.w, z.key, lost, frozen)
	g.report()
}

// frozenCheckpoints are the checkpoints of key's id blocks with a prepared branch now (XA mode:
// the checkpoint a member froze in after its prepare).
func (e *env) frozenCheckpoints(key string) []int64 {
	var ids []int64
	for _, b := range e.branches() {
		var n int
		if err := e.db.QueryRow(`SELECT COUNT(*) FROM relay_id_blocks WHERE job = ? AND owner_key = ? AND ? BETWEEN first_id AND last_id`,
			e.job, key, b.Checkpoint).Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		if n > 0 && !slices.Contains(ids, b.Checkpoint) {
			ids = append(ids, b.Checkpoint)
		}
	}
	return ids
}

// A member that still believes it owns partitions another member took decides nothing for them:
// its decision is refused by their owner epochs and counted in relay_fenced_decisions_total. The
// stale belief is made without a race: the second member joins another consumer group (its own
// kafka.group_id), which grants it all 16 partitions while the first member's group still grants
// them to the first, so both read them and both try to decide; the ledger lets only the later
// taker decide. A frozen zombie (TestElasticZombie) abandons its checkpoint on the lost assignment
// before deciding, so it never reaches this refusal; a member whose loss is noticed late does.
func TestElasticStaleOwner(t *testing.T) {
	for _, mode := range groupModes {
		t.Run(mode.name, func(t *testing.T) { staleOwner(t, mode.extra...) })
	}
}

func staleOwner(t *testing.T, extra ...string) {
	e := newEnv(t, elasticPartitions, append(slices.Clone(extra), "RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s")...)
	totals := loadgen.NewTotals()
	stop := e.produceOrders(totals, 2727)
	g := e.group()
	g.join(1, false)
	stale := g.live[0]
	t0 := time.Now()
	other := e.startMember("RELAY_KAFKA_GROUP_ID=relay-" + e.job + "-split")
	g.live = []*member{other}
	all := make([]int32, elasticPartitions)
	for p := range all {
		all[p] = int32(p)
	}
	took := g.takenBy(all, other.key, t0, 90*time.Second, "the member of the split group")
	var st memberStats
	testenv.Eventually(t, 60*time.Second, func() bool {
		stale.exited(t)
		if bad := g.w.violations(); len(bad) > 0 {
			t.Fatalf("a partition was decided by two members:\n%s", strings.Join(bad, "\n"))
		}
		st = stale.stats(t)
		return st.fenced >= 1
	}, "the stale member's refused decision in relay_fenced_decisions_total")
	at := g.settle(t0, 90*time.Second, "the split group's member deciding every partition")
	t.Logf("%s (its own group) took all %d partitions %s after it started and decided them after %s; the stale member %s: relay_fenced_decisions_total %.0f",
		other.key, elasticPartitions, took.Round(time.Millisecond), at.Sub(t0).Round(time.Millisecond), stale.key, st.fenced)
	// The stale member keeps its group's grant, which the ledger refuses it: stop it.
	g.scrape(stale)
	e.stopAll([]*proc{stale.proc})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	g.finish(totals)
	e.checkZombieCheckpoints(g.w, stale.key, all, t0)
	g.report()
}

// takenBy waits until key owns each of ps at a newer owner epoch than a read before since showed,
// and returns the time since since.
func (g *group) takenBy(ps []int32, key string, since time.Time, limit time.Duration, what string) time.Duration {
	t := g.e.t
	t.Helper()
	var why string
	var at time.Time
	if !testenv.Poll(limit, func() bool {
		rows, seen := g.w.state()
		for _, p := range ps {
			if r := rows[p]; r.member != key {
				why = fmt.Sprintf("partition %d is owned by %s", p, r.member)
				return false
			}
		}
		at = seen
		return seen.After(since)
	}) {
		t.Fatalf("%s: %s did not take its partitions within %s: %s", what, key, limit, why)
	}
	return at.Sub(since)
}

// checkZombieCheckpoints requires that no checkpoint row key decided covers one of lost after
// another member took it (the first take by another member since since), unless key took it again
// in between (a later grant of the group). XA mode keeps a row per decision; held mode has none,
// its offset rows are the watcher's.
func (e *env) checkZombieCheckpoints(w *ledgerWatch, key string, lost []int32, since time.Time) {
	t := e.t
	rows, err := e.db.Query(`SELECT checkpoint_id, offsets, decided_at FROM relay_checkpoints WHERE job = ? AND instance = ? AND decided_at > ?`,
		e.job, key, since.UTC())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id int64
		var offs string
		var decided time.Time
		if err := rows.Scan(&id, &offs, &decided); err != nil {
			t.Fatal(err)
		}
		var o partition.Offsets
		if err := json.Unmarshal([]byte(offs), &o); err != nil {
			t.Fatalf("checkpoint %d offsets %q: %v", id, offs, err)
		}
		for _, p := range lost {
			if _, ok := o.Get(e.topic, p); !ok {
				continue
			}
			away, ok := w.takenAway(p, key, since)
			if !ok || decided.Before(away.at) {
				continue
			}
			if !w.retook(p, key, away.epoch, decided) {
				t.Fatalf("checkpoint %d of %s, decided %s, covers partition %d, which %s took at epoch %d at %s, and %s had not taken it again: takes %v",
					id, key, decided.Format(time.StampMicro), p, away.member, away.epoch, away.at.Format(time.StampMicro), key, w.takesOf(p))
			}
			n++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoints of %s covering partitions another member had taken from it (each after taking them back): %d", key, n)
}

// takenAway is the first take of p by another member than key since since.
func (w *ledgerWatch) takenAway(p int32, key string, since time.Time) (take, bool) {
	for _, tk := range w.takesOf(p) {
		if tk.member != key && tk.at.After(since) {
			return tk, true
		}
	}
	return take{}, false
}

// retook says whether key took p at an owner epoch above epoch no later than at.
func (w *ledgerWatch) retook(p int32, key string, epoch int64, at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, tk := range w.takes[p] {
		if tk.member == key && tk.epoch > epoch && !tk.at.After(at) {
			return true
		}
	}
	return false
}

func (w *ledgerWatch) takesOf(p int32) []take {
	w.mu.Lock()
	defer w.mu.Unlock()
	ts := slices.Clone(w.takes[p])
	sort.Slice(ts, func(i, j int) bool { return ts[i].epoch < ts[j].epoch })
	return ts
}

// TestElasticContention (RELAY_TEST_ELASTIC_LONG=1) measures how long members wait for each
// other's row locks on the aggregate rows they share, at 1, 2, 4 and 8 members of one job, both
// modes: orders flow into 16 partitions at a fixed rate, every partition carrying every key (50
// skus × 5 windows), so every member's checkpoint upserts the same rows. Over a steady window per
// size it samples, every 20 ms, the job's transactions waiting for a row lock
// (information_schema.INNODB_TRX in LOCK WAIT, sessions of the test's database) and reads each
// member's checkpoints from /metrics: the lock wait per checkpoint is waiting samples × 20 ms
// (each sample standing for the time between two) over the checkpoints committed. Totals stay exact. RELAY_TEST_HANDOVER_INTERVAL sets the
// checkpoint interval (500 ms).
func TestElasticContention(t *testing.T) {
	if os.Getenv("RELAY_TEST_ELASTIC_LONG") != "1" {
		t.Skip("RELAY_TEST_ELASTIC_LONG=1 runs it (about 4 minutes)")
	}
	interval := setting(t, "RELAY_TEST_HANDOVER_INTERVAL", 500*time.Millisecond, time.ParseDuration)
	for _, mode := range groupModes {
		t.Run(mode.name, func(t *testing.T) { contention(t, interval, mode.extra...) })
	}
}

// contentionWindow is how long each group size is measured.
const contentionWindow = 15 * time.Second

func contention(t *testing.T, interval time.Duration, extra ...string) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 0), 35))
	e := newEnv(t, elasticPartitions, append(slices.Clone(extra), "RELAY_CHECKPOINT_RESOLVE_INTERVAL=1s",
		"RELAY_CHECKPOINT_INTERVAL="+interval.String())...)
	var db string
	if err := e.db.QueryRow(`SELECT DATABASE()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	t.Logf("job %s topic %s database %s; checkpoint.interval %s", e.job, e.topic, db, interval)
	totals := loadgen.NewTotals()
	stop := e.produceOrders(totals, rng.Uint64())
	g := e.group()
	g.interval = interval
	for _, n := range []int{1, 2, 4, 8} {
		g.join(n-len(g.live), false)
		time.Sleep(steadyFor)
		g.contend(db)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	g.finish(totals)
	g.report()
}

// contend measures the live members' row-lock waits on each other over contentionWindow (see
// TestElasticContention) and prints them.
func (g *group) contend(db string) {
	t := g.e.t
	t.Helper()
	type counts struct{ checkpoints, flush, prepare float64 }
	read := func() counts {
		var c counts
		for _, m := range g.live {
			s := scrapeMetrics(t, m.addr)
			for _, x := range s["relay_checkpoint_phase_duration_seconds"].GetMetric() {
				h := x.GetHistogram()
				for _, l := range x.GetLabel() {
					if l.GetName() != "phase" {
						continue
					}
					switch l.GetValue() {
					case "total":
						c.checkpoints += float64(h.GetSampleCount())
					case "flush":
						c.flush += h.GetSampleSum()
					case "prepare":
						c.prepare += h.GetSampleSum()
					}
				}
			}
		}
		return c
	}
	const every = 20 * time.Millisecond
	before := read()
	var waitsBefore, timeBefore int64
	status := func(name string) int64 {
		var k string
		var v int64
		if err := g.e.db.QueryRow(`SHOW GLOBAL STATUS LIKE '`+name+`'`).Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	waitsBefore, timeBefore = status("Innodb_row_lock_waits"), status("Innodb_row_lock_time")
	samples, waiting := 0, 0
	var longest time.Duration // the longest single wait seen, and its statement
	var longestWhat string
	tables := map[string]int{}
	start := time.Now()
	end := start.Add(contentionWindow)
	for time.Now().Before(end) {
		rows, err := g.e.db.Query(`SELECT COALESCE(l.lock_table, '?'), TIMESTAMPDIFF(MICROSECOND, x.trx_wait_started, NOW(6)),
			COALESCE(LEFT(x.trx_query, 100), ''), x.trx_mysql_thread_id FROM information_schema.INNODB_TRX x
			JOIN information_schema.PROCESSLIST p ON p.ID = x.trx_mysql_thread_id
			LEFT JOIN information_schema.INNODB_LOCKS l ON l.lock_id = x.trx_requested_lock_id
			WHERE x.trx_state = 'LOCK WAIT' AND p.DB = ?`, db)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var table, query string
			var waited, thread int64
			if err := rows.Scan(&table, &waited, &query, &thread); err != nil {
				t.Fatal(err)
			}
			if d := time.Duration(waited) * time.Microsecond; d > longest {
				longest, longestWhat = d, fmt.Sprintf("thread %d: %s", thread, query)
			}
			waiting++
			tables[table]++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		samples++
		time.Sleep(every)
	}
	after := read()
	cps := after.checkpoints - before.checkpoints
	// A sample stands for the time between two samples (its query's included).
	wait := time.Duration(float64(waiting) * float64(time.Since(start)) / float64(samples))
	per := time.Duration(0)
	fp := time.Duration(0)
	if cps > 0 {
		per = time.Duration(float64(wait) / cps)
		fp = time.Duration((after.flush - before.flush + after.prepare - before.prepare) / cps * float64(time.Second))
	}
	t.Logf("%d members, %s: %.0f checkpoints; this job's row-lock waits %s in %d of %d samples (by table %v): %s per checkpoint; mean flush+prepare %s; longest single wait %s (%s); server-wide Innodb_row_lock_waits +%d, Innodb_row_lock_time +%d ms",
		len(g.live), contentionWindow, cps, wait, waiting, samples, tables, per.Round(time.Millisecond), fp.Round(time.Millisecond), longest.Round(time.Millisecond), longestWhat,
		status("Innodb_row_lock_waits")-waitsBefore, status("Innodb_row_lock_time")-timeBefore)
}
