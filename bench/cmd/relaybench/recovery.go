package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/relay-sh/relay/bench/internal/kit"
	"github.com/relay-sh/relay/internal/commit"
	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
	"github.com/relay-sh/relay/internal/xa"
)

// RecoveryResult is start-up time with in-doubt branches to resolve, and without (control), and a
// restart of a job with a long history in its ledger.
type RecoveryResult struct {
	Branches int `json:"branches"`
	// History is the number of committed checkpoint rows of the LargeLedger start (a job whose
	// ledger was never pruned), resuming from its last offsets.
	History     int           `json:"history"`
	LargeLedger RecoveryRun   `json:"large_ledger"`
	Interval    string        `json:"interval"`
	Runs        []RecoveryRun `json:"runs"`
	Median      RecoveryRun   `json:"median"`
	Control     RecoveryRun   `json:"control"` // the same start with no in-doubt branch
}

// RecoveryRun is one start.
type RecoveryRun struct {
	ToRecovered   float64 `json:"to_recovered_secs"`    // process start → log "recovered"
	ToRunning     float64 `json:"to_running_secs"`      // process start → log "state … running" (consuming)
	ToFirstCommit float64 `json:"to_first_commit_secs"` // process start → first checkpoint COMMITTED (ledger committed_at)
	Committed     int     `json:"committed"`            // branches recovery committed
	RolledBack    int     `json:"rolled_back"`
}

func runRecovery(e *kit.Env) (*RecoveryResult, error) {
	branches := kit.EnvInt("BENCH_RECOVERY_BRANCHES", 100)
	reps := kit.EnvInt("BENCH_REPS", 3)
	r := &RecoveryResult{Branches: branches, Interval: "200ms", History: kit.EnvInt("BENCH_RECOVERY_HISTORY", 200000)}
	topic, err := e.CreateTopic("bench_rec", 4)
	if err != nil {
		return nil, err
	}
	defer e.DeleteTopic(topic)
	if _, _, err := e.Produce(harness.Loadgen{Topic: topic, Orders: 10000, SKUs: 1000, Windows: 10, Seed: 3}, "rec-loadgen.log"); err != nil {
		return nil, err
	}
	var toRec, toRun, toCommit []float64
	large, err := recoveryRun(e, topic, 0, r.History, -1)
	if err != nil {
		return nil, fmt.Errorf("large ledger: %w", err)
	}
	r.LargeLedger = large
	for rep := 0; rep <= reps; rep++ {
		n := branches
		if rep == 0 {
			n = 0 // control first: same start, nothing in doubt
		}
		run, err := recoveryRun(e, topic, n, 0, rep)
		if err != nil {
			return nil, fmt.Errorf("rep %d: %w", rep, err)
		}
		if rep == 0 {
			r.Control = run
			continue
		}
		r.Runs = append(r.Runs, run)
		toRec, toRun, toCommit = append(toRec, run.ToRecovered), append(toRun, run.ToRunning), append(toCommit, run.ToFirstCommit)
	}
	r.Median = RecoveryRun{ToRecovered: kit.Median(toRec), ToRunning: kit.Median(toRun), ToFirstCommit: kit.Median(toCommit),
		Committed: r.Runs[0].Committed, RolledBack: r.Runs[0].RolledBack}
	return r, nil
}

// prepareInDoubt leaves n prepared branches of job, two subtasks per checkpoint, the first half of
// the checkpoints decided in the ledger (state COMMITTING, as after a crash between decision and
// commit) and the rest undecided (as after a crash between prepare and decision).
func prepareInDoubt(ctx context.Context, db *sql.DB, job, topic string, n int) (maxID int64, err error) {
	if err := ledger.EnsureSchema(ctx, db); err != nil {
		return 0, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE bench_probe (id BIGINT NOT NULL PRIMARY KEY) ENGINE=InnoDB`); err != nil {
		return 0, err
	}
	led := ledger.New(db, job)
	fence, err := ledger.Acquire(ctx, led, ledger.FenceConfig{Owner: "relaybench"})
	if err != nil {
		return 0, err
	}
	defer fence.Release()
	const subtasks = 2
	checkpoints := (n + subtasks - 1) / subtasks
	offsets := partition.Offsets{}
	for p := int32(0); p < 4; p++ {
		offsets.Set(topic, p, 0)
	}
	made := 0
	for c := int64(1); c <= int64(checkpoints); c++ {
		var tags []string
		for s := 0; s < subtasks && made < n; s++ {
			tag := commit.Tag(job, c, s)
			b, err := xa.NewBranch(ctx, db)
			if err != nil {
				return 0, err
			}
			if err := b.Start(ctx, tag); err != nil {
				return 0, err
			}
			if err := b.Exec(ctx, fmt.Sprintf("INSERT INTO bench_probe (id) VALUES (%d)", made)); err != nil {
				return 0, err
			}
			if err := b.Prepare(ctx); err != nil {
				return 0, err
			}
			b.Close() // discards the connection: the prepared branch stays, detached, for recovery
			tags = append(tags, tag)
			made++
		}
		if c <= int64(checkpoints/2) {
			if err := led.Decide(ctx, fence.Epoch(), nil, ledger.Checkpoint{ID: c, Tags: tags, Offsets: offsets}); err != nil {
				return 0, err
			}
		}
		maxID = c
	}
	// Wait until the server lists every branch as recoverable (their sessions are gone).
	for deadline := time.Now().Add(30 * time.Second); ; {
		rs, err := xa.ListPrepared(ctx, db)
		if err != nil {
			return 0, err
		}
		k := 0
		for _, r := range rs {
			if strings.HasPrefix(r.GTRID, job+"-") {
				k++
			}
		}
		if k == n {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("XA RECOVER lists %d of %d branches", k, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return maxID, nil
}

// fillHistory gives job a ledger of history committed checkpoints (ids 1..history) and its
// partitions' offsets as of the last one, as a long-running job whose ledger was never pruned.
func fillHistory(ctx context.Context, db *sql.DB, job, topic string, history int) (int64, error) {
	const batch = 5000
	for first := 1; first <= history; first += batch {
		var q strings.Builder
		q.WriteString(`INSERT INTO relay_checkpoints (job, checkpoint_id, state, owner_epoch, tags, offsets, records, instance, decided_at, committed_at) VALUES `)
		for id := first; id < first+batch && id <= history; id++ {
			if id > first {
				q.WriteByte(',')
			}
			fmt.Fprintf(&q, "('%s', %d, 'COMMITTED', 1, '%s-%d-0,%s-%d-1', '{}', 0, '0', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))", job, id, job, id, job, id)
		}
		if _, err := db.ExecContext(ctx, q.String()); err != nil {
			return 0, fmt.Errorf("fill history: %w", err)
		}
	}
	for p := 0; p < 4; p++ {
		if _, err := db.ExecContext(ctx, `INSERT INTO relay_offsets (job, topic, kpartition, next_offset, checkpoint_id, owner_key, updated_at)
			VALUES (?, ?, ?, 0, ?, '0', UTC_TIMESTAMP(6))`, job, topic, p, history); err != nil {
			return 0, err
		}
	}
	return int64(history), nil
}

// recoveryRun times one start of a fresh job with n prepared branches in doubt and history
// committed checkpoints in its ledger.
func recoveryRun(e *kit.Env, topic string, n, history, rep int) (RecoveryRun, error) {
	var run RecoveryRun
	job, dsn, db, err := e.CreateJob()
	if err != nil {
		return run, err
	}
	defer e.DropNow(job)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	maxID, err := prepareInDoubt(ctx, db, job, topic, n)
	if err != nil {
		return run, err
	}
	if history > 0 {
		if maxID, err = fillHistory(ctx, db, job, topic, history); err != nil {
			return run, err
		}
	}
	o := kit.RelayOpts{Job: job, Topic: topic, DSN: dsn, Mode: "xa", Subtasks: 2, Interval: 200 * time.Millisecond, LogLevel: "info"}
	p, err := e.StartRelay(o, fmt.Sprintf("recovery-%d.log", rep))
	if err != nil {
		return run, err
	}
	defer p.Kill()
	var firstAt time.Time
	for deadline := time.Now().Add(2 * time.Minute); ; {
		_, at, ok, err := committed.First(ctx, db, job, maxID)
		if err == nil && ok {
			firstAt = at
			break
		}
		if !p.Alive() || time.Now().After(deadline) {
			return run, fmt.Errorf("no checkpoint committed after recovery (log %s)", p.Log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec, err := p.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, time.Second)
	if err != nil {
		return run, err
	}
	running, err := p.WaitLog(kit.IsRunning, time.Second)
	if err != nil {
		return run, err
	}
	if err := p.Stop(time.Minute); err != nil {
		return run, err
	}
	run = RecoveryRun{ToRecovered: rec.TS.Sub(p.Start).Seconds(), ToRunning: running.TS.Sub(p.Start).Seconds(),
		ToFirstCommit: firstAt.Sub(p.Start).Seconds(), Committed: int(rec.Num("committed")), RolledBack: int(rec.Num("rolled_back"))}
	if run.Committed+run.RolledBack != n {
		return run, fmt.Errorf("recovery resolved %d+%d branches, want %d (log %s)", run.Committed, run.RolledBack, n, p.Log)
	}
	kit.Logf("recovery with %d in-doubt branches, %d checkpoints of history: recovered after %.3fs (%d committed, %d rolled back), running %.3fs, first commit %.3fs",
		n, history, run.ToRecovered, run.Committed, run.RolledBack, run.ToRunning, run.ToFirstCommit)
	return run, nil
}
