// Taking the fence: the lock, the lease rule, and the takeover of an owner that stopped renewing.
//
// Invariant: Acquire returns a Fence only holding the job's GET_LOCK and a claimed (bumped) epoch;
// it ends another owner's recorded sessions only once that owner's lease has run out by the
// server's clock (or when they are this process's own dead lock session), never while it renews.

package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/fault"
)

// Acquire takes the instance's lock and bumps its owner epoch. When the lock is held, it fails
// with ErrFenced naming the holder while the holder renews its lease; with TakeOver, a holder that
// stopped renewing is waited for until its lease runs out (server clock), then its recorded
// sessions are ended (KILL: a prepared branch survives it, an unprepared transaction rolls back)
// and the fence is taken with a higher epoch, which fails every later decision of the old owner.
// Instances of another layout (a different number of instances) must all be stopped before the
// layout changes.
func Acquire(ctx context.Context, l *Ledger, cfg FenceConfig) (*Fence, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("fence %s: %w", l.key, err)
	}
	f := &Fence{conn: conn, key: l.key, cfg: cfg, lost: make(chan struct{}), stop: make(chan struct{}),
		kick: make(chan chan error)}
	if f.connID, err = database.ConnID(ctx, conn); err == nil {
		f.boot, err = database.Boot(ctx, l.db)
	}
	if err == nil && cfg.Cluster {
		var g database.Galera
		g, err = database.ReadGalera(ctx, conn)
		f.node = g.Node
	}
	if err != nil {
		database.Discard(conn)
		return nil, fmt.Errorf("fence %s: %w", l.key, err)
	}
	f.clocks = newClocks(f.node)
	if err := f.lock(ctx, l); err != nil {
		database.Discard(conn)
		return nil, err
	}
	// Row lock waits on this session are short: the claim and the renewals must notice a
	// session that holds the job row and will never let go (see claimRow).
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", lockWaitSeconds)); err != nil {
		f.Release()
		return nil, fmt.Errorf("fence %s: %w", l.key, err)
	}
	if err := f.claimRow(ctx, l); err != nil {
		f.Release()
		return nil, err
	}
	for _, p := range cfg.Pools {
		p.Sessions.OnOpen(f.record)
	}
	f.start(f.watch)
	f.start(f.prune)
	return f, nil
}

// claimRow runs claim until it succeeds. Instances starting together queue on the job row; a
// deadlock report is retried like any. A lock wait on the job row that outlasts the short wait
// is a session of an earlier owner stuck in a decision (its host vanished mid-transaction: the
// server keeps the session, and the row lock, until wait_timeout). With TakeOver, that owner's
// recorded sessions are ended once its lease ran out, as when it still held the lock.
func (f *Fence) claimRow(ctx context.Context, l *Ledger) error {
	p := fault.DefaultPolicy()
	for attempt := 1; ; attempt++ {
		if f.cfg.Cluster {
			if err := f.otherNode(ctx, l); err != nil {
				return err
			}
		}
		err := f.claim(ctx, l, f.cfg.Owner, l.layout)
		if err == nil {
			return nil
		}
		if fault.IsMySQL(err, fault.ErLockWaitTimeout) && f.cfg.TakeOver {
			if err := f.endStaleOwner(ctx, l); err != nil {
				return err
			}
			continue
		}
		// The claim must know whether leases another node recorded still run: watched outside
		// its transaction, they are judged there the next time (a lease renewed meanwhile refuses).
		var unsure *unsureError
		if errors.As(err, &unsure) {
			if err := f.clocks.settle(ctx, l, unsure.keys); err != nil {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
			continue
		}
		// A claim from another node found inside the transaction: otherNode, next, waits for that
		// owner's lease or refuses.
		again := fault.Retryable(err) || errors.Is(err, errClaimedElsewhere)
		if !again || attempt >= p.Attempts {
			return err
		}
		if err := fault.SleepContext(ctx, p.Backoff(attempt)); err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
	}
}

// ResolverOwner starts the owner name of a resolver's fence on another process's key (see
// commit.Resolver): a process taking its own key back waits for it instead of standing down.
const ResolverOwner = "resolver of "

// endStaleOwner waits until the recorded owner's lease ran out (it cannot renew: this process
// holds the lock) and ends its recorded sessions.
func (f *Fence) endStaleOwner(ctx context.Context, l *Ledger) error {
	start := time.Now()
	for {
		h, err := readHolder(ctx, l)
		if err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		if !h.claimed || !h.lease.Valid {
			return fmt.Errorf("%w: job %s: the job row is locked by a session of an owner without a lease", ErrFenced, l.key)
		}
		if h.remaining <= 0 {
			return f.takeOver(ctx, l, h, time.Since(start))
		}
		if err := waitLease(ctx, l, h); err != nil {
			return err
		}
	}
}

// waitLease sleeps until the holder's lease may have run out, but looks again within half a
// second (the holder may renew, or let go).
func waitLease(ctx context.Context, l *Ledger, h holderRow) error {
	if err := fault.SleepContext(ctx, min(h.remaining+time.Millisecond, 500*time.Millisecond)); err != nil {
		return fmt.Errorf("fence %s: %w", l.key, err)
	}
	return nil
}

// lock takes the GET_LOCK, through the lease rule when its holder stopped renewing.
func (f *Fence) lock(ctx context.Context, l *Ledger) error {
	wait := lockWaitSeconds
	var seen sql.NullTime // the holder's lease when this process started watching it
	start := time.Now()
	for {
		var got sql.NullInt64
		if err := f.conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, LockName(l.key), wait).Scan(&got); err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
		wait = 0
		h, err := readHolder(ctx, l)
		if err != nil {
			return fmt.Errorf("fence %s: %w", l.key, err)
		}
		prev := f.cfg.Prev
		switch {
		case !h.holder.Valid:
			continue // released meanwhile
		case f.cfg.TakeOver && h.claimed && strings.HasPrefix(h.owner, ResolverOwner) && h.remaining > 0:
			// Another process's resolver settling this instance's branches (it was stalled or
			// restarting): it lets go once done, within seconds.
			if err := fault.SleepContext(ctx, 200*time.Millisecond); err != nil {
				return fmt.Errorf("fence %s: %w", l.key, err)
			}
			continue
		case !h.claimed || h.holder.Int64 != h.connID || !database.SameBoot(h.sessions.Lock.Boot, f.boot):
			// Not the recorded owner's lock session (an operator command, an older relay, or a
			// session of a later server lifetime that happens to carry the recorded id).
			return fmt.Errorf("%w: job %s is running elsewhere: %s", ErrFenced, l.key, Holder(ctx, l))
		case prev != nil && h.epoch == prev.Epoch() && h.connID == prev.connID:
			// This process's own lock session, cut off from it but alive on the server: only that
			// one is ended (the process's other sessions are its own business, see endZombies).
			killed, err := database.Kill(ctx, l.db, database.Sessions{Boot: prev.boot, IDs: []int64{prev.connID}}, f.connID)
			if err != nil {
				return fmt.Errorf("fence %s: end own lock session: %w", l.key, err)
			}
			f.TookOver = &Takeover{Owner: h.owner, Epoch: h.epoch, Own: true, Killed: killed}
			wait = lockWaitSeconds
			continue
		case !f.cfg.TakeOver || !h.lease.Valid:
			return fmt.Errorf("%w: job %s is running elsewhere: %s", ErrFenced, l.key, Holder(ctx, l))
		case h.remaining <= 0:
			if err := f.takeOver(ctx, l, h, time.Since(start)); err != nil {
				return err
			}
			wait = lockWaitSeconds
			continue
		case seen.Valid && !seen.Time.Equal(h.lease.Time):
			return fmt.Errorf("%w: job %s is running elsewhere: %s (renewing its lease)", ErrFenced, l.key, Holder(ctx, l))
		}
		// The holder has not renewed since this process looked: it may have vanished. Its lease
		// tells how long it may still decide; wait that out (or see it renew).
		seen = h.lease
		if err := waitLease(ctx, l, h); err != nil {
			return err
		}
	}
}

// takeOver ends the sessions the lock's holder recorded (each only on the server lifetime it was
// recorded in), and the holder's lock session itself; never this fence's own lock session.
func (f *Fence) takeOver(ctx context.Context, l *Ledger, h holderRow, waited time.Duration) error {
	t := &Takeover{Owner: h.owner, Epoch: h.epoch, ExpiredFor: -h.remaining, WaitedLease: waited}
	for _, p := range append(slices.Clone(f.cfg.Pools), f.cfg.End...) {
		killed, err := database.Kill(ctx, p.DB, h.sessions.Pools[p.Name], f.connID)
		t.Killed = append(t.Killed, killed...)
		if err != nil {
			return fmt.Errorf("fence %s: end sessions of %s: %w", l.key, h.owner, err)
		}
	}
	killed, err := database.Kill(ctx, l.db, h.sessions.Lock, f.connID)
	t.Killed = append(t.Killed, killed...)
	if err != nil {
		return fmt.Errorf("fence %s: end lock session of %s: %w", l.key, h.owner, err)
	}
	f.TookOver = t
	return nil
}
