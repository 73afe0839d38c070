// The harness against a stand-in process and the real servers: a log is read line by line with the
// lines that are no JSON kept and named, a process that outlives its wait is killed and said to,
// and a ledger relay has not created yet reads as nothing committed.

package harness_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/harness"
	"github.com/relay-sh/relay/internal/harness/committed"
	"github.com/relay-sh/relay/internal/testenv"
)

func TestProcessLogAndExit(t *testing.T) {
	log := filepath.Join(t.TempDir(), "relay.log")
	r, err := harness.Start(harness.Options{Bin: "/bin/sh", Log: log, Args: []string{"-c",
		`echo '{"ts":"2024-05-01T10:00:00.250Z","logger":"relay","msg":"recovered","committed":3}'; echo 'panic: not json'; sleep 30`}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := r.WaitLog(func(l harness.LogLine) bool { return l.Msg == "recovered" }, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l.N != 1 || l.Num("committed") != 3 || l.Logger != "relay" || !l.TS.Equal(time.Date(2024, 5, 1, 10, 0, 0, 250e6, time.UTC)) {
		t.Fatalf("first line read as %+v", l)
	}
	if _, err := r.WaitLog(func(l harness.LogLine) bool { return l.N == 2 }, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	lines, err := harness.ReadLog(log)
	if err != nil || len(lines) != 2 || lines[1].Fields != nil || lines[1].Text != "panic: not json" || lines[1].Msg != "" {
		t.Fatalf("lines %+v, %v: want the second one kept as text without fields", lines, err)
	}
	if err := r.Wait(100 * time.Millisecond); !errors.Is(err, harness.ErrNoExit) || r.Alive() {
		t.Fatalf("wait on a process that keeps running: %v (alive %v), want ErrNoExit and killed", err, r.Alive())
	}
	if _, err := r.WaitLog(func(l harness.LogLine) bool { return l.Msg == "never" }, time.Minute); err == nil {
		t.Fatal("waiting for a line of an exited process did not fail")
	}

	r, err = harness.Start(harness.Options{Bin: "/bin/sh", Log: log, Args: []string{"-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := r.Wait(10 * time.Second); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit: %v, want status 3", err)
	}
}

// Stopped sees a process that stopped itself with SIGSTOP (as a crash point with action stop
// does), and no longer once it was continued.
func TestStopped(t *testing.T) {
	r, err := harness.Start(harness.Options{Bin: "/bin/sh", Log: filepath.Join(t.TempDir(), "relay.log"),
		Args: []string{"-c", "kill -STOP $$; sleep 30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Kill()
	testenv.Eventually(t, 10*time.Second, r.Stopped, "the process to stop itself")
	if err := r.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return !r.Stopped() }, "the process to run again")
}

func TestLedgerBeforeRelayRan(t *testing.T) {
	d, err := harness.CreateDatabase(testenv.AdminDSN(t), "relay_t_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Drop() })
	db := testenv.Open(t, d.DSN)
	ctx := testenv.Context(t, time.Minute)
	for _, held := range []bool{false, true} {
		got, err := committed.Offsets(ctx, db, "j", "topic", held)
		if err != nil || len(got) != 0 {
			t.Fatalf("held %v: committed offsets %v, %v: want none and no error", held, got, err)
		}
	}
	if _, _, ok, err := committed.First(ctx, db, "j", 0); ok || err == nil {
		t.Fatalf("first committed checkpoint without a ledger: ok %v, err %v: want the missing table's error", ok, err)
	}
	if err := d.Drop(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := testenv.Open(t, testenv.AdminDSN(t)).QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", d.Name).Scan(&n); err != nil || n != 0 {
		t.Fatalf("database %s after Drop: %d, %v", d.Name, n, err)
	}
}

func TestTopicEndOffsets(t *testing.T) {
	brokers := testenv.Brokers(t)
	name := "t_harness_" + harness.Suffix()
	if err := harness.CreateTopic(brokers, name, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = harness.DeleteTopic(brokers, name) })
	if err := harness.AddPartitions(brokers, name, 3); err != nil {
		t.Fatal(err)
	}
	var end map[int32]int64
	var err error
	if !testenv.Poll(30*time.Second, func() bool {
		end, err = harness.EndOffsets(brokers, name)
		return err == nil && len(end) == 3 && harness.Total(end) == 0
	}) {
		t.Fatalf("end offsets of a new 3-partition topic: %v, %v", end, err)
	}
}
