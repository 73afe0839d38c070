// Package fault is relay's one error classifier and its bounded retry loop.
//
// Invariant: whether an error is worth retrying, what class of failure it is and whether any
// restart can cure it are decided here only, from MySQL error numbers and Kafka error codes, never
// from message text; every retry loop is bounded, backs off with jitter and stops when its context
// ends.
package fault

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/go-sql-driver/mysql"
)

// MySQL / MariaDB server error numbers relay reacts to.
const (
	ErTooManyConnections          = 1040
	ErUnknownCom                  = 1047 // Galera: "WSREP has not yet prepared node for application use" (not in the primary component)
	ErBadNull                     = 1048 // NULL into a NOT NULL column
	ErServerShutdown              = 1053
	ErNoSuchThread                = 1094 // KILL of a session that is gone
	ErUnknownTable                = 1109 // e.g. a server without information_schema.INNODB_LOCK_WAITS
	ErNoSuchTable                 = 1146 // a table not created yet
	ErLockWaitTimeout             = 1205
	ErWarnDataOutOfRange          = 1264 // a number past its column's range (strict mode)
	ErWarnDataTruncated           = 1265
	ErTruncatedWrongValue         = 1292 // e.g. a DATETIME the column cannot hold
	ErInvalidCharString           = 1300 // bytes that are not the column's character set (utf8mb4)
	ErLockDeadlock                = 1213
	ErQueryInterrupted            = 1317
	ErDivisionByZero              = 1365
	ErTruncatedWrongValueForField = 1366 // a value the column's type cannot take (e.g. a bad string for its charset)
	ErDataTooLong                 = 1406 // a string past its column's length
	XAErNota                      = 1397 // unknown XID (or owned by a live session on MariaDB)
	XAErInval                     = 1398
	XAErRMFail                    = 1399 // command not allowed in this XA state
	XAErOutside                   = 1400
	XAErRMErr                     = 1401
	XARBRollback                  = 1402 // branch was rolled back (e.g. an empty prepared branch)
	XAErDupID                     = 1440 // XID already exists
	XARBTimeout                   = 1613
	ErDataOutOfRange              = 1690 // an expression's value past its type (e.g. a BIGINT sum)
	XARBDeadlock                  = 1614
	ErConnectionKilled            = 1927 // MariaDB
	ErLockAcquireFailed           = 3058 // MySQL GET_LOCK deadlock detection
)

// MySQLNumber returns the server error number of err, or 0.
func MySQLNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// IsMySQL reports whether err carries server error number n.
func IsMySQL(err error, n uint16) bool { return MySQLNumber(err) == n }

// LockConflict reports whether err ended a statement or a transaction because of another
// transaction's locks: a lock wait timeout or a deadlock, inside XA or not.
func LockConflict(err error) bool {
	switch MySQLNumber(err) {
	case ErLockWaitTimeout, ErLockDeadlock, XARBTimeout, XARBDeadlock:
		return true
	}
	return false
}

// DataRefused reports whether MySQL refused a statement for the values it carries (a string its
// column cannot hold, a number past its column's range): the same statement fails the same way
// however often it runs, so retrying it cannot help. relay validates every value it writes when
// it decodes the record, so for relay's own statements this is a bug (or a table changed behind
// relay's back, e.g. by a trigger), never bad input.
func DataRefused(err error) bool {
	switch MySQLNumber(err) {
	case ErBadNull, ErWarnDataOutOfRange, ErWarnDataTruncated, ErTruncatedWrongValue, ErInvalidCharString,
		ErDivisionByZero, ErTruncatedWrongValueForField, ErDataTooLong, ErDataOutOfRange:
		return true
	}
	return false
}

// ConnectionLost reports whether err means the connection is gone (its session, and any
// unprepared transaction on it, is lost; a prepared XA branch survives).
func ConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	switch MySQLNumber(err) {
	case ErServerShutdown, ErConnectionKilled:
		return true
	}
	return false
}

// Retryable reports whether trying the same operation again (possibly on a new connection, after
// the transaction was rolled back) can succeed.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var te *transientError
	if errors.As(err, &te) || ConnectionLost(err) {
		return true
	}
	switch MySQLNumber(err) {
	case ErTooManyConnections, ErUnknownCom, ErLockWaitTimeout, ErLockDeadlock, ErQueryInterrupted,
		XARBTimeout, XARBDeadlock, XAErDupID, ErLockAcquireFailed:
		return true
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		if ke.IsFatal() {
			return false
		}
		if ke.IsRetriable() {
			return true
		}
		switch ke.Code() {
		case kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrTimedOut, kafka.ErrLeaderNotAvailable,
			kafka.ErrNotLeaderForPartition, kafka.ErrUnknownTopicOrPart, kafka.ErrRequestTimedOut,
			kafka.ErrNetworkException, kafka.ErrCoordinatorLoadInProgress, kafka.ErrCoordinatorNotAvailable:
			return true
		}
	}
	return false
}

// Unavailable reports whether err says a service relay depends on does not serve yet, or not at
// the moment: nothing listens or the connection dropped (ConnectionLost, a dial that timed out),
// a server refusing connections (too many, shutting down), a Galera node outside the primary
// component (NotPrimary), Kafka brokers out of reach (every error Retryable takes), or what a
// caller marked Transient. Start-up waits these out, for as long as the operator allows, instead
// of exiting (a sidecar starts in any order). Anything else, such as access denied (1045, 1044)
// or an unknown database (1049), is the configuration's to fix and ends the start at once:
// waiting would only hide it. A deadline that ended an attempt counts as unavailable; the caller
// stops on its own context first.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || IsPermanent(err) || IsFatal(err) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || NotPrimary(err) || Retryable(err)
}

// Await runs fn until it succeeds, fails with an error Unavailable rejects, or ctx ends; it
// returns the last error, followed by ctx's when ctx ended (on one line: it may end the process).
// There is no bound on attempts: the caller bounds the wait with ctx. The back-off is p's
// (p.Attempts is not used), so it stays bounded by p.Max, with jitter. onWait, if not nil, is told
// about each attempt that will be retried and how long relay waits before the next.
func Await(ctx context.Context, p Policy, fn func(context.Context) error, onWait func(attempt int, err error, wait time.Duration)) error {
	sleep := p.Sleep
	if sleep == nil {
		sleep = SleepContext
	}
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w; %w", err, ctx.Err())
		}
		if !Unavailable(err) {
			return err
		}
		wait := p.Backoff(attempt)
		if onWait != nil {
			onWait(attempt, err, wait)
		}
		if serr := sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w; %w", err, serr)
		}
	}
}

// Causes are the values Cause returns: a bounded set, fit for a metric label.
var Causes = []string{"mysql_connection", "timeout", "lock_conflict", "commit_conflict", "cluster_not_ready", "fence_lost", "partition_taken", "kafka", "mysql", "data_refused", "schema_registry", "other"}

// Classed is a sentinel error whose cause (one of Causes) is known where it is declared (the
// fence's lock session lost, subtasks blocking each other), so that Cause stays the one place
// that names classes.
func Classed(cause, msg string) error { return &classedError{cause: cause, err: errors.New(msg)} }

type classedError struct {
	cause string
	err   error
}

func (e *classedError) Error() string { return e.err.Error() }

// Cause names the class of a failure, by error number and type.
func Cause(err error) string {
	var ke kafka.Error
	var ce *classedError
	switch {
	case errors.As(err, &ce):
		return ce.cause
	case CommitConflict(err):
		return "commit_conflict"
	case NotPrimary(err):
		return "cluster_not_ready"
	case LockConflict(err):
		return "lock_conflict"
	case DataRefused(err):
		return "data_refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case ConnectionLost(err):
		return "mysql_connection"
	case errors.As(err, &ke):
		return "kafka"
	case MySQLNumber(err) != 0:
		return "mysql"
	}
	return "other"
}

// AtCommit marks err as the answer to a COMMIT: a lock conflict there is a Galera certification
// failure (CommitConflict), not a wait for a lock.
func AtCommit(err error) error {
	if err == nil {
		return nil
	}
	return &commitError{err}
}

type commitError struct{ err error }

func (e *commitError) Error() string { return e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// CommitConflict reports whether a COMMIT was refused for a conflict (1213 or 1205 at COMMIT): on
// a Galera cluster, another node's transaction certified first on a row this one wrote. Nothing
// of it was committed; the epoch is retried through recovery.
func CommitConflict(err error) bool {
	var ce *commitError
	return errors.As(err, &ce) && LockConflict(err)
}

// ErrNotPrimary says a Galera node is outside the primary component, as its status tells (a
// causal read there fails as a lock wait timeout, 1205, not as 1047).
var ErrNotPrimary = Classed("cluster_not_ready", "Galera node outside the primary component")

// NotPrimary reports whether the server is a Galera node outside the primary component (it lost
// quorum, or is joining): it refuses every query but SHOW and SET until it rejoins, so relay
// waits, never deciding there.
func NotPrimary(err error) bool { return IsMySQL(err, ErUnknownCom) || errors.Is(err, ErrNotPrimary) }

// ClusterEvent reports whether err is a normal event of a Galera cluster rather than a failure of
// relay's: a certification conflict at COMMIT, or a node outside the primary component. Both are
// retried without counting towards the bound on failures in a row.
func ClusterEvent(err error) bool { return CommitConflict(err) || NotPrimary(err) }

// Permanent marks err as a condition no restart cures by itself: the operator must act (data
// gone from Kafka, a topic that does not exist, a resume offset outside the topic).
func Permanent(err error) error { return &permanentError{err} }

// Fatal is a sentinel error that ends the process whenever it occurs: another process owns the
// job, a newer relay wrote the ledger, bad input under policy fail.
func Fatal(msg string) error { return &fatalError{errors.New(msg)} }

// IsPermanent reports whether err was marked Permanent or is a fatal Kafka client error.
func IsPermanent(err error) bool {
	var pe *permanentError
	var ke kafka.Error
	return errors.As(err, &pe) || (errors.As(err, &ke) && ke.IsFatal())
}

// IsFatal reports whether err is, or wraps, a Fatal sentinel.
func IsFatal(err error) bool {
	var fe *fatalError
	return errors.As(err, &fe)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

// Policy bounds a retry loop. Sleep is injectable so tests run without waiting.
type Policy struct {
	Attempts int           // total tries, at least 1
	Initial  time.Duration // first back-off
	Max      time.Duration // back-off cap
	Sleep    func(ctx context.Context, d time.Duration) error
}

// Backoff is the wait before retry number attempt (1 for the first retry): doubling from
// Initial up to Max, then drawn uniformly from its upper half, so that processes failing
// together (a MySQL restart) do not retry in lockstep.
func (p Policy) Backoff(attempt int) time.Duration {
	d := p.Initial
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// DefaultPolicy retries for roughly half a minute.
func DefaultPolicy() Policy {
	return Policy{Attempts: 8, Initial: 100 * time.Millisecond, Max: 5 * time.Second}
}

// SleepContext waits d or until ctx ends.
func SleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Do runs fn until it succeeds, returns an error Retryable rejects, or attempts run out; it returns
// the last error. onRetry, if not nil, is told about each error that will be retried.
func Do(ctx context.Context, p Policy, fn func(context.Context) error, onRetry func(attempt int, err error)) error {
	sleep := p.Sleep
	if sleep == nil {
		sleep = SleepContext
	}
	var err error
	for attempt := 1; ; attempt++ {
		if err = fn(ctx); err == nil || !Retryable(err) || attempt >= p.Attempts {
			return err
		}
		if onRetry != nil {
			onRetry(attempt, err)
		}
		if serr := sleep(ctx, p.Backoff(attempt)); serr != nil {
			return errors.Join(err, serr)
		}
	}
}

// Transient marks err as worth retrying where the caller knows more than its error number says
// (e.g. XAER_NOTA for a branch XA RECOVER still lists: its old session is going away).
func Transient(err error) error { return &transientError{err} }

type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }
