#!/usr/bin/env bash
# bench.sh — micro-benchmarks of the hot path (decode, parse, aggregate). The end-to-end benchmark
# against the local Kafka and MariaDB lives in bench/ (see docs/BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench . -benchmem -count 5 ./internal/order/ ./internal/money/ ./internal/aggregate/
if [ -x bench/e2e.sh ]; then bench/e2e.sh; fi
