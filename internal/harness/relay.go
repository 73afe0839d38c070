// Relay: one relay process (the binary, under an optional wrapper), its log file, its exit.
//
// Invariant: the log file holds everything the process wrote to stdout and stderr, and is closed
// before Done is; Err, CPU and MaxRSSKB are read only after Done, when the exit is known.

package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options say how to start one process.
type Options struct {
	Bin     string   // the relay binary
	Args    []string // its arguments ("run", flags)
	Env     []string // its whole environment
	Log     string   // file for its stdout and stderr (created)
	Wrapper []string // run it under this command (e.g. perf record … --)
}

// Relay is one started process.
type Relay struct {
	Cmd   *exec.Cmd
	Log   string    // path of its log file
	Start time.Time // just before exec
	done  chan struct{}
	err   error
}

// ErrNoExit says a process did not exit within the time it was given (it was killed then).
var ErrNoExit = errors.New("relay did not exit in time")

// Start starts the process with its output in o.Log.
func Start(o Options) (*Relay, error) {
	f, err := os.Create(o.Log)
	if err != nil {
		return nil, fmt.Errorf("relay log: %w", err)
	}
	argv := append(append(append([]string{}, o.Wrapper...), o.Bin), o.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = o.Env
	cmd.Stdout, cmd.Stderr = f, f
	r := &Relay{Cmd: cmd, Log: o.Log, Start: time.Now(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", o.Bin, err)
	}
	go func() {
		r.err = cmd.Wait()
		f.Close()
		close(r.done)
	}()
	return r, nil
}

// Done is closed when the process has exited.
func (r *Relay) Done() <-chan struct{} { return r.done }

// Err is the exit error (nil for status 0), once Done is closed.
func (r *Relay) Err() error { return r.err }

// Alive reports whether the process still runs.
func (r *Relay) Alive() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// PID of the process (of the wrapper, when there is one).
func (r *Relay) PID() int { return r.Cmd.Process.Pid }

// Signal sends sig to the process.
func (r *Relay) Signal(sig os.Signal) error { return r.Cmd.Process.Signal(sig) }

// Wait returns the exit error; a process still running after limit is killed, and the error then
// wraps ErrNoExit.
func (r *Relay) Wait(limit time.Duration) error {
	select {
	case <-r.done:
		return r.err
	case <-time.After(limit):
		r.Kill()
		return fmt.Errorf("%w: still running after %s; killed", ErrNoExit, limit)
	}
}

// Stop sends SIGTERM (relay drains: one last checkpoint) and waits up to limit.
func (r *Relay) Stop(limit time.Duration) error {
	_ = r.Signal(syscall.SIGTERM)
	return r.Wait(limit)
}

// Kill ends the process at once and waits for its exit.
func (r *Relay) Kill() {
	if r.Alive() {
		_ = r.Cmd.Process.Kill()
	}
	<-r.done
}

// Child returns the first child of the process (relay under a wrapper), waiting up to limit.
func (r *Relay) Child(limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", r.PID(), r.PID()))
		if err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no child of %d", r.PID())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stopped reports whether the process is stopped by a signal (SIGSTOP: state T in /proc/<pid>/stat).
func (r *Relay) Stopped() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.PID()))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may itself hold any byte.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}

// CPU is the process's user+system time, once it exited.
func (r *Relay) CPU() time.Duration {
	if r.Cmd.ProcessState == nil {
		return 0
	}
	return r.Cmd.ProcessState.UserTime() + r.Cmd.ProcessState.SystemTime()
}

// MaxRSSKB is the peak resident set of the exited process (getrusage ru_maxrss, in KiB).
func (r *Relay) MaxRSSKB() int64 {
	if r.Cmd.ProcessState == nil {
		return 0
	}
	if ru, ok := r.Cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}

// WaitLog polls the log until a line matches, and fails when the process exits or limit passes first.
func (r *Relay) WaitLog(match func(LogLine) bool, limit time.Duration) (LogLine, error) {
	deadline := time.Now().Add(limit)
	for {
		lines, _ := ReadLog(r.Log)
		if l, ok := Find(lines, match); ok {
			return l, nil
		}
		if !r.Alive() {
			return LogLine{}, fmt.Errorf("relay exited (%v); log %s", r.err, r.Log)
		}
		if time.Now().After(deadline) {
			return LogLine{}, fmt.Errorf("log line not seen within %s; log %s", limit, r.Log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
