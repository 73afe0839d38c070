package kit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/xa"
)

// Open opens a pool with relay's session settings.
func Open(dsn string) (*sql.DB, error) {
	return database.Open(dsn, database.Session{WaitTimeout: time.Hour, LockWaitTimeout: 10 * time.Second})
}

// CreateDatabase makes a fresh database (dropped at Cleanup, after rolling back any XA branch
// whose tag starts with job) and returns its DSN and an open pool.
func (e *Env) CreateDatabase(job string) (string, *sql.DB, error) {
	cfg, err := mysql.ParseDSN(e.AdminDSN)
	if err != nil {
		return "", nil, err
	}
	name := "relay_bench_" + Suffix()
	admin, err := Open(cfg.FormatDSN())
	if err != nil {
		return "", nil, err
	}
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		admin.Close()
		return "", nil, err
	}
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := Open(dsn)
	if err != nil {
		admin.Close()
		return "", nil, err
	}
	var once sync.Once
	drop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rs, err := xa.Recover(ctx, db); err == nil {
				for _, r := range rs {
					if len(r.GTRID) > len(job) && r.GTRID[:len(job)+1] == job+"-" {
						_, _ = db.ExecContext(ctx, "XA ROLLBACK "+xa.XID(r.GTRID))
					}
				}
			}
			db.Close()
			if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
				Logf("drop database %s: %v", name, err)
			}
			admin.Close()
		})
	}
	e.mu.Lock()
	if e.drops == nil {
		e.drops = map[string]func(){}
	}
	e.drops[job] = drop
	e.mu.Unlock()
	e.OnCleanup(drop)
	return dsn, db, nil
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

// CommittedOffsets is what the ledger says is committed for topic: in XA mode the offsets of the
// newest COMMITTED checkpoint, in held mode the per-partition rows. Missing tables read as nothing.
func CommittedOffsets(ctx context.Context, db *sql.DB, job, topic string, held bool) (map[int32]int64, error) {
	out := map[int32]int64{}
	if held {
		// Held mode's per-partition rows: relay_offsets (current ledger), relay_held_offsets (before).
		for _, table := range []string{"relay_offsets", "relay_held_offsets"} {
			rows, err := db.QueryContext(ctx, `SELECT kpartition, next_offset FROM `+table+` WHERE job = ? AND topic = ?`, job, topic)
			if isNoTable(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			for rows.Next() {
				var p int32
				var o int64
				if err := rows.Scan(&p, &o); err != nil {
					return nil, err
				}
				out[p] = o
			}
			return out, rows.Err()
		}
		return out, nil
	}
	var offs string
	err := db.QueryRowContext(ctx, `SELECT offsets FROM relay_checkpoints WHERE job = ? AND state = 'COMMITTED'
		ORDER BY checkpoint_id DESC LIMIT 1`, job).Scan(&offs)
	if errors.Is(err, sql.ErrNoRows) {
		return out, nil
	}
	if err != nil {
		return noTable(out, err)
	}
	var m map[string]map[int32]int64
	if err := json.Unmarshal([]byte(offs), &m); err != nil {
		return nil, err
	}
	for p, o := range m[topic] {
		out[p] = o
	}
	return out, nil
}

func noTable(out map[int32]int64, err error) (map[int32]int64, error) {
	if isNoTable(err) {
		return out, nil
	}
	return nil, err
}

func isNoTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

// Reached reports whether got covers end on every partition.
func Reached(got, end map[int32]int64) bool {
	for p, hi := range end {
		if got[p] < hi {
			return false
		}
	}
	return true
}

// WaitCommitted polls the ledger every interval until it covers end; it returns the time of the
// first poll that saw it. alive reports whether relay still runs (a dead relay ends the wait).
func WaitCommitted(db *sql.DB, job, topic string, held bool, end map[int32]int64, every, limit time.Duration, alive func() bool) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := CommittedOffsets(ctx, db, job, topic, held)
		cancel()
		now := time.Now()
		if err == nil && Reached(got, end) {
			return now, nil
		}
		if !alive() {
			return now, fmt.Errorf("relay exited before committing the end of %s (ledger: %v, end: %v)", topic, got, end)
		}
		if now.After(deadline) {
			return now, fmt.Errorf("ledger did not reach the end of %s within %s (ledger: %v, end: %v, err: %v)", topic, limit, got, end, err)
		}
		time.Sleep(every)
	}
}

// LedgerCheckpoint is one committed row as the latency analysis needs it.
type LedgerCheckpoint struct {
	ID          int64
	Offsets     map[int32]int64
	Records     int64
	DecidedAt   time.Time
	CommittedAt time.Time
}

// Checkpoints lists the job's committed checkpoints, oldest first.
func Checkpoints(ctx context.Context, db *sql.DB, job, topic string) ([]LedgerCheckpoint, error) {
	rows, err := db.QueryContext(ctx, `SELECT checkpoint_id, offsets, records,
		CAST(UNIX_TIMESTAMP(decided_at) AS CHAR), CAST(UNIX_TIMESTAMP(committed_at) AS CHAR)
		FROM relay_checkpoints WHERE job = ? AND state = 'COMMITTED' ORDER BY checkpoint_id`, job)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LedgerCheckpoint
	for rows.Next() {
		var c LedgerCheckpoint
		var offs, dec, com string
		if err := rows.Scan(&c.ID, &offs, &c.Records, &dec, &com); err != nil {
			return nil, err
		}
		var m map[string]map[int32]int64
		if err := json.Unmarshal([]byte(offs), &m); err != nil {
			return nil, err
		}
		c.Offsets = m[topic]
		c.DecidedAt, c.CommittedAt = unixString(dec), unixString(com)
		out = append(out, c)
	}
	return out, rows.Err()
}

// FirstCommitted returns the job's first committed checkpoint with records above id after (ok
// false while there is none): one indexed row, so polling it does not slow a start being timed.
func FirstCommitted(ctx context.Context, db *sql.DB, job string, after int64) (id int64, at time.Time, ok bool, err error) {
	var com string
	err = db.QueryRowContext(ctx, `SELECT checkpoint_id, CAST(UNIX_TIMESTAMP(committed_at) AS CHAR) FROM relay_checkpoints
		WHERE job = ? AND checkpoint_id > ? AND state = 'COMMITTED' AND records > 0 ORDER BY checkpoint_id LIMIT 1`, job, after).Scan(&id, &com)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, time.Time{}, false, nil
	}
	return id, unixString(com), err == nil, err
}

func unixString(s string) time.Time {
	f, _ := strconv.ParseFloat(s, 64)
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9))
}

// VisibilityPerRecord maps every record to the commit time of the checkpoint that covers it and
// returns committed_at − producer timestamp per record, in seconds.
func VisibilityPerRecord(cps []LedgerCheckpoint, times map[int32][]time.Time) []float64 {
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
