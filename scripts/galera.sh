#!/usr/bin/env bash
# galera.sh up|down|status|env|start N|kill N|clock N OFFSET|sql N [args] — a 3-node MariaDB Galera
# cluster on loopback, for the tests of relay on a cluster (test/galera).
#
# Invariant: it touches only what it started: its own pids (under the checkout's .cache/galera),
# its own nodes' directories (under /var/tmp/relay-galera-<hash of the checkout's path>), its own ports (SQL 13316..13318, group 14567/14577/14587, IST one above each, SST 14444/14454/14464;
# RELAY_SVC_GALERA_PORT moves the SQL ports), never the shared MariaDB (services.sh) or its ports.
# Node 1 bootstraps the cluster (--wsrep-new-cluster) when no node runs; the others join it by
# SST (rsync) the first time and by IST after a restart. Everything listens on 127.0.0.1 only.
# `clock N OFFSET` restarts node N with its wall clock OFFSET seconds off (libfaketime preloaded
# into that mariadbd alone; its monotonic clock stays true, as after an NTP step), `clock N 0`
# restarts it on the real clock; `up` leaves a node's clock as it is.
#
# The nodes run as the mysql user (an SST's rsync daemon, started by the server, writes as the
# server's user; as root it would write as nobody), so their directories must be reachable by
# mysql wherever the checkout is: a checkout in root's home or a mktemp -d directory is not. They
# live in /var/tmp (world-traversable, kept across reboots like .cache), one directory per
# checkout, owned by root, each node's by mysql. The pid files stay in the checkout (root writes
# and reads them; internal/testenv's GaleraKill reads them there).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR="$ROOT/.cache/galera"
NODES_DIR=/var/tmp/relay-galera-$(printf %s "$ROOT" | sha256sum | cut -c1-12)
SQL_BASE=${RELAY_SVC_GALERA_PORT:-13316}
NODES=3
# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh"
PROVIDER=${RELAY_SVC_GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}
NODE_ENV=() # variables for the next mariadbd start_node runs (clock_node sets them)

log() { printf 'galera: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

sql_port() { echo $((SQL_BASE + $1 - 1)); }
gm_port() { echo $((14567 + 10 * ($1 - 1))); }
ist_port() { echo $((14568 + 10 * ($1 - 1))); }
sst_port() { echo $((14444 + 10 * ($1 - 1))); }
node_dir() { echo "$NODES_DIR/node$1"; }
pid_file() { echo "$DIR/node$1.pid"; }
clock_file() { echo "$DIR/node$1.clock"; }

alive() { local f; f=$(pid_file "$1"); [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }

cli() { # cli N [mariadb args]
  local n=$1; shift
  mariadb --protocol=socket -S "$(node_dir "$n")/mysqld.sock" -uroot "$@"
}

# synced: the node is a member of the primary component and applies what it receives.
synced() { [ "$(cli "$1" -N -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2)" = "Synced" ]; }

install_packages() {
  local missing=()
  command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server mariadb-client)
  [ -f "$PROVIDER" ] || missing+=(galera-4)
  command -v rsync >/dev/null || missing+=(rsync)
  command -v socat >/dev/null || missing+=(socat)
  # test/galera runs the cluster behind HAProxy too (deploy/haproxy).
  command -v haproxy >/dev/null || missing+=(haproxy)
  # apt_install keeps mariadb-server's own server (:3306) and haproxy's from starting and enabled.
  apt_install "${missing[@]+"${missing[@]}"}" || die "needed: ${missing[*]}"
  [ -f "$PROVIDER" ] || die "no Galera provider at $PROVIDER (Debian package galera-4)"
}

# nodes_dir makes the directory of this checkout's nodes, refusing one it did not make (a symlink,
# or a directory someone else owns, put there to have root write elsewhere).
nodes_dir() {
  if [ -L "$NODES_DIR" ] || { [ -e "$NODES_DIR" ] && [ "$(stat -c %u "$NODES_DIR")" != 0 ]; }; then
    die "$NODES_DIR is not a directory root made: remove it"
  fi
  install -d -o root -m 0755 "$NODES_DIR"
}

config() { # config N
  local n=$1 d; d=$(node_dir "$1")
  local peers="" i
  for i in $(seq 1 $NODES); do peers="${peers:+$peers,}127.0.0.1:$(gm_port "$i")"; done
  mkdir -p "$d"
  cat >"$d/my.cnf" <<EOF
[mariadbd]
user=mysql
datadir=$d/data
socket=$d/mysqld.sock
pid-file=$d/mysqld.pid
bind-address=127.0.0.1
port=$(sql_port "$n")
log-error=$d/error.log
server-id=$((100 + n))
max-connections=300
innodb-buffer-pool-size=128M
innodb-log-file-size=64M
innodb-autoinc-lock-mode=2
binlog-format=ROW
default-storage-engine=InnoDB
character-set-server=utf8mb4
collation-server=utf8mb4_unicode_ci
skip-name-resolve
wsrep_on=ON
wsrep_provider=$PROVIDER
wsrep_cluster_name=relay_test
wsrep_cluster_address=gcomm://$peers
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$(gm_port "$n")
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$(sst_port "$n")
wsrep_provider_options="base_host=127.0.0.1;base_port=$(gm_port "$n");gmcast.listen_addr=tcp://127.0.0.1:$(gm_port "$n");ist.recv_addr=127.0.0.1:$(ist_port "$n");gcache.size=256M;evs.keepalive_period=PT1S;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT5S;evs.install_timeout=PT5S"
EOF
}

# start N [--wsrep-new-cluster]: start one node and wait until it is synced.
start_node() {
  local n=$1; shift
  alive "$n" && { log "node $n already running (pid $(cat "$(pid_file "$n")"))"; return; }
  local d; d=$(node_dir "$n")
  mkdir -p "$DIR"
  nodes_dir
  config "$n"
  mkdir -p "$d/data"
  # The server runs as mysql, and so does the rsync daemon of an SST (as root, rsync would write
  # as nobody).
  chown -R mysql:mysql "$d"
  if [ "${1:-}" = --wsrep-new-cluster ] && [ ! -d "$d/data/mysql" ]; then
    mariadb-install-db --defaults-file="$d/my.cnf" --user=mysql --auth-root-authentication-method=socket \
      >"$d/install.log" 2>&1 || { cat "$d/install.log" >&2; die "mariadb-install-db failed"; }
  fi
  if [ "${1:-}" = --wsrep-new-cluster ] && [ -f "$d/data/grastate.dat" ]; then
    # Every node is down: node 1 may start the cluster again from its own state.
    sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$d/data/grastate.dat"
  fi
  rm -f "$(clock_file "$n")" # the node runs on the host's clock unless clock_node says otherwise
  nohup env "${NODE_ENV[@]}" mariadbd --defaults-file="$d/my.cnf" "$@" >"$d/stdout.log" 2>&1 </dev/null &
  echo $! >"$(pid_file "$n")"
  local deadline=$((SECONDS + 90))
  until synced "$n"; do
    alive "$n" || { tail -n 30 "$d/error.log" >&2; die "node $n exited while starting"; }
    [ $SECONDS -lt $deadline ] || { tail -n 30 "$d/error.log" >&2; die "node $n did not sync within 90 s"; }
    sleep 0.3
  done
  log "node $n synced on 127.0.0.1:$(sql_port "$n")"
}

up() {
  install_packages
  mkdir -p "$DIR"
  nodes_dir
  local any=0 n
  for n in $(seq 1 $NODES); do alive "$n" && any=1; done
  if [ $any = 0 ]; then
    for n in $(seq 1 $NODES); do
      (exec 3<>"/dev/tcp/127.0.0.1/$(sql_port "$n")") 2>/dev/null &&
        die "port $(sql_port "$n") is taken by something this script did not start (RELAY_SVC_GALERA_PORT moves the SQL ports)"
    done
    start_node 1 --wsrep-new-cluster
    cli 1 -e "CREATE DATABASE IF NOT EXISTS relay;
      CREATE USER IF NOT EXISTS 'relay'@'127.0.0.1' IDENTIFIED BY 'relay';
      GRANT ALL PRIVILEGES ON *.* TO 'relay'@'127.0.0.1';"
  fi
  for n in $(seq 1 $NODES); do start_node "$n"; done
}

kill_node() { # SIGKILL, as a crashed host
  local f; f=$(pid_file "$1")
  if alive "$1"; then kill -9 "$(cat "$f")"; log "node $1 killed"; fi
  rm -f "$f"
}

stop_node() {
  if [ -n "$(stop_pidfile "$(pid_file "$1")" 60)" ]; then log "node $1 stopped"; fi
}

# faketime_lib prints the path of the installed libfaketime (its directory names the architecture).
faketime_lib() {
  local f
  for f in /usr/lib/*/faketime/libfaketime.so.1; do [ -f "$f" ] && { echo "$f"; return 0; }; done
  return 1
}

# clock N OFFSET: restart node N with its wall clock OFFSET seconds ahead (+8) or behind (-8) of
# the host's; 0 restarts it on the host's clock. Its monotonic clock is left true: the node's own
# timeouts (evs, IST) behave, only what it reads as the date is off, as on a host whose clock NTP
# stepped or has not synced yet.
clock_node() {
  local n=$1 off=$2
  [[ $off =~ ^[+-]?[0-9]+$ ]] || die "clock: OFFSET is a whole number of seconds (+8, -8, 0), not $off"
  stop_node "$n"
  if ! [[ $off =~ ^[+-]?0+$ ]]; then
    local lib
    if ! lib=$(faketime_lib); then
      log "installing libfaketime from Debian (first run only)"
      apt_install libfaketime || die "needed: libfaketime"
      lib=$(faketime_lib) || die "no libfaketime.so.1 under /usr/lib (Debian package libfaketime)"
    fi
    [ "${off:0:1}" = - ] || off="+${off#+}"
    NODE_ENV=("LD_PRELOAD=$lib" "FAKETIME=${off}s" "FAKETIME_DONT_FAKE_MONOTONIC=1")
  fi
  start_node "$n"
  [ ${#NODE_ENV[@]} = 0 ] || echo "$off" >"$(clock_file "$n")"
  NODE_ENV=()
}

print_env() {
  local n
  for n in $(seq 1 $NODES); do
    printf 'RELAY_TEST_GALERA_DSN%d=%q\n' "$n" "relay:relay@tcp(127.0.0.1:$(sql_port "$n"))/relay"
  done
}

case "${1:-}" in
  up) up; print_env ;;
  down) for n in $(seq $NODES -1 1); do stop_node "$n"; done ;;
  status)
    for n in $(seq 1 $NODES); do
      if alive "$n"; then
        echo "node $n: running (pid $(cat "$(pid_file "$n")")), $(cli "$n" -N -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2 || echo unreachable)$([ -f "$(clock_file "$n")" ] && echo ", clock $(cat "$(clock_file "$n")") s")"
      else
        echo "node $n: not running"
      fi
    done
    print_env ;;
  env) print_env ;;
  start) [ -n "${2:-}" ] || die "usage: $0 start N"; start_node "$2" ;;
  kill) [ -n "${2:-}" ] || die "usage: $0 kill N"; kill_node "$2" ;;
  clock) [ -n "${3:-}" ] || die "usage: $0 clock N OFFSET"; clock_node "$2" "$3" ;;
  sql) [ -n "${2:-}" ] || die "usage: $0 sql N [mariadb args]"; n=$2; shift 2; cli "$n" "$@" ;;
  *) echo "usage: $0 up|down|status|env|start N|kill N|clock N OFFSET|sql N [args]" >&2; exit 2 ;;
esac
