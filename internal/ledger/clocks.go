// Leases across clocks: how a process tells whether another process's lease still runs.
//
// Invariant: a lease is compared with a server's clock only on the server whose clock wrote it:
// one recorded by this node (every lease, off a Galera cluster) is judged by lease_until against
// UTC_TIMESTAMP(6), exactly and at once. One recorded by another Galera node (or an earlier
// lifetime of this one: wsrep_gcomm_uuid names a node process) was set by that node's clock,
// which may be seconds off this one's; it is never compared with this node's clock. It counts as
// running until this process has read it unchanged (epoch and lease_until) for its owner's whole
// lease on this process's monotonic clock, and as renewing once it changed after this process
// first read it. Until either is known it is unsure, and a caller that needs the answer waits
// (settle): at most one lease, and one renewal interval for an owner that renews.

package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
)

// leaseState is what a process can tell of another process's lease.
type leaseState int

const (
	leaseOver   leaseState = iota // released, run out, or seen standing still for a whole lease
	leaseLive                     // runs by this node's clock, or seen renewed
	leaseUnsure                   // recorded by another node's clock and not watched long enough yet
)

// settlePoll is how often settle reads an unsure lease again: well within an owner's renewal
// interval (at most a second), so a renewal is seen soon after it commits.
const settlePoll = 200 * time.Millisecond

// sighting is a lease value as this process first read it.
type sighting struct {
	epoch   int64
	until   time.Time
	at      time.Time // when this value was first read (monotonic)
	renewed bool      // it replaced a value this process had read before
}

// clocks judges leases for one process reading through one node.
type clocks struct {
	node string // the Galera node of this process's reads ("" off a cluster)
	mu   sync.Mutex
	seen map[string]sighting // by process key
}

func newClocks(node string) *clocks { return &clocks{node: node, seen: map[string]sighting{}} }

// clocksOf returns the judge for reads through db: its node, when db is a Galera node.
func clocksOf(ctx context.Context, db *sql.DB) (*clocks, error) {
	g, err := database.ReadGalera(ctx, db)
	if err != nil {
		return nil, err
	}
	if !g.On {
		return newClocks(""), nil
	}
	return newClocks(g.Node), nil
}

// sameClock reports whether h's lease was written by the clock this process reads with.
func (c *clocks) sameClock(h holderRow) bool { return h.sessions.Node == c.node }

// leaseOf is how long h's owner renews its lease for. A lease written by a relay before it
// recorded that is taken to be DefaultLease long.
func leaseOf(h holderRow) time.Duration {
	if h.sessions.LeaseUS > 0 {
		return time.Duration(h.sessions.LeaseUS) * time.Microsecond
	}
	return DefaultLease
}

// judge tells what this process can say now of key's lease as read in h, and remembers h's value
// (a read inside a transaction counts too: it is the latest the transaction may act on).
func (c *clocks) judge(key string, h holderRow) leaseState {
	switch {
	case !h.claimed || !h.lease.Valid || len(h.sessions.Lock.IDs) == 0: // no lease, or released cleanly
		return leaseOver
	case c.sameClock(h):
		if h.remaining > 0 {
			return leaseLive
		}
		return leaseOver
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	s, ok := c.seen[key]
	if !ok || s.epoch != h.epoch || !s.until.Equal(h.lease.Time) {
		s = sighting{epoch: h.epoch, until: h.lease.Time, at: now, renewed: ok}
		c.seen[key] = s
	}
	switch {
	case now.Sub(s.at) >= leaseOf(h):
		return leaseOver
	case s.renewed:
		return leaseLive
	}
	return leaseUnsure
}

// expiredFor is how long h's lease has run out, as far as this process can tell: by this node's
// clock when it wrote the lease, else since the lease stood still for a whole lease here.
func (c *clocks) expiredFor(key string, h holderRow) time.Duration {
	if c.sameClock(h) {
		return -h.remaining
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(time.Since(c.seen[key].at)-leaseOf(h), 0)
}

// settle reads the leases of keys again, every settlePoll, until each is judged live or over.
func (c *clocks) settle(ctx context.Context, l *Ledger, keys []string) error {
	for pending := slices.Clone(keys); ; {
		var still []string
		for _, k := range pending {
			h, err := readHolder(ctx, l.ForKey(k))
			if err != nil {
				return fmt.Errorf("lease of %s: %w", k, err)
			}
			if c.judge(k, h) == leaseUnsure {
				still = append(still, k)
			}
		}
		if pending = still; len(pending) == 0 {
			return nil
		}
		if err := fault.SleepContext(ctx, settlePoll); err != nil {
			return fmt.Errorf("leases of %v: %w", pending, err)
		}
	}
}

// unsureError: a claim (or a check inside a transaction) needs to know whether the leases of keys,
// recorded by another node's clock, still run; the caller settles them outside the transaction and
// tries again.
type unsureError struct{ keys []string }

func (e *unsureError) Error() string {
	return fmt.Sprintf("leases of %v recorded by another Galera node not yet judged", e.keys)
}
