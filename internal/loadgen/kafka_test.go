package loadgen

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/testenv"
)

// A run longer than the progress interval prints progress lines while it produces: records sent of
// the total, committed and aborted, the rate and the time left, the counts never going back.
func TestProgressLines(t *testing.T) {
	brokers := testenv.Brokers(t)
	topic := testenv.Topic(t, 1)
	ctx := testenv.Context(t, time.Minute)
	var out bytes.Buffer
	o := Options{Brokers: brokers, Topic: topic, Orders: 600, Batch: 20, Rate: 1500, AbortRate: 0.2, SKUs: 5, Windows: 1, Seed: 9,
		TxnID: "progress-" + topic, Progress: &out, ProgressEvery: 50 * time.Millisecond}
	if err := Run(ctx, o, NewTotals()); err != nil {
		t.Fatal(err)
	}
	// Run has returned: the reporting goroutine has ended, so out is read alone.
	line := regexp.MustCompile(`^loadgen: \S+: (\d+) of 600 records sent \(\d+\.\d%\), (\d+) committed, (\d+) in aborted transactions, \d+ records/s, (\S+) left$`)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("a 0.4 s run with progress every 50ms printed %d lines:\n%s", len(lines), out.String())
	}
	var prev [3]int
	for _, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("progress line %q", l)
		}
		var cur [3]int
		for i := range cur {
			cur[i], _ = strconv.Atoi(m[1+i])
			if cur[i] < prev[i] {
				t.Fatalf("progress went back: %q after %v", l, prev)
			}
		}
		if cur[1]+cur[2] > cur[0] {
			t.Fatalf("more committed and aborted than sent: %q", l)
		}
		prev = cur
	}
	if prev[0] == 0 {
		t.Fatalf("no progress line counted a record:\n%s", out.String())
	}
}

// A topic checked the moment it was created, while its partitions may still lack a leader (the
// broker answers "not leader"), is seen unused, not refused: the check asks again.
func TestTopicUseJustCreated(t *testing.T) {
	brokers := testenv.Brokers(t)
	ctx := testenv.Context(t, 2*time.Minute)
	for range 5 {
		topic := testenv.Topic(t, 16)
		if u, err := CheckTopicUse(ctx, brokers, topic); err != nil || !u.Exists || u.InUse() {
			t.Fatalf("a topic just created: %+v, %v", u, err)
		}
	}
}

// CheckTopicUse sees each sign of use Kafka shows: records, a consumer group with a member assigned
// to the topic, a consumer group with a committed offset (as relay's kafka.group_id has); an empty
// topic and a missing one show none.
func TestTopicUse(t *testing.T) {
	brokers := testenv.Brokers(t)
	topic := testenv.Topic(t, 2)
	ctx := testenv.Context(t, 2*time.Minute)
	check := func() TopicUse {
		t.Helper()
		u, err := CheckTopicUse(ctx, brokers, topic)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	if u, err := CheckTopicUse(ctx, brokers, topic+"_missing"); err != nil || u.Exists || u.InUse() {
		t.Fatalf("a missing topic: %+v, %v", u, err)
	}
	if u := check(); !u.Exists || u.Partitions != 2 || u.InUse() {
		t.Fatalf("a new topic: %+v", u)
	}

	// A member of a group that subscribed: assigned once the group has balanced.
	member := "member-" + topic
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": member, "enable.auto.commit": false})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(topic, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for u := check(); !slices.Contains(u.Assigned, member); u = check() {
		if time.Now().After(deadline) {
			t.Fatalf("group %s never showed as reading %s: %+v", member, topic, u)
		}
		c.Poll(200) // joins the group and takes the assignment
	}
	if u := check(); !u.InUse() || !strings.Contains(u.String(), "consumer groups with members reading it: "+member) {
		t.Fatalf("with a member: %+v %q", u, u)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// A group that only committed offsets (assign, no membership), as relay does.
	committer := "committer-" + topic
	cc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": committer, "enable.auto.commit": false})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := cc.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: 1, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	if u := check(); !slices.Equal(u.Committed, []string{committer}) || slices.Contains(u.Assigned, member) || u.Records != 0 || !u.InUse() {
		t.Fatalf("after a commit of %s and %s gone: %+v", committer, member, u)
	}

	if err := Run(ctx, Options{Brokers: brokers, Topic: topic, Orders: 10, Batch: 10, SKUs: 1, Windows: 1, Seed: 3}, NewTotals()); err != nil {
		t.Fatal(err)
	}
	if u := check(); u.Records != 10 || !strings.Contains(u.String(), "it is not empty (10 offsets of records and transaction markers in 2 partitions)") {
		t.Fatalf("after 10 records: %+v %q", u, u)
	}
}
