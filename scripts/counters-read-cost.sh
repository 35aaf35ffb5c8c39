#!/usr/bin/env bash
# What reading the belt's counters in a reader's start costs the server and its client, apart
# from any round trip: pgbench runs, on one connection, a pipelined read-only transaction
# (BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY, a one-row read by key of a 10,000-row
# table, COMMIT; all in one round trip, as a node sends a reader with its start) with and
# without a read of a one-row counters table before the body's read, as the node's readers do,
# the two alternated, and prints each run's mean latency (RESULTS.md, "A slower machine again,
# and what a reader's counters cost the server"). Its tables live in a database of its own,
# made and dropped here. A model, not the node's own statements: the node sends BEGIN and the
# counters' read as one simple-protocol string (`EXECUTE` of a statement it prepared), this the
# read as a prepared statement of the extended protocol.
# Usage: scripts/counters-read-cost.sh [ROUNDS] [SECONDS]   (defaults 3 and 5)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-5}
[[ "$rounds" =~ ^[1-9][0-9]*$ && "$secs" =~ ^[1-9][0-9]*$ ]] || { echo "counters-read-cost: ROUNDS and SECONDS are positive counts, not '$rounds' and '$secs'" >&2; exit 2; }
command -v pgbench >/dev/null || { echo "counters-read-cost: pgbench is missing (Debian's postgresql-client)" >&2; exit 2; }
scripts/start-databases.sh >/dev/null
# Not `ensemble_%`: that is the runs' own databases, which scripts/server-suites.sh watches.
db=counters_read_cost
export PGOPTIONS="-c client_min_messages=warning"
psql=(psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -qAt)
work=$(mktemp -d)
cleanup() { "${psql[@]}" -d postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
"${psql[@]}" -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
"${psql[@]}" -d "$db" -c "CREATE TABLE counters (id int PRIMARY KEY, globals bigint, local_writes bigint); INSERT INTO counters VALUES (0, 0, 0);
  CREATE TABLE item (id int PRIMARY KEY, v text); INSERT INTO item SELECT g, md5(g::text) FROM generate_series(1, 10000) g" -c "VACUUM ANALYZE"
for with in with without; do
  {
    echo '\set k random(1, 10000)'
    echo '\startpipeline'
    echo 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;'
    [ "$with" = with ] && echo 'SELECT globals, local_writes FROM counters WHERE id = 0;'
    echo 'SELECT v FROM item WHERE id = :k;'
    echo 'COMMIT;'
    echo '\endpipeline'
  } > "$work/$with.sql"
done
echo "counters-read-cost: $rounds round(s) of $secs s each way, one connection, -M prepared, alternated"
for r in $(seq "$rounds"); do
  for with in with without; do
    mean=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 1 -T "$secs" -f "$work/$with.sql" "$db" 2>&1 | sed -n 's/^latency average = //p')
    echo "round $r, $with the counters' read: mean latency $mean"
  done
done
