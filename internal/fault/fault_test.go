package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

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
