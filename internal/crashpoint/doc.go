// Package crashpoint kills the process at named points of the commit protocol, for crash tests.
//
// Invariant: the points are compiled in only with the crashpoints build tag (crashpoint.go);
// production builds get the no-op in off.go. RELAY_CRASH_AT=name[:n] kills the process (SIGKILL,
// no deferred cleanup) the n-th time (default 1st) it passes the named point; with
// RELAY_CRASH_ACTION=stop it freezes there instead (SIGSTOP to itself) and goes on where it stood
// once a test sends SIGCONT: a process stalled at the worst moment, past its lease.
//
// This doc sits in a file every build compiles, so that go doc shows it with or without the tag.
package crashpoint
