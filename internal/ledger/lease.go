// The lease: the owner's renewal loop and the sessions it records.
//
// Invariant: a renewal succeeds only on the lock session, still holding the lock, at the epoch
// this fence holds; every session a pool opens is recorded by a renewal before it is used, or
// refused (closed unused) once no renewal can record it; Deadline is extended only from a
// renewal that succeeded.

package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/database"
)

// renewEvery is how often the owner renews its lease: several renewals fit in one lease, so a
// slow one does not lose it.
func (c FenceConfig) renewEvery() time.Duration { return min(time.Second, c.EffectiveLease()/5) }

// renewTimeout bounds one renewal (or one pruning pass): at least a renewal interval, and a
// quarter of the lease, so that a hung statement is given up long before the lease runs out.
func (c FenceConfig) renewTimeout() time.Duration {
	return max(c.renewEvery(), c.EffectiveLease()/4)
}

// recorded is what the lease row records of an owner: its sessions, and where it answers /readyz.
type recorded struct {
	Lock   database.Sessions            `json:"lock"`
	Pools  map[string]database.Sessions `json:"pools"`
	Readyz string                       `json:"readyz,omitempty"`
	Node   string                       `json:"node,omitempty"` // Galera node of the lock session
	// LeaseUS is the owner's lease length (µs): a reader whose clock did not write the lease
	// (another Galera node) takes the owner for gone once it saw the lease unchanged that long.
	LeaseUS int64 `json:"lease_us,omitempty"`
}

// record renews at once, so that a session just opened is recorded before it is used (a host
// that vanished a moment after opening it would otherwise leave it unknown to the next owner).
// It is the pools' OnOpen hook: an error refuses the connection. Once the lease is lost (before
// the session opened, or by the very renewal that was to record it) nothing records it any more,
// so it fails with ErrFenceLost: such a session, used by a decision, would keep its row locks
// after the host vanished until wait_timeout, and the next owner's takeover ends only recorded
// sessions. A released fence refuses nothing: its pools are no longer hooked (Release), and what
// the process opens before it takes the fence again decides nothing.
func (f *Fence) record() error {
	done := make(chan error, 1)
	select {
	case f.kick <- done:
	case <-f.stop:
		return nil
	case <-f.lost:
		return f.refused()
	}
	select {
	case err := <-done:
		if err != nil {
			return f.refused()
		}
		return nil
	case <-f.stop:
		return nil
	case <-f.lost:
		return f.refused()
	}
}

// refused is record's error once the lease is lost. The failed renewal's error is quoted, not
// wrapped: a dead lock connection's driver.ErrBadConn would make database/sql retry the refused
// connection as a bad one, opening another session only to refuse it too.
func (f *Fence) refused() error {
	<-f.lost
	return fmt.Errorf("%w: fence %s: a new session would go unrecorded (lease not renewed: %v)", ErrFenceLost, f.key, f.lostErr)
}

// start runs task beside the fence until Release, which waits for it, ticking at the renewal's pace.
func (f *Fence) start(task func(tick <-chan time.Time)) {
	f.tasks.Add(1)
	go func() {
		defer f.tasks.Done()
		t := time.NewTicker(f.cfg.renewEvery())
		defer t.Stop()
		task(t.C)
	}()
}

// watch renews the lease on the lock connection. A renewal that fails (the connection died or
// hung past its deadline, the lock or the epoch is gone) closes Lost; decisions already stopped
// being allowed at Deadline, before the lease can run out on the server.
func (f *Fence) watch(tick <-chan time.Time) {
	for {
		select {
		case <-f.stop:
			return
		case done := <-f.kick:
			err := f.renew()
			if err != nil {
				f.lose(err)
			}
			done <- err
			if err != nil {
				return
			}
		case <-tick:
			if err := f.renew(); err != nil {
				f.lose(err)
				return
			}
		}
	}
}

// lose closes Lost for the failed renewal err. From then on the pools refuse new connections
// (record) until Release unhooks them.
func (f *Fence) lose(err error) {
	f.lostErr = err
	close(f.lost)
}

// prune forgets, at the renewal's pace, the pools' closed sessions the server no longer has, so
// that the sessions each renewal records stay those that may still hold something. It runs apart
// from watch: a pool may open a connection to answer it, and that connection's record waits for
// watch. A failed pass is only retried: the list is then longer, never shorter, than it should be.
func (f *Fence) prune(tick <-chan time.Time) {
	for {
		select {
		case <-f.stop:
			return
		case <-f.lost:
			return
		case <-tick:
		}
		for _, p := range f.cfg.Pools {
			ctx, cancel := context.WithTimeout(context.Background(), f.cfg.renewTimeout())
			_ = p.Sessions.Prune(ctx, p.DB)
			cancel()
		}
	}
}

// sessions renders the lock session and the pools' server sessions as recorded with the lease.
func (f *Fence) sessions() string {
	r := recorded{Lock: database.Sessions{Boot: f.boot, IDs: []int64{f.connID}}, Pools: map[string]database.Sessions{},
		Readyz: f.cfg.Readyz, Node: f.node, LeaseUS: f.cfg.EffectiveLease().Microseconds()}
	for _, p := range f.cfg.Pools {
		r.Pools[p.Name] = p.Sessions.List()
	}
	js, _ := json.Marshal(r) // ints and strings always marshal
	return string(js)
}

// beforeRenew, when set (tests only), runs at the start of every renewal: a test holds a
// renewal there, in flight, to race it with Release.
var beforeRenew func()

func (f *Fence) renew() error {
	if beforeRenew != nil {
		beforeRenew()
	}
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.renewTimeout())
	defer cancel()
	sent := time.Now()
	epoch := f.Epoch()
	res, err := f.conn.ExecContext(ctx, `UPDATE relay_leases SET lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, sessions = ?
		WHERE job = ? AND owner_epoch = ? AND conn_id = CONNECTION_ID() AND IS_USED_LOCK(?) = CONNECTION_ID()`,
		f.cfg.EffectiveLease().Microseconds(), f.sessions(), f.key, epoch, LockName(f.key))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("fence %s: lease not renewed: lock or epoch %d lost", f.key, epoch)
	}
	f.renewed(sent)
	return nil
}

// renewed extends Deadline from a renewal sent at sent: the server set the lease from its own
// clock when it ran the statement, after sent, so sent + lease lies before the server's expiry
// as long as the two clocks run at the same rate; a fifth of the lease is kept as a margin for
// rates that differ and for the decision's own round trip.
func (f *Fence) renewed(sent time.Time) {
	lease := f.cfg.EffectiveLease()
	f.mu.Lock()
	f.valid = sent.Add(lease - lease/5)
	f.mu.Unlock()
}
