#!/usr/bin/env bash
# A server that ends the node's sessions mid-run, as a restart or an administrator would: every
# half second while the run's clients run, each session on the run's databases is ended. The
# storages reopen their connections and run again what was cut off; a COMMIT whose answer was
# lost is asked about (PostgreSQL: pg_xact_status, or for a local writer side by side the mark in
# its storage's own table; MariaDB: the storage's row of _ensemble_commits), so each run must
# pass its check, nothing lost or applied twice, with transactions run again and no request
# refused (ARCHITECTURE.md, "Victims"). The 2PC baseline too: a participant's branch that finds
# its session ended applies itself again on a new one, and a lost PREPARE is asked about, and a
# branch whose session was ended is decided, once the old session has left the server's list
# (crates/server/src/twopc.rs, `prepared_after_all`, `finish`); on MariaDB, once InnoDB too has
# let go of it (crates/server/src/admin.rs, `sessions_innodb_holds`; RESULTS.md, "A branch
# decided while its session was torn down").
#
# Each run is `ensemble bench shop --backend B --real --topology lan --clients 20 --warmup 1
# --measure 8` with the mode's system. It prints a line per run (sessions ended, transactions
# run again, or why it failed, with the run's output) and a tally; it exits non-zero if a run
# failed, did not run anything again, or refused a request. scripts/server-suites.sh runs it
# once per default mode; more runs (--runs N) are how RESULTS.md's counts by hand were made.
#
# Usage: scripts/sessions-ended.sh [--bin PATH] [--runs N] [MODE...]
#   MODE: postgres | mariadb | postgres-side-by-side | postgres-2pc | mariadb-2pc
#   (default: all five, in that order; with --runs N, the modes in turn, N passes)
# The servers must be up (scripts/start-databases.sh).
set -euo pipefail
bin=""
runs=1
modes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin|--runs) [ $# -ge 2 ] || { echo "sessions-ended: $1 wants a value" >&2; exit 2; } ;;&
    # A path relative to where the script was started from, not to the repository.
    --bin) bin="$(realpath -m -- "$2")"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    postgres|mariadb|postgres-side-by-side|postgres-2pc|mariadb-2pc) modes+=("$1"); shift ;;
    *) echo "sessions-ended: unknown argument '$1' (usage: scripts/sessions-ended.sh [--bin PATH] [--runs N] [postgres|mariadb|postgres-side-by-side|postgres-2pc|mariadb-2pc]...)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
bin="${bin:-target/release/ensemble}"
[ ${#modes[@]} -gt 0 ] || modes=(postgres mariadb postgres-side-by-side postgres-2pc mariadb-2pc)
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "sessions-ended: --runs wants a positive count, not '$runs'" >&2; exit 2; }
[ -x "$bin" ] || { echo "sessions-ended: $bin is not built (cargo build --release -p ensemble)" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# Prints how many sessions it ended.
end_sessions() {
  case "$1" in
    postgres) psql -h 127.0.0.1 -U postgres -d test -Atc "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname LIKE 'ensemble\_%' AND pid <> pg_backend_pid()" 2>/dev/null || echo 0 ;;
    mariadb)
      local n=0 id
      for id in $(mariadb -h 127.0.0.1 -u root -N -e "SELECT id FROM information_schema.processlist WHERE db LIKE 'ensemble\\_%' AND id <> CONNECTION_ID()" 2>/dev/null || true); do
        mariadb -h 127.0.0.1 -u root -e "KILL $id" 2>/dev/null && n=$((n + 1))
      done
      echo "$n" ;;
  esac
}

# One run of `mode`; prints its verdict line; returns non-zero if it failed.
run_once() {
  local mode="$1" pass="$2" backend="${1%%-*}" how log bench ended retries
  how=(--system ensemble)
  [ "$mode" = postgres-side-by-side ] && how=(--system ensemble --writers-side-by-side)
  [ "${mode#*-}" = 2pc ] && how=(--system 2pc --instances 3)
  log="$out/ended-$mode-$pass.log"
  echo "sessions-ended: shop on $mode (${how[*]}), real processes, the server ending the node's sessions every 0.5 s, run $pass" >&2
  # Made before the run starts, so that the wait below never reads a log not there yet.
  : >"$log"
  "$bin" bench shop --backend "$backend" --real --topology lan --clients 20 \
    --warmup 1 --measure 8 "${how[@]}" --quiet --out "$out" >"$log" 2>&1 &
  bench=$!
  # From when the clients start: a session ended while the databases are made fails the run
  # before it starts, as it should.
  while kill -0 "$bench" 2>/dev/null && ! grep -q "clients run for" "$log"; do sleep 0.1; done
  # Until the hosts report, which they do once the clients have stopped: what comes after (the
  # check's reads, dropping the databases) tries again after a lost session, but is not what
  # this measures.
  ended=0
  while kill -0 "$bench" 2>/dev/null && ! grep -q "^HostReport" "$log"; do
    ended=$((ended + $(end_sessions "$backend")))
    sleep 0.5
  done
  if ! wait "$bench"; then
    cat "$log" >&2
    echo "sessions-ended: $mode, run $pass: FAILED ($ended session(s) ended; its output above)" >&2
    return 1
  fi
  tail -n 4 "$log"
  if grep "request(s) refused" "$log" >&2; then
    echo "sessions-ended: $mode, run $pass: FAILED, requests refused" >&2
    return 1
  fi
  # The run drops its databases as it ends, trying again after a lost session; what it could
  # not drop it warns of, and would leave on the server.
  if grep "^warning:" "$log" >&2; then
    echo "sessions-ended: $mode, run $pass: FAILED, the run left something on the server" >&2
    return 1
  fi
  retries="$(sed -n "s/.* \([0-9][0-9]*\) transaction(s) run again after the $backend server.*/\1/p" "$log")"
  if ! { [ "$ended" -gt 0 ] && [ "${retries:-0}" -gt 0 ]; }; then
    cat "$log" >&2
    echo "sessions-ended: $mode, run $pass: FAILED, $ended session(s) ended, ${retries:-no} transaction(s) run again: the faults missed the run" >&2
    return 1
  fi
  echo "sessions-ended: $mode, run $pass: $ended session(s) ended mid-run, $retries transaction(s) run again, the run checked" >&2
}

failed=0 total=0
for pass in $(seq 1 "$runs"); do
  for mode in "${modes[@]}"; do
    total=$((total + 1))
    run_once "$mode" "$pass" || failed=$((failed + 1))
  done
done
echo "sessions-ended: $((total - failed)) of $total run(s) passed (modes: ${modes[*]}; $runs pass(es); $bin)" >&2
[ "$failed" = 0 ]
