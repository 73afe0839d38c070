// Waiting for an event in a test: poll a condition until it holds, with a deadline, instead of
// sleeping for a guessed time. Invariant: a wait ends as soon as the event is seen (the first
// checks come 10 ms apart, backing off to 250 ms so a long wait does not load the servers), and a
// wait for an event that never comes fails the test, naming the event, when its deadline passes.

package testenv

import (
	"testing"
	"time"
)

// Poll checks cond until it holds, and reports whether it did before limit passed. The caller
// reports a timeout itself, with what it knows of the state; Eventually fails the test instead.
func Poll(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for every := 10 * time.Millisecond; ; every = min(2*every, 250*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
}

// Eventually waits up to limit for cond to hold, and fails the test with "timed out after limit
// waiting for what" if it does not.
func Eventually(t testing.TB, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	if !Poll(limit, cond) {
		t.Fatalf("timed out after %s waiting for %s", limit, what)
	}
}
