// What Kafka shows of a topic's readers, for loadgen when no ledger can say whether a job reads the
// topic. Invariant: only reads (topic description, offsets, consumer groups); a topic is in use
// when it holds records, some consumer group committed an offset on it or has a member assigned
// to it; nothing Kafka cannot show (a job that has not started yet) is claimed.

package loadgen

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/relay-sh/relay/internal/fault"
)

// TopicUse is what Kafka shows of a topic's use.
type TopicUse struct {
	Topic      string
	Exists     bool
	Partitions int
	Records    int64    // offsets between the low and the high watermarks (records, transaction markers), summed over partitions
	Committed  []string // consumer groups with a committed offset on a partition of the topic (relay's own, kafka.group_id, among them)
	Assigned   []string // consumer groups with a member assigned a partition of the topic
}

// InUse says whether anything shows the topic is read or written already.
func (u TopicUse) InUse() bool { return u.Records > 0 || len(u.Committed) > 0 || len(u.Assigned) > 0 }

// String lists what shows the use, for a refusal.
func (u TopicUse) String() string {
	var why []string
	if u.Records > 0 {
		why = append(why, fmt.Sprintf("it is not empty (%d offsets of records and transaction markers in %d partitions)", u.Records, u.Partitions))
	}
	if len(u.Committed) > 0 {
		why = append(why, "consumer groups with offsets committed on it: "+strings.Join(u.Committed, ", "))
	}
	if len(u.Assigned) > 0 {
		why = append(why, "consumer groups with members reading it: "+strings.Join(u.Assigned, ", "))
	}
	if len(why) == 0 {
		return "no records, no consumer group"
	}
	return strings.Join(why, "; ")
}

// CheckTopicUse asks brokers what reads or wrote topic, within 30 s. A broker's passing answer (a
// partition without its leader yet, as just after the topic was created) is asked again, backing
// off; only a lasting one is an error.
func CheckTopicUse(ctx context.Context, brokers, topic string) (TopicUse, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers})
	if err != nil {
		return TopicUse{Topic: topic}, err
	}
	defer a.Close()
	var u TopicUse
	err = fault.Do(ctx, fault.DefaultPolicy(), func(ctx context.Context) error {
		u, err = checkTopicUse(ctx, a, topic)
		return err
	}, nil)
	return u, err
}

func checkTopicUse(ctx context.Context, a *kafka.AdminClient, topic string) (TopicUse, error) {
	u := TopicUse{Topic: topic}
	td, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames([]string{topic}))
	if err != nil {
		return u, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	d := td.TopicDescriptions[0]
	switch d.Error.Code() {
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
		// Groups may still hold offsets of a deleted topic of that name: look at them too.
	case kafka.ErrNoError:
		u.Exists, u.Partitions = true, len(d.Partitions)
	default:
		return u, fmt.Errorf("describe topic %s: %w", topic, d.Error)
	}
	if u.Exists {
		if u.Records, err = records(ctx, a, topic, d.Partitions); err != nil {
			return u, err
		}
	}
	gl, err := a.ListConsumerGroups(ctx)
	if err != nil {
		return u, fmt.Errorf("list consumer groups: %w", err)
	}
	if len(gl.Errors) > 0 {
		return u, fmt.Errorf("list consumer groups: %w", gl.Errors[0])
	}
	var groups []string
	for _, g := range gl.Valid {
		groups = append(groups, g.GroupID)
	}
	slices.Sort(groups)
	if len(groups) == 0 {
		return u, nil
	}
	gd, err := a.DescribeConsumerGroups(ctx, groups)
	if err != nil {
		return u, fmt.Errorf("describe consumer groups: %w", err)
	}
	for _, g := range gd.ConsumerGroupDescriptions {
		switch g.Error.Code() {
		case kafka.ErrNoError:
		case kafka.ErrGroupIDNotFound:
			continue // deleted since it was listed
		default:
			return u, fmt.Errorf("describe consumer group %s: %w", g.GroupID, g.Error)
		}
		if slices.ContainsFunc(g.Members, func(m kafka.MemberDescription) bool {
			return slices.ContainsFunc(m.Assignment.TopicPartitions, func(tp kafka.TopicPartition) bool { return *tp.Topic == topic })
		}) {
			u.Assigned = append(u.Assigned, g.GroupID)
		}
	}
	// One group per request: the client takes no more.
	for _, g := range groups {
		res, err := a.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: g}})
		if ke, ok := err.(kafka.Error); ok && ke.Code() == kafka.ErrGroupIDNotFound {
			continue
		}
		if err != nil {
			return u, fmt.Errorf("offsets of consumer group %s: %w", g, err)
		}
		committed := false
		for _, r := range res.ConsumerGroupsTopicPartitions {
			for _, tp := range r.Partitions {
				if *tp.Topic != topic {
					continue
				}
				if tp.Error != nil {
					return u, fmt.Errorf("offsets of consumer group %s on %s/%d: %w", g, topic, tp.Partition, tp.Error)
				}
				committed = committed || tp.Offset >= 0
			}
		}
		if committed {
			u.Committed = append(u.Committed, g)
		}
	}
	return u, nil
}

// records sums high minus low watermark over the partitions of topic.
func records(ctx context.Context, a *kafka.AdminClient, topic string, parts []kafka.TopicPartitionInfo) (int64, error) {
	var n int64
	for _, spec := range []kafka.OffsetSpec{kafka.EarliestOffsetSpec, kafka.LatestOffsetSpec} {
		q := map[kafka.TopicPartition]kafka.OffsetSpec{}
		for _, p := range parts {
			q[kafka.TopicPartition{Topic: &topic, Partition: int32(p.Partition)}] = spec
		}
		res, err := a.ListOffsets(ctx, q)
		if err != nil {
			return 0, fmt.Errorf("offsets of %s: %w", topic, err)
		}
		for tp, r := range res.ResultInfos {
			if r.Error.Code() != kafka.ErrNoError {
				return 0, fmt.Errorf("offsets of %s/%d: %w", topic, tp.Partition, r.Error)
			}
			if spec == kafka.EarliestOffsetSpec {
				n -= int64(r.Offset)
			} else {
				n += int64(r.Offset)
			}
		}
	}
	return n, nil
}
