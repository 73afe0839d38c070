# lib.sh — sourced by services.sh, galera.sh, test.sh and demo.sh: installing what they run, and
# stopping the servers they started.
#
# Invariant: stop_pidfile touches only the process whose pid its own script wrote, and leaves no
# pid file behind, so the next `up` never mistakes a stopped server for a running one. apt_install
# installs Debian packages without letting them start or enable a service of their own (the
# distro's MariaDB would take :3306, its Prometheus :9090): the scripts run their own servers.
# shellcheck shell=bash

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

# apt_install [APT-GET OPTION...] PKG...: install Debian/Ubuntu packages, as root. While apt-get
# runs, /usr/sbin/policy-rc.d (exit 101: "action forbidden") keeps the maintainer scripts of the
# packages (and of what they pull in) from starting a service (invoke-rc.d and deb-systemd-invoke
# ask it); it is written only when there is none, and removed afterwards whatever happens. On a
# systemd host the units of the newly installed packages were still enabled, to start at the next
# boot: they are disabled.
apt_install() {
  local opts=() pkgs=()
  while [ $# -gt 0 ]; do case $1 in -*) opts+=("$1") ;; *) pkgs+=("$1") ;; esac; shift; done
  [ ${#pkgs[@]} -gt 0 ] || return 0
  command -v apt-get >/dev/null || { printf 'missing: %s (install them: these scripts know only apt-get)\n' "${pkgs[*]}" >&2; return 1; }
  [ "$(id -u)" = 0 ] || { printf 'missing: %s (run as root, or: sudo apt-get install %s)\n' "${pkgs[*]}" "${pkgs[*]}" >&2; return 1; }
  printf 'installing %s (apt-get; their own services kept from starting)\n' "${pkgs[*]}" >&2
  local before; before=$(dpkg-query -W -f='${binary:Package}\n' | sort)
  (
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      trap 'rm -f "$policy"' EXIT
      trap 'exit 130' INT TERM
      printf '#!/bin/sh\n# relay scripts/lib.sh apt_install: no service starts while it installs\nexit 101\n' >"$policy"
      chmod 755 "$policy"
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq "${opts[@]+"${opts[@]}"}" "${pkgs[@]}" >&2
  ) || return
  [ -d /run/systemd/system ] || return 0
  local added unit
  added=$(comm -13 <(echo "$before") <(dpkg-query -W -f='${binary:Package}\n' | sort))
  # shellcheck disable=SC2086 # one package name per word
  for unit in $(dpkg -L $added 2>/dev/null | sed -n 's|^/\(usr/\)\{0,1\}lib/systemd/system/\([^/@]*\.service\)$|\2|p'); do
    if systemctl is-enabled --quiet "$unit" 2>/dev/null; then
      systemctl disable --now --quiet "$unit" >&2 || true
    fi
  done
}

# need [APT-GET OPTION...] CMD=PKG...: install the package of each command that is missing.
need() {
  local args=() pair
  for pair in "$@"; do
    case $pair in
      -*) args+=("$pair") ;;
      *) command -v "${pair%%=*}" >/dev/null || args+=("${pair#*=}") ;;
    esac
  done
  apt_install "${args[@]+"${args[@]}"}"
}

# need_go: Go is not installed here (Debian's is older than go.mod's); say where to get it.
need_go() {
  command -v go >/dev/null || { printf 'missing: Go %s or later (https://go.dev/dl/), on PATH\n' "$(sed -n 's/^go //p' go.mod)" >&2; return 1; }
}
