#!/usr/bin/env bash
# demo.sh — relay end to end on local services: real Kafka + MariaDB, synthetic orders with known
# totals, relay committing them exactly once into the tables of a pipeline spec (scripts/demo/
# pipeline.yaml: a base table, its hourly rollup and a filtered table), then the totals and the
# metrics side by side. DEMO_SPEC= (empty) runs the default spec (order_stats_minute) instead.
# DEMO_FORMAT=avro (or protobuf, or json_schema) runs the same on a topic of that registry format:
# the Schema Registry (scripts/registry.sh) comes up too, loadgen registers its schema there, and
# the spec reads that format.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
. scripts/lib.sh
# python3 compares the tables with loadgen's totals, curl reads /metrics; relay's Kafka client is C
# (cgo), built with gcc.
need_go
need python3=python3 curl=curl gcc=gcc
svc_env=$(scripts/services.sh up) # assigned first: a failed start stops the script
eval "$svc_env"
make -s build
FORMAT=${DEMO_FORMAT:-json}
LOADGEN_FORMAT=()
case "$FORMAT" in
  json) ;;
  avro | protobuf | json_schema)
    reg_env=$(scripts/registry.sh start) # assigned first, as above
    eval "$reg_env"
    export RELAY_SCHEMA_REGISTRY_URL=$RELAY_TEST_REGISTRY
    LOADGEN_FORMAT=(--format "$FORMAT" --schema-registry "$RELAY_TEST_REGISTRY")
    ;;
  *) echo "demo: DEMO_FORMAT=$FORMAT: json, avro, protobuf or json_schema" >&2; exit 2 ;;
esac
JOB=${DEMO_JOB:-demo}
TOPIC=${DEMO_TOPIC:-orders_demo_${FORMAT}_$(date +%s)}
ORDERS=${DEMO_ORDERS:-50000}
HTTP=${DEMO_HTTP:-127.0.0.1:18080}
SPEC=${DEMO_SPEC-scripts/demo/pipeline.yaml}
WORK=$(mktemp -d)
if [ -n "$SPEC" ]; then
  export RELAY_PIPELINE_FILE=$PWD/$SPEC
  if [ "$FORMAT" != json ]; then
    # The same spec, reading the registry format: its input block names the format.
    sed "s/^input:\$/input:\n  format: $FORMAT/" "$SPEC" >"$WORK/pipeline.yaml"
    RELAY_PIPELINE_FILE=$WORK/pipeline.yaml
  fi
  TABLES=$(sed -n 's/^  - table: //p' "$SPEC")
else
  TABLES=order_stats_minute
  [ "$FORMAT" != json ] && export RELAY_INPUT_FORMAT=$FORMAT
fi
export RELAY_JOB_NAME=$JOB RELAY_KAFKA_BROKERS=$RELAY_TEST_KAFKA RELAY_KAFKA_TOPICS=$TOPIC
export RELAY_MYSQL_DSN="$RELAY_TEST_MYSQL_DSN" RELAY_SUBTASKS=2 RELAY_CHECKPOINT_INTERVAL=500ms RELAY_HTTP_ADDR=$HTTP
sql() { scripts/services.sh mysql relay "$@"; }

# A fresh demo job each time: clear what an earlier demo left in the shared demo database (before
# producing: loadgen refuses a topic whose offsets a ledger still holds, as a reused DEMO_TOPIC's;
# the table's owner too, so a demo under another DEMO_JOB may take it).
for t in $TABLES; do
  sql -e "DROP TABLE IF EXISTS $t; DELETE FROM relay_tables WHERE table_name='$t';" 2>/dev/null || true
done
sql -e "DELETE FROM relay_checkpoints WHERE job='$JOB'; DELETE FROM relay_offsets WHERE job='$JOB'; DELETE FROM relay_jobs WHERE job='$JOB'; DELETE FROM relay_dlq WHERE job='$JOB';" 2>/dev/null || true

echo "== producing $ORDERS synthetic $FORMAT orders to $TOPIC (Kafka transactions, 5% aborted, 0.5% bad records)"
bin/relay loadgen --brokers "$RELAY_TEST_KAFKA" --topic "$TOPIC" --create-partitions 4 --orders "$ORDERS" --abort-rate 0.05 --bad-rate 0.005 "${LOADGEN_FORMAT[@]}" \
  --skus 50 --windows 5 --seed 42 --totals "$WORK/expected.json" 2> >(grep -v '^%' >&2)

echo "== starting relay (job $JOB, logs in $WORK/relay.log, metrics on http://$HTTP/metrics)"
bin/relay run >"$WORK/relay.log" 2>&1 &
RELAY_PID=$!
trap 'kill $RELAY_PID 2>/dev/null || true' EXIT

want=$(python3 -c "import json;print(json.load(open('$WORK/expected.json'))['good_orders'])")
first=$(echo "$TABLES" | head -1)
count=$(sed -n '/measures:/,/kind: count/s/.*column: \([a-z_]*\), kind: count.*/\1/p' "${SPEC:-/dev/null}" | head -1)
count=${count:-order_count}
for _ in $(seq 1 120); do
  got=$(sql -N -e "SELECT COALESCE(SUM($count),0) FROM $first" 2>/dev/null || echo 0)
  [ "$got" = "$want" ] && break
  sleep 0.5
done
echo "== relay committed $got of $want good orders (in $first)"
echo
echo "== ledger (last checkpoints)"
sql -t -e "SELECT checkpoint_id, state, tags, records, decided_at FROM relay_checkpoints WHERE job='$JOB' ORDER BY checkpoint_id DESC LIMIT 5"
for t in $TABLES; do
  echo "== $t (first rows)"
  sql -t -e "SELECT * FROM $t LIMIT 5"
done
if [ -n "$SPEC" ]; then
  echo "== the hourly rollup is the sum of its base, in one snapshot"
  sql -t -e "SELECT COUNT(*) AS shop_hours, SUM(h.orders = b.orders AND h.revenue = b.revenue) AS equal FROM demo_shop_hour h JOIN (SELECT shop, TIMESTAMP(DATE_FORMAT(window_start, '%Y-%m-%d %H:00:00')) AS hour, SUM(orders) orders, SUM(revenue) revenue FROM demo_sales_minute GROUP BY shop, hour) b ON b.shop = h.shop AND b.hour = h.window_start"
fi
echo "== dead-letter table"
sql -t -e "SELECT reason, COUNT(*) n FROM relay_dlq WHERE job='$JOB' GROUP BY reason"
echo "== exact comparison of every row of every table with loadgen's totals"
python3 - "$WORK/expected.json" <<'PY'
import json, subprocess, sys
d = json.load(open(sys.argv[1]))
print("bad records by reason:", d["bad_records"], " aborted orders:", d["aborted_orders"])
failed = False
for t in d["tables"]:
    cols = ", ".join(f"CAST(`{c}` AS CHAR)" for c in t["columns"])
    out = subprocess.run(["scripts/services.sh", "mysql", "relay", "-N", "-e", f"SELECT {cols} FROM `{t['table']}`"],
        capture_output=True, text=True, check=True).stdout
    got = {tuple(l.split("\t")) for l in out.splitlines()}
    want = {tuple(r) for r in t["rows"]}
    diff = got ^ want
    print(f"{t['table']}: {len(want)} rows expected, {len(got)} in MySQL, {len(diff)} differ")
    failed = failed or bool(diff)
sys.exit(1 if failed else 0)
PY
echo "== relay status"
bin/relay status
echo "== relay verify (recount the topic, diff against MySQL)"
bin/relay verify
echo "== metrics"
curl -s "http://$HTTP/metrics" | grep -E '^relay_(checkpoints_total|records_total|bad_records_total\{.*(not_json|bad_amount)|transactions_total\{action="commit",origin="normal"|last_committed_checkpoint_id|xa_pending_transactions|consumer_lag_records)' || true
echo "== readiness: $(curl -s "http://$HTTP/readyz")"
kill -TERM $RELAY_PID
wait $RELAY_PID && echo "== relay drained and stopped cleanly (SIGTERM)"
