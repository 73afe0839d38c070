package consumer

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/relay-sh/relay/internal/fault"
	"github.com/relay-sh/relay/internal/testenv"
)

// What start-up asks Kafka: nil when every topic exists; a topic missing, or no broker answering,
// is an error start-up waits out (fault.Unavailable), never a Permanent one as in a session.
func TestCheckTopics(t *testing.T) {
	brokers := testenv.Brokers(t)
	topic := testenv.Topic(t, 2)
	ctx := testenv.Context(t, time.Minute)
	if err := CheckTopics(ctx, Options{Brokers: brokers, Topics: []string{topic}, GroupID: "g-" + topic}, zap.NewNop()); err != nil {
		t.Fatalf("existing topic: %v", err)
	}
	missing := topic + "_missing"
	err := CheckTopics(ctx, Options{Brokers: brokers, Topics: []string{topic, missing}, GroupID: "g-" + topic}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "topic "+missing+" does not exist") || !fault.Unavailable(err) || fault.IsPermanent(err) {
		t.Fatalf("missing topic: %v (Unavailable %v, Permanent %v)", err, fault.Unavailable(err), fault.IsPermanent(err))
	}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err = CheckTopics(actx, Options{Brokers: testenv.FreeAddr(t), Topics: []string{topic}, GroupID: "g-" + topic}, zap.NewNop())
	if err == nil || !fault.Unavailable(err) {
		t.Fatalf("no broker: %v, want an error start-up waits out", err)
	}
}
