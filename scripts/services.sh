#!/usr/bin/env bash
# services.sh up|down|status|env — the real Kafka (KRaft) and MariaDB that tests and the demo use.
#
# Invariant: `down` stops exactly what `up` started (pids recorded under .cache/services), and never
# touches a server named by RELAY_TEST_KAFKA / RELAY_TEST_MYSQL_DSN: those are used as they are.
# Everything listens on loopback only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh"
CACHE="$ROOT/.cache"
STATE="$CACHE/services"
KAFKA_PORT=${RELAY_SVC_KAFKA_PORT:-19092}
KAFKA_CTRL_PORT=$((KAFKA_PORT + 1))
MYSQL_PORT=${RELAY_SVC_MYSQL_PORT:-13306}
KAFKA_DIR="$CACHE/kafka"
MYSQL_DIR="$CACHE/mariadb"

log() { printf 'services: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
  log "$what is up"
}

# ---------------------------------------------------------------- Kafka
kafka_classpath() {
  # Kafka 4 brokers need Java 17 or later; Maven fetches their jars.
  need java=default-jre-headless mvn=maven || die "Java 17+ and Maven are needed for the Kafka broker"
  local major; major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = \([0-9]*\).*/\1/p')
  [ "${major:-0}" -ge 17 ] || die "the Kafka broker needs Java 17 or later; java here is ${major:-unknown}"
  if [ ! -f "$KAFKA_DIR/lib/.complete" ]; then
    log "resolving Kafka broker jars from Maven Central (first run only)"
    rm -rf "${KAFKA_DIR:?}/lib"
    (cd "$ROOT/scripts/kafka" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$KAFKA_DIR/lib") >&2
    touch "$KAFKA_DIR/lib/.complete"
  fi
  echo "$KAFKA_DIR/lib/*"
}

kafka_ready() { grep -q 'Kafka Server started' "$KAFKA_DIR/server.log" 2>/dev/null && port_open "$KAFKA_PORT"; }

kafka_up() {
  if [ -n "${RELAY_TEST_KAFKA:-}" ]; then log "using Kafka at $RELAY_TEST_KAFKA"; return; fi
  if alive "$STATE/kafka.pid"; then log "Kafka already running (pid $(cat "$STATE/kafka.pid"))"; return; fi
  port_open "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by something this script did not start; set RELAY_TEST_KAFKA or RELAY_SVC_KAFKA_PORT"
  local cp; cp=$(kafka_classpath)
  mkdir -p "$KAFKA_DIR"
  cat >"$KAFKA_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CTRL_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CTRL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=4
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=-1
EOF
  cat >"$KAFKA_DIR/log4j2.properties" <<EOF
rootLogger.level=INFO
rootLogger.appenderRef.f.ref=F
appender.f.type=File
appender.f.name=F
appender.f.fileName=$KAFKA_DIR/server.log
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.state.name=state.change.logger
logger.state.level=WARN
EOF
  local java_opts=(-Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$KAFKA_DIR/log4j2.properties")
  if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
    local id; id=$(java -cp "$cp" "${java_opts[@]}" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    java -cp "$cp" "${java_opts[@]}" kafka.tools.StorageTool format -t "$id" \
      -c "$KAFKA_DIR/server.properties" >"$KAFKA_DIR/format.log" 2>&1 || { cat "$KAFKA_DIR/format.log" >&2; die "kafka storage format failed"; }
  fi
  : >"$KAFKA_DIR/server.log"
  mkdir -p "$STATE"
  nohup java -cp "$cp" "${java_opts[@]}" kafka.Kafka "$KAFKA_DIR/server.properties" \
    >"$KAFKA_DIR/stdout.log" 2>&1 </dev/null &
  echo $! >"$STATE/kafka.pid"
  wait_for 120 "Kafka on 127.0.0.1:$KAFKA_PORT" kafka_ready || { tail -n 30 "$KAFKA_DIR/stdout.log" "$KAFKA_DIR/server.log" >&2; die "Kafka did not start"; }
}

# ---------------------------------------------------------------- MariaDB
mariadbd_bin() { command -v mariadbd || command -v mysqld || ls /usr/sbin/mariadbd 2>/dev/null; }

mysql_install() {
  # apt_install keeps the package's own server (on :3306, started and enabled by its maintainer
  # scripts otherwise) from starting: the instance below is the one relay's tests use.
  [ -n "$(mariadbd_bin)" ] || apt_install mariadb-server mariadb-client || die "mariadb-server is needed"
}

# mysql_tls makes a private CA and a server certificate for 127.0.0.1/localhost (first run only), so
# relay's verified-TLS path is tested against the real server.
mysql_tls() {
  local d="$MYSQL_DIR/tls"
  [ -f "$d/server-cert.pem" ] && return
  need openssl=openssl || die "openssl is needed for the test certificates"
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=relay test CA" \
    -keyout "$d/ca-key.pem" -out "$d/ca.pem" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$d/server-key.pem" -out "$d/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$d/san.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -CAcreateserial \
    -days 3650 -extfile "$d/san.ext" -out "$d/server-cert.pem" >/dev/null 2>&1
  [ -f "$d/server-cert.pem" ] || die "could not make the test TLS certificates"
}

mysql_cli() { mariadb --protocol=socket -S "$MYSQL_DIR/mysqld.sock" -uroot "$@"; }

mysql_ready() { mysql_cli -e 'SELECT 1' >/dev/null 2>&1; }

mysql_up() {
  if [ -n "${RELAY_TEST_MYSQL_DSN:-}" ]; then log "using MySQL from RELAY_TEST_MYSQL_DSN"; return; fi
  if alive "$STATE/mariadb.pid"; then log "MariaDB already running (pid $(cat "$STATE/mariadb.pid"))"; return; fi
  port_open "$MYSQL_PORT" && die "port $MYSQL_PORT is taken by something this script did not start; set RELAY_TEST_MYSQL_DSN or RELAY_SVC_MYSQL_PORT"
  mysql_install
  mkdir -p "$MYSQL_DIR" "$STATE"
  mysql_tls
  # Run as production does: binary log on, ROW format, so XA PREPARE takes its logged path. Nothing
  # reads an old binary log here (no replica), so one is removed after an hour, at the next rotation:
  # kept for ever, the tests and benchmarks of a long-lived box filled its disk (21 GB in 18 hours).
  cat >"$MYSQL_DIR/my.cnf" <<EOF
[mariadbd]
user=root
datadir=$MYSQL_DIR/data
socket=$MYSQL_DIR/mysqld.sock
pid-file=$MYSQL_DIR/mysqld.pid
bind-address=127.0.0.1
port=$MYSQL_PORT
log-error=$MYSQL_DIR/error.log
log-bin=$MYSQL_DIR/data/binlog
binlog-format=ROW
server-id=1
max-connections=500
innodb-buffer-pool-size=512M
innodb-log-file-size=256M
innodb-flush-log-at-trx-commit=1
sync-binlog=1
binlog-expire-logs-seconds=3600
character-set-server=utf8mb4
collation-server=utf8mb4_unicode_ci
skip-name-resolve
ssl-ca=$MYSQL_DIR/tls/ca.pem
ssl-cert=$MYSQL_DIR/tls/server-cert.pem
ssl-key=$MYSQL_DIR/tls/server-key.pem
EOF
  local fresh=0
  if [ ! -d "$MYSQL_DIR/data/mysql" ]; then
    fresh=1
    mariadb-install-db --defaults-file="$MYSQL_DIR/my.cnf" --auth-root-authentication-method=socket \
      >"$MYSQL_DIR/install.log" 2>&1 || { cat "$MYSQL_DIR/install.log" >&2; die "mariadb-install-db failed"; }
  fi
  nohup "$(mariadbd_bin)" --defaults-file="$MYSQL_DIR/my.cnf" >"$MYSQL_DIR/stdout.log" 2>&1 </dev/null &
  echo $! >"$STATE/mariadb.pid"
  wait_for 60 "MariaDB on 127.0.0.1:$MYSQL_PORT" mysql_ready || { tail -n 30 "$MYSQL_DIR/error.log" >&2; die "MariaDB did not start"; }
  if [ $fresh = 1 ]; then
    # The test user may create a database per test; relay itself needs far less (docs/CONFIG.md).
    mysql_cli -e "CREATE DATABASE IF NOT EXISTS relay;
      CREATE USER IF NOT EXISTS 'relay'@'127.0.0.1' IDENTIFIED BY 'relay';
      CREATE USER IF NOT EXISTS 'relay'@'localhost' IDENTIFIED BY 'relay';
      GRANT ALL PRIVILEGES ON *.* TO 'relay'@'127.0.0.1';
      GRANT ALL PRIVILEGES ON *.* TO 'relay'@'localhost';"
  fi
}

stop_pid() { # stop_pid NAME
  local pid; pid=$(stop_pidfile "$STATE/$1.pid" 30)
  if [ -n "$pid" ]; then log "stopped $1 (pid $pid)"; fi
}

print_env() {
  printf 'RELAY_TEST_KAFKA=%q\n' "${RELAY_TEST_KAFKA:-127.0.0.1:$KAFKA_PORT}"
  printf 'RELAY_TEST_MYSQL_DSN=%q\n' "${RELAY_TEST_MYSQL_DSN:-relay:relay@tcp(127.0.0.1:$MYSQL_PORT)/relay}"
  # The CA of the MariaDB started here; a server named by RELAY_TEST_MYSQL_DSN brings its own, or none.
  if [ -z "${RELAY_TEST_MYSQL_DSN:-}" ]; then
    printf 'RELAY_TEST_MYSQL_CA=%q\n' "$MYSQL_DIR/tls/ca.pem"
  elif [ -n "${RELAY_TEST_MYSQL_CA:-}" ]; then
    printf 'RELAY_TEST_MYSQL_CA=%q\n' "$RELAY_TEST_MYSQL_CA"
  fi
}

case "${1:-}" in
  up) mysql_up; kafka_up; print_env ;;
  down) stop_pid kafka; stop_pid mariadb ;;
  status)
    for s in kafka mariadb; do
      if alive "$STATE/$s.pid"; then echo "$s: running (pid $(cat "$STATE/$s.pid"))"; else echo "$s: not started here"; fi
    done
    print_env ;;
  env) print_env ;;
  mysql) shift; mysql_cli "$@" ;;
  *) echo "usage: $0 up|down|status|env|mysql [args]" >&2; exit 2 ;;
esac
