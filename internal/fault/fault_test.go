package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/go-sql-driver/mysql"
)

// The back-off doubles up to its cap and is drawn from the upper half of each step.
func TestBackoffJitter(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	for attempt, step := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		seen := map[time.Duration]bool{}
		for i := 0; i < 200; i++ {
			d := p.Backoff(attempt)
			if d < step/2 || d >= step {
				t.Fatalf("attempt %d: %s outside [%s, %s)", attempt, d, step/2, step)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("attempt %d: %d distinct waits in 200, want jitter", attempt, len(seen))
		}
	}
}

// Do sleeps the policy's back-off between tries through the injected sleep, and stops on an
// error that is not worth retrying.
func TestDoBacksOff(t *testing.T) {
	var slept []time.Duration
	p := Policy{Attempts: 4, Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond,
		Sleep: func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }}
	tries := 0
	err := Do(context.Background(), p, func(context.Context) error { tries++; return io.EOF }, nil)
	if !errors.Is(err, io.EOF) || tries != 4 || len(slept) != 3 {
		t.Fatalf("err %v after %d tries and %d sleeps, want EOF after 4 and 3", err, tries, len(slept))
	}
	tries = 0
	_ = Do(context.Background(), p, func(context.Context) error { tries++; return errors.New("bad config") }, nil)
	if tries != 1 {
		t.Fatalf("a non-retryable error was tried %d times", tries)
	}
}

func TestCause(t *testing.T) {
	for want, err := range map[string]error{
		"lock_conflict":    fmt.Errorf("write: %w", &mysql.MySQLError{Number: ErLockWaitTimeout}),
		"timeout":          fmt.Errorf("decide: %w", context.DeadlineExceeded),
		"mysql_connection": fmt.Errorf("write: %w", mysql.ErrInvalidConn),
		"mysql":            &mysql.MySQLError{Number: 1146},
		"data_refused":     fmt.Errorf("upsert: %w", &mysql.MySQLError{Number: ErWarnDataOutOfRange}),
		"other":            errors.New("something else"),
	} {
		if got := Cause(err); got != want {
			t.Errorf("Cause(%v) = %s, want %s", err, got, want)
		}
	}
	if !IsPermanent(fmt.Errorf("assign: %w", Permanent(errors.New("topic t does not exist")))) || IsPermanent(io.EOF) {
		t.Error("IsPermanent does not follow the Permanent mark")
	}
}

// A statement MySQL refused for its values is its own class and is not retried as it is.
func TestDataRefused(t *testing.T) {
	for _, n := range []uint16{1048, 1264, 1265, 1292, 1300, 1365, 1366, 1406, 1690} {
		err := fmt.Errorf("subtask 0: %w", &mysql.MySQLError{Number: n})
		if !DataRefused(err) || Retryable(err) || Cause(err) != "data_refused" {
			t.Errorf("error %d: DataRefused %v, Retryable %v, Cause %s", n, DataRefused(err), Retryable(err), Cause(err))
		}
	}
	for _, err := range []error{&mysql.MySQLError{Number: ErLockDeadlock}, &mysql.MySQLError{Number: 1146}, io.EOF} {
		if DataRefused(err) {
			t.Errorf("DataRefused(%v) = true", err)
		}
	}
}

// LockConflict answers for the server's lock errors, wrapped or not, inside XA or not.
func TestLockConflict(t *testing.T) {
	for err, want := range map[error]bool{
		fmt.Errorf("write: %w", &mysql.MySQLError{Number: ErLockDeadlock}): true,
		fmt.Errorf("prepare: %w", &mysql.MySQLError{Number: XARBTimeout}):  true,
		fmt.Errorf("decide: %w", Classed("fence_lost", "lease")):           false,
		&mysql.MySQLError{Number: 1146}:                                    false,
		errors.New("other"):                                                false,
	} {
		if got := LockConflict(err); got != want {
			t.Errorf("LockConflict(%v) = %v, want %v", err, got, want)
		}
	}
}

// Start-up waits out what a dependency that is not up yet answers, and nothing that only the
// configuration can fix.
func TestUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for err, want := range map[error]bool{
		fmt.Errorf("connect sink: %w", refused):                                        true,
		fmt.Errorf("connect sink: %w", context.DeadlineExceeded):                       true, // a dial or a query that timed out
		fmt.Errorf("connect sink: %w", mysql.ErrInvalidConn):                           true,
		&mysql.MySQLError{Number: ErTooManyConnections}:                                true,
		&mysql.MySQLError{Number: ErServerShutdown}:                                    true,
		&mysql.MySQLError{Number: ErUnknownCom}:                                        true, // Galera: WSREP has not yet prepared node
		fmt.Errorf("session setup (causal reads): %w", ErrNotPrimary):                  true, // Galera: wsrep_cluster_status non-Primary
		fmt.Errorf("metadata: %w", kafka.NewError(kafka.ErrTransport, "down", false)):  true,
		fmt.Errorf("metadata: %w", kafka.NewError(kafka.ErrAllBrokersDown, "", false)): true,
		Transient(errors.New("topic t does not exist")):                                true,
		&mysql.MySQLError{Number: 1045}:                                                false, // access denied: fix the DSN
		&mysql.MySQLError{Number: 1044}:                                                false,
		&mysql.MySQLError{Number: 1049}:                                                false, // unknown database
		Permanent(refused):                                                             false,
		fmt.Errorf("stop: %w", context.Canceled):                                       false,
		errors.New("mysql.session_timeout 1m0s is below ..."):                          false,
		nil: false,
	} {
		if got := Unavailable(err); got != want {
			t.Errorf("Unavailable(%v) = %v, want %v", err, got, want)
		}
	}
}

// Await retries an unavailable service with no bound on attempts, backing off through the
// injected sleep, stops at once on any other error, and ends with its context.
func TestAwait(t *testing.T) {
	var slept []time.Duration
	p := Policy{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond,
		Sleep: func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }}
	tries := 0
	err := Await(context.Background(), p, func(context.Context) error {
		if tries++; tries < 50 {
			return io.EOF
		}
		return nil
	}, func(attempt int, err error, wait time.Duration) {
		if attempt != tries || !errors.Is(err, io.EOF) || wait > p.Max {
			t.Fatalf("onWait(%d, %v, %s) at try %d", attempt, err, wait, tries)
		}
	})
	if err != nil || tries != 50 || len(slept) != 49 {
		t.Fatalf("err %v after %d tries and %d sleeps, want nil after 50 and 49", err, tries, len(slept))
	}
	for _, d := range slept {
		if d > p.Max {
			t.Fatalf("slept %s, above the cap %s", d, p.Max)
		}
	}
	tries = 0
	denied := &mysql.MySQLError{Number: 1045}
	if err := Await(context.Background(), p, func(context.Context) error { tries++; return denied }, nil); !errors.Is(err, denied) || tries != 1 {
		t.Fatalf("access denied: err %v after %d tries, want it after 1", err, tries)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.Sleep = SleepContext
	tries = 0
	err = Await(ctx, p, func(context.Context) error {
		if tries++; tries == 3 {
			cancel()
		}
		return io.EOF
	}, nil)
	if !errors.Is(err, context.Canceled) || tries != 3 {
		t.Fatalf("cancelled: err %v after %d tries, want context.Canceled after 3", err, tries)
	}
}
