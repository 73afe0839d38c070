// Package membership makes a process a member of its job's consumer group and tells the pipeline
// which partitions it may read (docs/PROTOCOL.md, "Group membership").
//
// Invariants:
//   - The group only says who should read a partition; the ledger's per-partition owner epoch says
//     who may decide it. A member reads a partition only after taking it in the ledger, and takes
//     it from another member only on a grant of the group newer than its own hold. A take's result
//     never overwrites a grant that came after the take listed its Wants (Took).
//   - A cooperative revoke is acknowledged to the group (the partitions unassigned) only after the
//     pipeline released them: every record it read of them decided, none read after. A lost
//     assignment (the member's group session expired) is dropped at once: the group gave it away.
//   - The group consumer never reads records: its partitions are paused as soon as they are
//     assigned. The session's own consumer reads them from the ledger's offsets.
package membership

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/consumer"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/metrics"
	"github.com/relay-sh/relay/internal/partition"
)

// Kind is what a rebalance did to this member.
type Kind int

const (
	Assigned Kind = iota // partitions granted
	Revoked              // partitions to hand back after a drain
	Lost                 // partitions taken away without one (the group session expired)
)

func (k Kind) String() string { return [...]string{"assigned", "revoked", "lost"}[k] }

// Change tells the pipeline that its assignment changed, and how (Kind). It names no partitions:
// the live session reads the assignment as it is when it acts (Member.Wants, which may hold later
// changes already), takes granted partitions and drains and releases revoked ones; a lost
// assignment ends it without another decision. Done must be called once nothing more of the
// revoked or lost partitions is read or decided; a revoke is acknowledged to the group only then.
type Change struct {
	Kind Kind
	done chan struct{}
	once sync.Once
}

// Done reports that the revoked or lost partitions are released: nothing more of them is read or
// decided here.
func (c *Change) Done() { c.once.Do(func() { close(c.done) }) }

type tp struct {
	topic string
	part  int32
}

// Member is this process in the job's consumer group.
type Member struct {
	c       *kafka.Consumer
	log     *zap.Logger
	m       *metrics.Metrics
	topics  []string      // subscribed by Run; the first for metadata requests (rejoin)
	tick    time.Duration // how often Run wakes librdkafka's group state machine (Run)
	session string        // the session.timeout.ms librdkafka runs with ("" for its own default)
	drain   time.Duration // longest wait for the pipeline to release revoked partitions
	changes chan *Change
	mu      sync.Mutex
	// held maps every partition of the assignment to the owner epoch this member took it at in
	// the ledger; 0 is a fresh grant (not taken since the group granted it).
	held map[tp]partition.Epoch
	// granted maps every partition of the assignment to the number of its latest grant (grants
	// counts them): a take's result is for the grants its Wants saw, and a partition granted since
	// keeps its fresh grant (Took).
	granted map[tp]Grant
	grants  Grant
	// stolen are assigned partitions another member took since this one's last take: not read
	// until the group grants them again (it is about to tell this member they are lost), or until
	// regrant passed with the group still assigning them here: then the other member took them on
	// a grant older than this one's (a zombie that woke with a stale fresh grant), and this member
	// takes them back, fresh. Each maps to the number of its latest steal: regrant runs from that
	// steal, and the timer of an earlier one does nothing (regranted).
	stolen  map[tp]uint64
	steals  uint64
	regrant time.Duration
	// reading says a session may be reading partitions: a revoke then waits for it to end. While
	// none runs (between two sessions, a back-off), a revoke is acknowledged at once.
	reading  atomic.Bool
	closing  chan struct{}
	leave    sync.Once
	fatal    atomic.Bool    // the group client reported a fatal error: Close must not call its Close
	metadata sync.WaitGroup // rejoinSoon's requests in flight
}

// Options configure a member.
type Options struct {
	Kafka      consumer.Options // brokers, topics, group id, properties
	InstanceID string           // group.instance.id (static membership), "" for dynamic
	// Discovery is how often the group looks for new partitions of the topics (kafka.discovery_interval):
	// the group leader assigns them once its metadata shows them.
	Discovery time.Duration
	// Regrant is how long a partition another member took stays out of this member's sessions
	// while the group still assigns it here (about twice the group's session timeout: the group
	// has settled by then, and still gives it to this member).
	Regrant time.Duration
	// SessionTimeout is librdkafka's session.timeout.ms unless kafka.properties sets it: how long
	// the group waits for a member that stopped heartbeating (config.GroupSessionTimeout).
	SessionTimeout time.Duration
	// Heartbeat is librdkafka's heartbeat.interval.ms unless kafka.properties sets it: how soon a
	// member learns that the group rebalances (about half a checkpoint interval, run.go).
	Heartbeat time.Duration
	// Drain bounds the wait for the pipeline to drain and release revoked partitions (the longest
	// a drain can take, config.Checkpoint.DrainBound): past it the revoke is acknowledged anyway,
	// since the partition owner epochs keep a late decision out.
	Drain time.Duration
}

// MaxPollInterval is the max.poll.interval.ms a member runs with unless kafka.properties sets it:
// the drain bound, which a revoke's callback may block the poll for, and 30 s more.
func MaxPollInterval(drain time.Duration) time.Duration { return drain + 30*time.Second }

// Join makes the group client, with the cooperative-sticky assignor; the group is joined only
// when Run starts (after the fence: see Run).
func Join(o Options, log *zap.Logger, m *metrics.Metrics) (*Member, error) {
	cm := consumer.ConfigMap(o.Kafka)
	for k, v := range map[string]kafka.ConfigValue{
		"partition.assignment.strategy": "cooperative-sticky",
		// Offsets are chosen by the session from the ledger; this consumer fetches nothing.
		"auto.offset.reset": "latest",
	} {
		if err := cm.SetKey(k, v); err != nil {
			return nil, err
		}
	}
	// librdkafka's 3 s heartbeat makes a member learn of a rebalance up to 3 s late, and a
	// cooperative rebalance asks each member twice: the partitions moving wait for it (see
	// Options.Heartbeat).
	// hb is the heartbeat librdkafka runs with: the user's, else o.Heartbeat, else its default.
	hb := 3 * time.Second
	if v, set := o.Kafka.Properties["heartbeat.interval.ms"]; set {
		if ms, err := strconv.Atoi(v); err == nil {
			hb = time.Duration(ms) * time.Millisecond
		}
		if o.Heartbeat > 0 && hb > 2*o.Heartbeat {
			// The second round of a graceful join, and the only one of a leave, start at a
			// member's next heartbeat: at librdkafka's 3 s a join stalled a moved partition
			// 3.0-3.3 s, against at most 0.53 s at relay's default with 500 ms checkpoints
			// (docs/BENCHMARKS.md, "Hand-over").
			log.Warn("kafka.properties heartbeat.interval.ms is long for the checkpoint interval: a partition moved by a graceful join or leave waits about one heartbeat more",
				zap.Duration("heartbeat", hb), zap.Duration("relay_default", o.Heartbeat))
		}
	} else if o.Heartbeat > 0 {
		hb = o.Heartbeat
		if err := cm.SetKey("heartbeat.interval.ms", int(hb/time.Millisecond)); err != nil {
			return nil, err
		}
	}
	session, set := o.Kafka.Properties["session.timeout.ms"]
	if !set && o.SessionTimeout > 0 {
		session = strconv.Itoa(int(o.SessionTimeout / time.Millisecond))
		if err := cm.SetKey("session.timeout.ms", session); err != nil {
			return nil, err
		}
	}
	// A revoke's callback blocks the group client's poll for as long as the drain takes (up to
	// o.Drain); librdkafka leaves the group when its poll waits longer than max.poll.interval.ms
	// (300 s by default, below the default drain bound), losing every partition, not only the
	// revoked ones. So the poll may wait out the drain, plus a margin. A member that hangs past
	// it is still fenced: its lease and the partition owner epochs keep its decisions out.
	if _, set := o.Kafka.Properties["max.poll.interval.ms"]; !set && o.Drain > 0 {
		if err := cm.SetKey("max.poll.interval.ms", int(MaxPollInterval(o.Drain)/time.Millisecond)); err != nil {
			return nil, err
		}
	}
	if o.Discovery > 0 {
		if err := cm.SetKey("topic.metadata.refresh.interval.ms", int(o.Discovery/time.Millisecond)); err != nil {
			return nil, err
		}
	}
	if o.InstanceID != "" {
		_ = cm.SetKey("group.instance.id", o.InstanceID)
	}
	_ = cm.SetKey("go.logs.channel.enable", true)
	c, err := kafka.NewConsumer(cm)
	if err != nil {
		return nil, fmt.Errorf("group member: %w", err)
	}
	go consumer.ForwardLogs(c.Logs(), log.Named("librdkafka"))
	return &Member{c: c, log: log, m: m, topics: o.Kafka.Topics, session: session, tick: max(hb/2, 10*time.Millisecond), drain: o.Drain, changes: make(chan *Change, 16), held: map[tp]partition.Epoch{},
		granted: map[tp]Grant{}, stolen: map[tp]uint64{}, regrant: o.Regrant, closing: make(chan struct{})}, nil
}

// Changes delivers each change of the assignment, in order.
func (mb *Member) Changes() <-chan *Change { return mb.changes }

// Run serves the group (rebalances, heartbeats are librdkafka's) until ctx ends, then leaves it.
//
// librdkafka's main thread runs the group's state machine (heartbeats included) only when it wakes
// for a request or a timer of its own, at least once a second: a member with nothing else going on
// heartbeats about once a second whatever heartbeat.interval.ms says, and learns of a rebalance
// that late. Run hands it a request every tick (reading the assignment, in process) so that the
// heartbeat interval holds.
//
// Run subscribes, so joins the group, only now: the pipeline starts it once the fence is taken.
// A process refused at its fence (a second one with the same static group.instance.id would
// otherwise fence the running member out of the group, a fatal error there), or that cannot reach
// MySQL, never takes partitions from the others, nor has them wait for its session timeout.
func (mb *Member) Run(ctx context.Context) error {
	if err := mb.c.SubscribeTopics(mb.topics, mb.rebalance); err != nil {
		return fmt.Errorf("group member: subscribe: %w", err)
	}
	for ctx.Err() == nil {
		switch ev := mb.c.Poll(int(mb.tick / time.Millisecond)).(type) {
		case kafka.Error:
			if ev.IsFatal() {
				mb.fatal.Store(true)
				return fmt.Errorf("group member: %w", ev)
			}
			if ev.Code() == kafka.ErrInvalidSessionTimeout {
				// librdkafka would retry the join forever: the member would hold its fence and
				// read nothing.
				return mb.sessionTimeoutRefused(ev)
			}
			mb.log.Warn("kafka group client error", zap.Error(ev))
		}
		_, _ = mb.c.Assignment()
	}
	return nil
}

// ErrSessionTimeout means the group coordinator refused the member's session timeout: it is
// outside the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms.
var ErrSessionTimeout = errors.New("the brokers refuse this session timeout")

// sessionTimeoutRefused is the error for a join the coordinator refused for the session timeout,
// naming the brokers' bounds when a broker's configuration can be read.
func (mb *Member) sessionTimeoutRefused(ev kafka.Error) error {
	bounds := "its bounds could not be read: see the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms"
	if lo, hi, err := mb.sessionBounds(); err == nil {
		bounds = fmt.Sprintf("the brokers accept group.min.session.timeout.ms=%d to group.max.session.timeout.ms=%d", lo, hi)
	} else {
		mb.log.Warn("reading the brokers' session timeout bounds", zap.Error(err))
	}
	return fmt.Errorf("group member: %w: session.timeout.ms=%s (relay's default is 6s; kafka.properties session.timeout.ms sets it); %s (%v)",
		ErrSessionTimeout, mb.session, bounds, ev)
}

// sessionBounds reads group.min.session.timeout.ms and group.max.session.timeout.ms from a
// broker's configuration (the group coordinator's are the same on a cluster configured alike).
func (mb *Member) sessionBounds() (lo, hi int, err error) {
	a, err := kafka.NewAdminClientFromConsumer(mb.c)
	if err != nil {
		return 0, 0, err
	}
	defer a.Close()
	md, err := a.GetMetadata(nil, false, 10_000)
	if err != nil {
		return 0, 0, err
	}
	if len(md.Brokers) == 0 {
		return 0, 0, errors.New("no broker in the metadata")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := a.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceBroker, Name: strconv.Itoa(int(md.Brokers[0].ID))}})
	if err != nil {
		return 0, 0, err
	}
	if len(res) != 1 || res[0].Error.Code() != kafka.ErrNoError {
		return 0, 0, fmt.Errorf("describe broker %d: %v", md.Brokers[0].ID, res)
	}
	if lo, err = strconv.Atoi(res[0].Config["group.min.session.timeout.ms"].Value); err == nil {
		hi, err = strconv.Atoi(res[0].Config["group.max.session.timeout.ms"].Value)
	}
	return lo, hi, err
}

// Reading tells the member whether a session may be reading its partitions now (see reading).
func (mb *Member) Reading(on bool) { mb.reading.Store(on) }

// Leaving stops revokes from waiting for sessions: the pipeline has stopped for good.
func (mb *Member) Leaving() { mb.leave.Do(func() { close(mb.closing) }) }

// Close leaves the group: the other members get this one's partitions. Call it only after the
// pipeline stopped: a revoke during Close is not waited for.
func (mb *Member) Close() {
	mb.Leaving()
	mb.metadata.Wait()
	if mb.fatal.Load() {
		// The group has dropped this member already (e.g. fenced by another client with its
		// static group.instance.id), and confluent-kafka-go v2.11.1's Close never returns then:
		// it waits for a close librdkafka refused to start (confluent-kafka-go#1588). The process
		// is ending; the handle goes with it.
		mb.log.Warn("group client left unclosed after its fatal error")
		return
	}
	mb.unsubscribe()
	// A fatal error can also arrive after Run stopped polling, and then Close hangs all the same:
	// it is given closeWait (leaving takes one LeaveGroup round trip; revokes are acknowledged at
	// once by now), then the process ends without it.
	done := make(chan error, 1)
	go func() { done <- mb.c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			mb.log.Warn("leaving the consumer group", zap.Error(err))
		}
	case <-time.After(closeWait):
		mb.log.Warn("group client did not close; left as it is", zap.Duration("waited", closeWait))
	}
}

// closeWait bounds Close.
const closeWait = 30 * time.Second

// unsubscribe leaves the group before Close: confluent-kafka-go's Close first waits for its log
// forwarder's poll of librdkafka's log queue (up to 100 ms) and only then revokes and sends
// LeaveGroup, so the others learned of a graceful leave up to 100 ms late (measured: 97-99 ms
// between the pipeline's stop and the revoke). Unsubscribing revokes at once (acknowledged at
// once: the member is leaving) and librdkafka sends LeaveGroup as soon as the partitions are
// unassigned; the polls here serve the revoke's callback, for at most leaveWait. Close then only
// ends the client.
func (mb *Member) unsubscribe() {
	if err := mb.c.Unsubscribe(); err != nil {
		mb.log.Debug("unsubscribing before close", zap.Error(err))
		return
	}
	for end := time.Now().Add(leaveWait); time.Now().Before(end); {
		mb.c.Poll(10)
		if a, err := mb.c.Assignment(); err != nil || len(a) == 0 {
			return
		}
	}
}

// leaveWait bounds unsubscribe's wait for the revoke.
const leaveWait = time.Second

// rebalance runs inside Poll, on Run's goroutine. The cooperative protocol tells every member of
// each rebalance, most of them with nothing to add or revoke: those keep their session.
func (mb *Member) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	defer mb.rejoinSoon()
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		if len(e.Partitions) == 0 {
			return nil
		}
		parts := slices.Clone(e.Partitions)
		for i := range parts {
			parts[i].Offset = kafka.OffsetEnd
		}
		if err := c.IncrementalAssign(parts); err != nil {
			return fmt.Errorf("group member: assign: %w", err)
		}
		if err := c.Pause(parts); err != nil {
			return fmt.Errorf("group member: pause: %w", err)
		}
		mb.mu.Lock()
		for _, p := range parts {
			mb.grant(tp{*p.Topic, p.Partition})
		}
		mb.mu.Unlock()
		mb.notify(Assigned, e.Partitions)
	case kafka.RevokedPartitions:
		if len(e.Partitions) == 0 {
			return nil
		}
		kind := Revoked
		if c.AssignmentLost() {
			kind = Lost
		}
		mb.mu.Lock()
		for _, p := range e.Partitions {
			mb.drop(tp{*p.Topic, p.Partition})
		}
		mb.mu.Unlock()
		start := time.Now()
		ch := mb.notify(kind, e.Partitions)
		if kind == Revoked && mb.reading.Load() {
			// Hand the partitions back only once the pipeline released them (or the bound).
			t := time.NewTimer(mb.drain)
			select {
			case <-ch.done:
			case <-mb.closing:
			case <-t.C:
				mb.log.Warn("revoke acknowledged before the pipeline released the partitions: its late decisions are refused by the partitions' owner epochs",
					zap.Duration("waited", mb.drain))
			}
			t.Stop()
			mb.m.RevokeDrain.Observe(time.Since(start).Seconds())
		}
		if err := c.IncrementalUnassign(e.Partitions); err != nil {
			return fmt.Errorf("group member: unassign: %w", err)
		}
	}
	return nil
}

// rejoinSoon lets the group client join again as soon as the group asks it to, after a rebalance.
// librdkafka (classic protocol) sends a JoinGroup at most once a second, unless a metadata response
// came in since; a cooperative rebalance asks every member to join twice in a row (once to revoke,
// once to hand the revoked partitions on), so a member that just joined the group held the second
// round, and the partitions moving to it, back for up to a second (measured: 0.9-1 s of the 1.1 s
// a join stalled a partition). A metadata request after each rebalance callback makes the next
// join immediate.
// The request runs off the group thread and is waited for by Close (the client must not be closed
// under it); none starts once the member is leaving.
func (mb *Member) rejoinSoon() {
	select {
	case <-mb.closing:
		return
	default:
	}
	mb.metadata.Add(1)
	go func() {
		defer mb.metadata.Done()
		if _, err := mb.c.GetMetadata(&mb.topics[0], false, 5000); err != nil {
			mb.log.Debug("metadata request after a rebalance", zap.Error(err))
		}
	}()
}

// notify hands the pipeline a change. While no session reads, nothing waits for it: acknowledged
// at once (the next session takes the assignment as it is then). Otherwise the channel has room
// for a burst; a full one is waited for, as long as a revoke waits for its drain, since a change
// acknowledged before its partitions were released would hand them on while they are read here.
func (mb *Member) notify(k Kind, parts []kafka.TopicPartition) *Change {
	mb.m.Rebalances.WithLabelValues(k.String()).Inc()
	mb.mu.Lock()
	n := len(mb.held)
	mb.mu.Unlock()
	mb.log.Info("rebalance", zap.Stringer("kind", k), zap.String("partitions", names(parts)), zap.Int("assigned", n))
	ch := &Change{Kind: k, done: make(chan struct{})}
	select {
	case mb.changes <- ch:
		return ch
	default:
	}
	if !mb.reading.Load() {
		ch.Done()
		return ch
	}
	t := time.NewTimer(mb.drain)
	defer t.Stop()
	select {
	case mb.changes <- ch:
	case <-mb.closing:
		ch.Done()
	case <-t.C:
		mb.log.Warn("the pipeline took no change of the assignment for the drain's bound: acknowledged unread", zap.Duration("waited", mb.drain))
		ch.Done()
	}
	return ch
}

// Grant numbers a member's grants of partitions, in the order they came (the group's assignments
// and the regrants): Wants returns the latest, and Took applies a take's result only to partitions
// granted no later.
type Grant uint64

// grant records a partition the group (or a regrant) assigned to this member anew: fresh (held 0:
// it may be taken from anyone), not stolen, under the next grant number. mu is held.
func (mb *Member) grant(k tp) {
	mb.grants++
	mb.held[k] = 0
	mb.granted[k] = mb.grants
	delete(mb.stolen, k)
}

// drop forgets a partition the group revoked or lost. mu is held.
func (mb *Member) drop(k tp) {
	delete(mb.held, k)
	delete(mb.granted, k)
	delete(mb.stolen, k)
}

// Wants is the assignment a session takes in the ledger: each partition with the epoch this
// member holds it at (0 for a fresh grant), leaving out the stolen ones; and the latest grant it
// reflects, for Took.
func (mb *Member) Wants() ([]ledger.Want, Grant) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	out := make([]ledger.Want, 0, len(mb.held))
	for k, e := range mb.held {
		if _, stolen := mb.stolen[k]; !stolen {
			out = append(out, ledger.Want{Topic: k.topic, Partition: k.part, Held: e})
		}
	}
	return out, mb.grants
}

// Took records a session's take of the wants of grant g: the epochs it holds now, and the
// partitions another member took meanwhile (not read again until the group grants them anew).
// A partition granted after g keeps that grant: the group revoked (or lost) and granted it again
// while the take ran, maybe after another member took it, so it is to be taken afresh, from
// anyone. Holding it at the older take's epoch instead would make the next take conditional on
// nobody having taken it since, and a take by the member it was given to in between would keep
// it out for a regrant period (the same for a steal the older take saw).
func (mb *Member) Took(g Grant, t ledger.Taken) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	for topic, ps := range t.Claims {
		for p, e := range ps {
			k := tp{topic, p}
			if _, ok := mb.held[k]; ok && mb.granted[k] <= g {
				mb.held[k] = e
			}
		}
	}
	for _, w := range t.Stolen {
		k := tp{w.Topic, w.Partition}
		if mb.granted[k] > g {
			continue
		}
		mb.steals++
		n := mb.steals
		mb.stolen[k] = n
		if mb.regrant > 0 {
			time.AfterFunc(mb.regrant, func() { mb.regranted(k, n) })
		}
		mb.log.Warn("partition taken by another member: not read until the group grants it again",
			zap.String("topic", w.Topic), zap.Int32("partition", w.Partition), zap.Int64("held_epoch", int64(w.Held)),
			zap.Duration("regrant", mb.regrant))
	}
}

// regranted takes back a partition that stayed stolen while the group kept assigning it here:
// steal n must be its latest (stolen again since, its regrant runs from then).
func (mb *Member) regranted(k tp, n uint64) {
	mb.mu.Lock()
	_, held := mb.held[k]
	again := held && mb.stolen[k] == n
	if again {
		mb.grant(k)
	}
	mb.mu.Unlock()
	if !again {
		return
	}
	mb.log.Warn("the group still assigns a partition another member took: taking it back",
		zap.String("topic", k.topic), zap.Int32("partition", k.part))
	select {
	case mb.changes <- &Change{Kind: Assigned, done: make(chan struct{})}:
	default:
	}
}

// Commit publishes offsets of the partitions this member is assigned to the group, for lag
// tooling (kafka.commit_group_offsets); relay never reads them back.
func (mb *Member) Commit(offs partition.Offsets) error {
	mb.mu.Lock()
	var tps []kafka.TopicPartition
	for _, t := range slices.Sorted(maps.Keys(offs)) {
		for p, o := range offs[t] {
			if _, ok := mb.held[tp{t, p}]; ok {
				topic := t
				tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(o)})
			}
		}
	}
	mb.mu.Unlock()
	if len(tps) == 0 {
		return nil
	}
	_, err := mb.c.CommitOffsets(tps)
	return err
}

func names(parts []kafka.TopicPartition) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = fmt.Sprintf("%s/%d", *p.Topic, p.Partition)
	}
	slices.Sort(s)
	return fmt.Sprint(s)
}
