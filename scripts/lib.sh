# lib.sh — sourced by services.sh and galera.sh: what both do to the servers they started.
#
# Invariant: stop_pidfile touches only the process whose pid its own script wrote, and leaves no
# pid file behind, so the next `up` never mistakes a stopped server for a running one.

# stop_pidfile FILE SECONDS: SIGTERM the process named in FILE, give it SECONDS to exit (a server
# flushing its data), then SIGKILL it; remove FILE. Prints the pid when one was running.
stop_pidfile() {
  local f=$1 secs=$2 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((secs * 2))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    echo "$pid"
  fi
  rm -f "$f"
}
