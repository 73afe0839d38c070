#!/usr/bin/env bash
# bench.sh — relay's benchmarks against the local Kafka and MariaDB (scripts/services.sh), written
# into docs/BENCHMARKS.md (generated section), docs/benchmarks.svg and bench/results/last-run.json.
#
#   make bench                                  # everything, about 20 minutes on 2 cores
#   BENCH_STEPS=throughput,latency make bench   # some steps; the others keep their last results
#
# Steps: micro (Go micro-benchmarks, one core), throughput (bare consumer, librdkafka's own C batch
# read (bench/creader) and relay XA / held / XA+append, first record to last commit), latency (checkpoint phases and visibility at 200ms, 1s and
# 10s intervals under half the measured maximum load), recovery (start-up with 100 in-doubt XA
# branches), rss (peak memory with ~1M keys in one epoch), profile (pprof of relay's pipeline
# in-process, perf of the binary); flink (relay against Apache Flink's XA JDBC sink, bench/flink; only
# when BENCH_STEPS names it: it needs Maven and ≈85 MB of Flink jars); group (one instance against one
# and two consumer-group members, alternating on a 16-partition topic; only when BENCH_STEPS names it,
# scale BENCH_GROUP_ORDERS=25000000 BENCH_GROUP_PARTITIONS=16 BENCH_GROUP_MODES=xa,held
# BENCH_GROUP_KINDS=single,member,two); formats (the same orders as json, avro, protobuf and
# json_schema, relay XA on each, alternating; only when BENCH_STEPS names it, scale
# BENCH_FORMAT_ORDERS=2000000 BENCH_FORMATS=json,avro,protobuf,json_schema).
#
# Scale (defaults): BENCH_ORDERS=4000000 BENCH_REPS=3 BENCH_SKUS=1000 BENCH_WINDOWS=10
# BENCH_SUBTASKS=2 BENCH_TP_INTERVAL=1s BENCH_TP_CLIENTS=tuned,shipped BENCH_LAT_DURATION=30s
# (10s interval: twice that) BENCH_LAT_REPS=3 BENCH_LAT_RATE=<auto: half the XA maximum> BENCH_RECOVERY_BRANCHES=100
# BENCH_RSS_ORDERS=1500000 BENCH_RSS_SKUS=200000 BENCH_MICRO_COUNT=3 BENCH_MICRO_TIME=1s.
# BENCH_OUT is where logs, profiles and perf data go (default: a new directory under $TMPDIR).
#
# Every topic, database and job it makes has a random suffix and is removed at the end (Ctrl-C too).
set -euo pipefail
cd "$(dirname "$0")/.."
svc_env=$(scripts/services.sh up) # assigned first: a failed start stops the script
eval "$svc_env"
export RELAY_TEST_KAFKA RELAY_TEST_MYSQL_DSN
# The schema registry the formats step reads Avro, Protobuf and JSON Schema through.
if [[ ",${BENCH_STEPS:-}," == *",formats,"* ]]; then
  reg_env=$(scripts/registry.sh start)
  eval "$reg_env"
  export RELAY_TEST_REGISTRY
fi

# A private build: bin/relay may be rebuilt by someone else while the benchmark runs.
export BENCH_BIN=${BENCH_BIN:-$PWD/.cache/bench/bin}
mkdir -p "$BENCH_BIN"
BENCH_BIN=$(cd "$BENCH_BIN" && pwd) # absolute: the bench programs are built with go -C bench
VERSION=$(git describe --always --dirty 2>/dev/null || echo dev)
export CGO_ENABLED=1
go build -ldflags "-X github.com/relay-sh/relay/internal/metrics.Version=$VERSION" -o "$BENCH_BIN/relay" ./cmd/relay
# bench/ is its own Go module (bench/go.mod, which replaces the product with ../): built from inside it.
for c in relaybench rawconsume relayprof; do
  go -C bench build -o "$BENCH_BIN/$c" "./cmd/$c"
done
# librdkafka's own C batch read, the throughput step's ceiling: linked against the very archive
# confluent-kafka-go bundles, so it runs the client relay runs.
kafka_dir=$(go list -m -f '{{.Dir}}' github.com/confluentinc/confluent-kafka-go/v2)
cc -O2 -I"$kafka_dir/kafka/librdkafka_vendor" -o "$BENCH_BIN/creader" bench/creader/creader.c \
  "$kafka_dir/kafka/librdkafka_vendor/librdkafka_glibc_linux_$(go env GOARCH).a" -lm -ldl -lpthread -lrt

cmd="make bench"
for v in $(env | grep -o '^BENCH_[A-Z_]*' | grep -vx 'BENCH_BIN\|BENCH_OUT\|BENCH_COMMAND' | sort); do
  cmd="$v=${!v} $cmd"
done
export BENCH_COMMAND=${BENCH_COMMAND:-$cmd}
exec "$BENCH_BIN/relaybench"
