#!/usr/bin/env bash
# demo.sh — relay end to end on local services: real Kafka + MariaDB, synthetic orders with known
# totals, relay committing them exactly once, then the totals and the metrics side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
svc_env=$(scripts/services.sh up) # assigned first: a failed start stops the script
eval "$svc_env"
make -s build
JOB=${DEMO_JOB:-demo}
TOPIC=${DEMO_TOPIC:-orders_demo_$(date +%s)}
ORDERS=${DEMO_ORDERS:-50000}
HTTP=${DEMO_HTTP:-127.0.0.1:18080}
export RELAY_JOB_NAME=$JOB RELAY_KAFKA_BROKERS=$RELAY_TEST_KAFKA RELAY_KAFKA_TOPICS=$TOPIC
export RELAY_MYSQL_DSN="$RELAY_TEST_MYSQL_DSN" RELAY_SUBTASKS=2 RELAY_CHECKPOINT_INTERVAL=500ms RELAY_HTTP_ADDR=$HTTP
WORK=$(mktemp -d)
sql() { scripts/services.sh mysql relay "$@"; }

# A fresh demo job each time: clear what an earlier demo left in the shared demo database (before
# producing: loadgen refuses a topic whose offsets a ledger still holds, as a reused DEMO_TOPIC's;
# the table's owner too, so a demo under another DEMO_JOB may take it).
sql -e "DELETE FROM relay_checkpoints WHERE job='$JOB'; DELETE FROM relay_offsets WHERE job='$JOB'; DELETE FROM relay_jobs WHERE job='$JOB'; DROP TABLE IF EXISTS order_stats_minute; DELETE FROM relay_dlq WHERE job='$JOB'; DELETE FROM relay_tables WHERE table_name='order_stats_minute';" 2>/dev/null || true

echo "== producing $ORDERS synthetic orders to $TOPIC (Kafka transactions, 5% aborted, 0.5% bad records)"
bin/relay loadgen --brokers "$RELAY_TEST_KAFKA" --topic "$TOPIC" --create-partitions 4 --orders "$ORDERS" --abort-rate 0.05 --bad-rate 0.005 \
  --skus 50 --windows 5 --seed 42 --totals "$WORK/expected.json" 2> >(grep -v '^%' >&2)

echo "== starting relay (job $JOB, logs in $WORK/relay.log, metrics on http://$HTTP/metrics)"
bin/relay run >"$WORK/relay.log" 2>&1 &
RELAY_PID=$!
trap 'kill $RELAY_PID 2>/dev/null || true' EXIT

want=$(python3 -c "import json;print(json.load(open('$WORK/expected.json'))['good_orders'])")
for _ in $(seq 1 120); do
  got=$(sql -N -e "SELECT COALESCE(SUM(order_count),0) FROM order_stats_minute" 2>/dev/null || echo 0)
  [ "$got" = "$want" ] && break
  sleep 0.5
done
echo "== relay committed $got of $want good orders"
echo
echo "== ledger (last checkpoints)"
sql -t -e "SELECT checkpoint_id, state, tags, records, decided_at FROM relay_checkpoints WHERE job='$JOB' ORDER BY checkpoint_id DESC LIMIT 5"
echo "== totals in MySQL vs expected (first rows)"
sql -t -e "SELECT window_start, sku, order_count, amount_sum FROM order_stats_minute ORDER BY window_start, sku LIMIT 8"
python3 - "$WORK/expected.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("expected (first rows):")
for r in d["totals"][:8]:
    print(f'  {r["window_start"]}  {r["sku"]:<8} {r["order_count"]:>6} {r["amount_sum"]:>20}')
print("bad records by reason:", d["bad_records"], " aborted orders:", d["aborted_orders"])
PY
echo "== dead-letter table"
sql -t -e "SELECT reason, COUNT(*) n FROM relay_dlq WHERE job='$JOB' GROUP BY reason"
echo "== exact comparison of every row"
python3 - "$WORK/expected.json" <<PY
import json, subprocess, sys
from decimal import Decimal
d = json.load(open(sys.argv[1]))
out = subprocess.run(["scripts/services.sh", "mysql", "relay", "-N", "-e",
    "SELECT DATE_FORMAT(window_start,'%Y-%m-%d %H:%i:%s'), sku, order_count, amount_sum FROM order_stats_minute"],
    capture_output=True, text=True, check=True).stdout
got = {(w, s): (int(c), Decimal(a)) for w, s, c, a in (l.split("\t") for l in out.splitlines())}
want = {(r["window_start"], r["sku"]): (r["order_count"], Decimal(r["amount_sum"])) for r in d["totals"]}
bad = [k for k in set(got) | set(want) if got.get(k) != want.get(k)]
print(f"{len(want)} keys expected, {len(got)} in MySQL, {len(bad)} differ")
sys.exit(1 if bad else 0)
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
