// MySQL for the benchmarks: one database per job, dropped at Cleanup or as soon as the job is done.
//
// Invariant: a database is dropped only after the job's prepared XA branches were rolled back (their
// metadata locks would hold DROP DATABASE), and once.

package kit

import (
	"context"
	"database/sql"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
	"github.com/relay-sh/relay/internal/xa"
)

// CreateJob names a fresh job and makes its database (dropped at Cleanup or DropNow, after rolling
// back any XA branch whose tag starts with the job's name); it returns the job, the database's DSN
// and an open pool.
func (e *Env) CreateJob() (job, dsn string, db *sql.DB, err error) {
	job = "bench_" + harness.Suffix()
	d, err := harness.CreateDatabase(e.AdminDSN, "relay_bench_")
	if err != nil {
		return "", "", nil, err
	}
	if db, err = harness.Open(d.DSN); err != nil {
		_ = d.Drop()
		return "", "", nil, err
	}
	var once sync.Once
	drop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rs, err := xa.ListPrepared(ctx, db); err == nil {
				for _, r := range rs {
					if strings.HasPrefix(r.GTRID, job+"-") {
						_, _ = db.ExecContext(ctx, "XA ROLLBACK "+xa.XID(r.GTRID))
					}
				}
			}
			db.Close()
			if err := d.Drop(); err != nil {
				Logf("%v", err)
			}
		})
	}
	e.mu.Lock()
	if e.drops == nil {
		e.drops = map[string]func(){}
	}
	e.drops[job] = drop
	e.mu.Unlock()
	e.OnCleanup(drop)
	return job, d.DSN, db, nil
}

// DropNow drops the database made for job now (instead of at Cleanup).
func (e *Env) DropNow(job string) {
	e.mu.Lock()
	drop := e.drops[job]
	e.mu.Unlock()
	if drop != nil {
		drop()
	}
}

// ServerVersion is SELECT VERSION().
func ServerVersion(db *sql.DB) string {
	var v string
	_ = db.QueryRow("SELECT VERSION()").Scan(&v)
	return v
}

// VisibilityPerRecord maps every record to the commit time of the checkpoint that covers it and
// returns committed_at − producer timestamp per record, in seconds.
func VisibilityPerRecord(cps []committed.Checkpoint, times map[int32][]time.Time) []float64 {
	sort.Slice(cps, func(i, j int) bool { return cps[i].ID < cps[j].ID })
	var out []float64
	prev := map[int32]int64{}
	for _, c := range cps {
		for p, next := range c.Offsets {
			ts := times[p]
			for off := prev[p]; off < next && off < int64(len(ts)); off++ {
				if !ts[off].IsZero() {
					out = append(out, c.CommittedAt.Sub(ts[off]).Seconds())
				}
			}
			prev[p] = max(prev[p], next)
		}
	}
	return out
}
