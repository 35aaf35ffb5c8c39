#!/usr/bin/env bash
# The suites that need the real database servers (run by .ci/run after scripts/start-databases.sh):
#  1. the server backends' own tests against PostgreSQL and MariaDB (ignored by `./x test`),
#     a 2PC node process killed and resumed over its database, and a longer seeded sweep of
#     lost messages and restarted nodes of the 2PC baseline;
#  2. every SQL application under every Conveyor Belt system on each server, simulated and as
#     real processes, and under the two-phase-commit baseline (real processes), each
#     run checked serializable by replay (`ensemble bench` exits non-zero on a failed check);
#     On PostgreSQL also with locals side by side under SSI (--writers-side-by-side); and on
#     each server (and PostgreSQL's locals side by side, and the 2PC baseline on both) once with the server
#     ending the node's sessions every half second (scripts/sessions-ended.sh); and the 2PC
#     baseline with two of its nodes killed and started again within each run (--restart-node);
#     and the overhead figure, briefly, on each server;
#  3. a server that cannot serve is refused before any run starts, with a message naming it
#     (one that is not there; SQLite and, on a second PostgreSQL cluster on port 5433 that
#     scripts/postgres-without-prepared-transactions.sh makes, a server without prepared
#     transactions, for 2pc);
#  4. the runs left nothing on the servers: no database, prepared transaction or XA branch of
#     theirs (what was there before the suite started is named, and not counted against it).
# Usage: scripts/server-suites.sh [path to a built ensemble binary]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-target/release/ensemble}"
[ -x "$bin" ] || { echo "server-suites: $bin is not built (cargo build --release -p ensemble)" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# What the runs leave on the servers: their databases, and prepared transactions or XA branches.
# A name per line, sorted. What was there before the suite started (a run killed with its
# machine, say, or another user's) is not this suite's doing: it is named, and only what the
# suite's own runs leave fails it.
leftovers() {
  psql -h 127.0.0.1 -U postgres -d test -Atc "SELECT 'PostgreSQL database ' || datname FROM pg_database WHERE datname LIKE 'ensemble\_%'"
  psql -h 127.0.0.1 -U postgres -d test -Atc "SELECT 'PostgreSQL prepared transaction ' || gid || ' in ' || database FROM pg_prepared_xacts"
  mariadb -h 127.0.0.1 -u root -N -e "SELECT CONCAT('MariaDB database ', schema_name) FROM information_schema.schemata WHERE schema_name LIKE 'ensemble\\_%'"
  mariadb -h 127.0.0.1 -u root -N -e "XA RECOVER" | awk '{ print "MariaDB prepared XA branch " $4 }'
}
before="$(leftovers | sort)"
[ -z "$before" ] || { echo "server-suites: on the servers before the suite started (not counted against it):" >&2; sed 's/^/  /' <<<"$before" >&2; }

cargo test --locked -p ensemble-server --test servers -- --ignored
# The 2PC baseline's seeded sweep of lost messages and restarted nodes, longer than the 30
# rounds the tests above ran (about two minutes; RESULTS.md, "A coordinator's wait for its
# votes, bounded", gives 10^4 rounds, its command and its verdict).
# A 2PC node process killed and started again over its database (`ensemble node --resume`).
cargo test --locked -p ensemble --test node_resume -- --ignored
echo "server-suites: 1000 rounds of lost messages and restarted 2PC nodes on each server" >&2
ENSEMBLE_2PC_LOSS_ROUNDS=1000 ENSEMBLE_2PC_LOSS_SEED=3 \
  cargo test --locked -p ensemble-server --test servers -- --ignored --exact \
  lost_messages_and_restarted_nodes_leave_no_branch_in_doubt_and_every_order_whole

for backend in postgres mariadb; do
  for app in shop micro tpcw rubis; do
    echo "server-suites: $app on $backend, simulated" >&2
    "$bin" bench "$app" --backend "$backend" --system ensemble,centralized,read-only \
      --clients 20 --warmup 1 --measure 3 --quiet --out "$out" | tail -n 7
    # In the LAN, 20 clients spread over the 3 instances keep globals queued at each while the
    # token goes round: the contention under which a global whose body aborts must still hold the
    # writer lock to COMMIT (a savepoint taken before the lock let a waiting global read the same
    # counters on MariaDB).
    # The two-phase-commit baseline runs as real processes only (see ARCHITECTURE.md).
    systems=ensemble,centralized,read-only,2pc
    echo "server-suites: $app on $backend, real processes ($systems)" >&2
    "$bin" bench "$app" --backend "$backend" --system "$systems" --real \
      --topology lan --clients 20 --warmup 1 --measure 3 --quiet --out "$out" >"$out/real.log"
    tail -n 9 "$out/real.log"
    # The nodes report what their storages' reads sent ahead became (shop's plans foresee its
    # reads: some must have answered).
    if [ "$backend-$app" = postgres-shop ] && ! grep -Eq "shop-ensemble-3-postgres-real: [1-9][0-9]* read\(s\) sent ahead" "$out/real.log"; then
      echo "server-suites: the nodes reported no read sent ahead on PostgreSQL:" >&2; cat "$out/real.log" >&2; exit 1
    fi
  done
done

# One instance on a thread of the bench's process, its clients reaching it through a channel
# (`--embedded`, ARCHITECTURE.md, "Processes, deployments, drivers"), then run on its loop's
# thread (`--clients-on-loop`), on each server.
for backend in postgres mariadb; do
  for where in "" --clients-on-loop; do
    echo "server-suites: tpcw on $backend, the instance embedded in the clients' process ${where}" >&2
    "$bin" bench tpcw --backend "$backend" --system centralized --real --embedded $where \
      --topology lan --clients 20 --warmup 1 --measure 3 --quiet --out "$out" | tail -n 5
  done
done

# The overhead figure, briefly, on each server: every path runs, the runs through the node are
# checked, and it prints what the server charges one session for a committed write (on
# PostgreSQL, its log's flush apart) and how many commits per operation waited for a flush on
# each path (RESULTS.md, "Middleware overhead on the servers").
for backend in postgres mariadb; do
  echo "server-suites: the overhead figure on $backend, each path 1 s" >&2
  fig="$("$bin" figure overhead --backend "$backend" --measure 1 --rounds 1 --out "$out" 2>&1)" || { echo "$fig" >&2; exit 1; }
  expected=("checks of the runs through the node: serializable" "a committed one-row UPDATE" "commits that waited for the server's log flush, per operation: directly")
  [ "$backend" = postgres ] && expected+=("with synchronous_commit off: the commit's flush about")
  for line in "${expected[@]}"; do
    grep -qF "$line" <<<"$fig" || { tail -n 30 <<<"$fig" >&2; echo "server-suites: the overhead figure on $backend printed no '$line'" >&2; exit 1; }
  done
  grep -F "commits that waited" -A1 <<<"$fig" >&2
done

# PostgreSQL with an instance's locals side by side under SSI, the checker's search ordering
# them (ARCHITECTURE.md, "Local writers side by side on PostgreSQL").
for app in shop micro tpcw rubis; do
  echo "server-suites: $app on postgres, real processes, locals side by side" >&2
  "$bin" bench "$app" --backend postgres --system ensemble,centralized --real --writers-side-by-side \
    --topology lan --clients 20 --warmup 1 --measure 3 --quiet --out "$out" | tail -n 8
done
# ... which MariaDB refuses, saying why.
if msg="$("$bin" bench shop --backend mariadb --real --writers-side-by-side --quiet --out "$out" 2>&1)"; then
  echo "server-suites: --writers-side-by-side on MariaDB did not fail" >&2; exit 1
fi
grep -q "is for real runs of the Conveyor Belt on PostgreSQL" <<<"$msg" || { echo "server-suites: unexpected message: $msg" >&2; exit 1; }

# A server that ends the node's sessions mid-run (every half second): shop on each server, on
# PostgreSQL also side by side, and under the 2PC baseline on both, each run checked, nothing
# lost, applied twice or refused.
scripts/sessions-ended.sh --bin "$bin"

# A 2PC node killed within a measured run and started again over its databases (two of them,
# one after the other): every application on each server, each run whole and checked
# (`ensemble bench` exits non-zero on a partial run or a failed check).
for backend in postgres mariadb; do
  for app in shop micro tpcw rubis; do
    echo "server-suites: $app on $backend, 2pc, hosts h1 and h2 killed and started again within the run" >&2
    "$bin" bench "$app" --backend "$backend" --system 2pc --real --topology lan --instances 3 --clients 9 \
      --warmup 0.5 --measure 3 --restart-node 1@1 --restart-node 2@2.5 --quiet --out "$out" 2>"$out/restart.log" | grep -F ": serializable:" \
      || { grep -v '^\[ensemble-net' "$out/restart.log" | tail -n 20 >&2; exit 1; }
    grep -c "restarted .* into the run" "$out/restart.log" | grep -qx 2 \
      || { echo "server-suites: $app on $backend: not both hosts were restarted" >&2; grep -v '^\[ensemble-net' "$out/restart.log" | tail -n 20 >&2; exit 1; }
  done
done

# 2pc over SQLite is refused before anything runs, saying why.
if msg="$("$bin" bench shop --system 2pc --real --quiet --out "$out" 2>&1)"; then
  echo "server-suites: 2pc on SQLite did not fail" >&2; exit 1
fi
grep -q "2pc runs on a server" <<<"$msg" || { echo "server-suites: unexpected message: $msg" >&2; exit 1; }

# Refused before anything runs: nothing listens on port 1.
if msg="$("$bin" bench shop --backend postgres --db-url postgres://postgres@127.0.0.1:1/test --quiet --out "$out" 2>&1)"; then
  echo "server-suites: a run against an unreachable server did not fail" >&2; exit 1
fi
grep -q "cannot reach the PostgreSQL server at postgres://127.0.0.1:1/test" <<<"$msg" \
  || { echo "server-suites: unexpected message: $msg" >&2; exit 1; }
# A PostgreSQL server without prepared transactions (a second cluster, as a fresh install has
# it) is refused by 2pc before anything runs, with the setting named, and nothing made on it.
noprep="$(scripts/postgres-without-prepared-transactions.sh)"
if msg="$("$bin" bench shop --system 2pc --real --backend postgres --db-url "$noprep" --quiet --out "$out" 2>&1)"; then
  echo "server-suites: 2pc on a server without prepared transactions did not fail" >&2; exit 1
fi
grep -q "has max_prepared_transactions = 0" <<<"$msg" || { echo "server-suites: unexpected message: $msg" >&2; exit 1; }
made="$(psql "$noprep" -Atc "SELECT count(*) FROM pg_database WHERE datname LIKE 'ensemble\_%'")"
[ "$made" = 0 ] || { echo "server-suites: the refused run made $made database(s)" >&2; exit 1; }
left="$(comm -13 <(echo "$before") <(leftovers | sort) | sed '/^$/d')"
if [ -n "$left" ]; then
  echo "server-suites: the suite's runs left behind on the servers:" >&2
  sed 's/^/  /' <<<"$left" >&2
  # What may be keeping them: transactions still open and sessions still on the run's databases.
  echo "server-suites: what the servers still run:" >&2
  mariadb -h 127.0.0.1 -u root -e "SELECT trx_id, trx_state, trx_started, trx_mysql_thread_id, trx_rows_locked, trx_query FROM information_schema.innodb_trx; SELECT id, db, command, time, state, info FROM information_schema.processlist WHERE db LIKE 'ensemble\\_%'" >&2 || true
  psql -h 127.0.0.1 -U postgres -d test -c "SELECT pid, datname, state, query FROM pg_stat_activity WHERE datname LIKE 'ensemble\_%'" >&2 || true
  exit 1
fi
echo "server-suites: all passed" >&2
