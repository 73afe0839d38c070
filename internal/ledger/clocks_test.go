package ledger

import (
	"database/sql"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/database"
)

// lease is a holder row whose lease node recorded with until, remaining by the reader's clock.
func lease(node string, epoch int64, until time.Time, remaining time.Duration) holderRow {
	return holderRow{claimed: true, epoch: epoch, lease: sql.NullTime{Time: until, Valid: true}, remaining: remaining,
		sessions: recorded{Lock: database.Sessions{IDs: []int64{7}}, Node: node, LeaseUS: (2 * time.Second).Microseconds()}}
}

// TestJudgeAcrossClocks: a lease this node wrote is judged by the server's clock at once; one
// another node wrote is never compared with this node's clock, only watched: unsure at first,
// live once its value changed, over once unchanged for its owner's lease.
func TestJudgeAcrossClocks(t *testing.T) {
	c := newClocks("node-a")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if s := c.judge("j", lease("node-a", 1, t0, time.Second)); s != leaseLive {
		t.Fatalf("this node's lease with 1 s left: %v, want live", s)
	}
	if s := c.judge("j", lease("node-a", 1, t0, -time.Second)); s != leaseOver {
		t.Fatalf("this node's lease run out by its clock: %v, want over", s)
	}
	released := lease("node-b", 1, t0, time.Hour)
	released.sessions.Lock.IDs = nil
	if s := c.judge("k", released); s != leaseOver {
		t.Fatalf("a released lease: %v, want over", s)
	}
	// Another node's lease that looks run out by this node's clock, and one that looks live: the
	// clock says nothing of either.
	for _, remaining := range []time.Duration{-time.Hour, time.Hour} {
		c := newClocks("node-a")
		if s := c.judge("k", lease("node-b", 1, t0, remaining)); s != leaseUnsure {
			t.Fatalf("another node's lease read once (%v left by this clock): %v, want unsure", remaining, s)
		}
		if s := c.judge("k", lease("node-b", 1, t0.Add(time.Second), remaining)); s != leaseLive {
			t.Fatalf("another node's lease renewed since: %v, want live", s)
		}
		if s := c.judge("k", lease("node-b", 1, t0.Add(time.Second), remaining)); s != leaseLive {
			t.Fatalf("another node's lease renewed, read again unchanged: %v, want live", s)
		}
		// Seen unchanged for the owner's whole lease (2 s, as it recorded): over.
		s := c.seen["k"]
		s.at = s.at.Add(-2 * time.Second)
		c.seen["k"] = s
		if s := c.judge("k", lease("node-b", 1, t0.Add(time.Second), remaining)); s != leaseOver {
			t.Fatalf("another node's lease unchanged for its lease: %v, want over", s)
		}
		if s := c.judge("k", lease("node-b", 2, t0.Add(time.Second), remaining)); s != leaseLive {
			t.Fatalf("another node's lease moved to a new epoch: %v, want live", s)
		}
	}
}
