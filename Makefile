# relay — make demo runs the pipeline end to end on local services (DEMO_FORMAT=avro: an Avro topic
# through the Schema Registry); make test runs every test against real Kafka and MariaDB started by
# scripts/services.sh and the Schema Registry started by scripts/registry.sh.
SHELL := /bin/bash
GO ?= go
BIN := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/relay-sh/relay/internal/metrics.Version=$(VERSION)
export CGO_ENABLED := 1

.PHONY: build build-crash services services-down test test-unit crashtest demo lint bench fuzz clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/relay ./cmd/relay

# The crash tests use a build with the named crash points compiled in.
build-crash:
	$(GO) build -tags crashpoints -ldflags "$(LDFLAGS)" -o $(BIN)/relay-crash ./cmd/relay

services:
	scripts/services.sh up
	scripts/registry.sh start

services-down:
	scripts/services.sh down
	scripts/galera.sh down
	scripts/registry.sh stop

# Every test, against real services (started here unless RELAY_TEST_KAFKA / RELAY_TEST_MYSQL_DSN /
# RELAY_TEST_REGISTRY name them).
test: lint
	scripts/test.sh

# The fast tier: only what needs no service (-short skips every test that asks internal/testenv
# for a server), for the edit-compile-test loop. make test stays the whole suite.
test-unit:
	$(GO) test -short ./...

# The long crash tests: hundreds of SIGKILLs of relay, and of MariaDB itself, on JSON topics and on
# topics of each registry format (whose registry is SIGKILLed and blackholed too); the elastic group
# membership tests with RELAY_TEST_ELASTIC_LONG=1 (rounds of joins, leaves and SIGKILLs of members,
# MariaDB SIGKILLed once a round); then the Galera scenarios (test/galera, on the 3-node cluster of
# scripts/galera.sh) with RELAY_TEST_GALERA_LONG=1: longer runs, more kills and rounds.
crashtest:
	RELAY_CRASH_KILLS=$${RELAY_CRASH_KILLS:-200} RELAY_CRASH_KILL_DB=1 scripts/test.sh -v -run 'TestRandomKills|TestRegistryKills' -timeout 90m ./test/crash/
	RELAY_TEST_ELASTIC_LONG=1 scripts/test.sh -v -run 'TestElastic' -timeout 60m ./test/crash/
	RELAY_TEST_START_WAIT=60s scripts/test.sh -v -run 'TestStartBeforeDependencies' -timeout 20m ./test/crash/
	RELAY_TEST_GALERA_LONG=1 scripts/test.sh -v -timeout 90m ./test/galera/

demo:
	scripts/demo.sh

lint:
	scripts/lint.sh

bench:
	scripts/bench.sh

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $${FUZZTIME:-10m} ./internal/order/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $${FUZZTIME:-10m} ./internal/money/
	$(GO) test -run '^$$' -fuzz FuzzSpecDecode -fuzztime $${FUZZTIME:-10m} ./internal/spec/
	$(GO) test -run '^$$' -fuzz FuzzSequences -fuzztime $${FUZZTIME:-10m} ./internal/spec/
	$(GO) test -run '^$$' -fuzz FuzzAvroDecode -fuzztime $${FUZZTIME:-10m} ./internal/format/
	$(GO) test -run '^$$' -fuzz FuzzJSONSchemaDecode -fuzztime $${FUZZTIME:-10m} ./internal/format/
	$(GO) test -run '^$$' -fuzz FuzzProtobufDecode -fuzztime $${FUZZTIME:-10m} ./internal/format/

clean:
	rm -rf $(BIN)
