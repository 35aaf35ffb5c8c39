#!/usr/bin/env bash
# Which locks the transactions of a run on PostgreSQL gave up waiting for. It runs one `ensemble
# bench` command (its flags as given; `--backend postgres` is the caller's to pass), then reads
# what the server logged meanwhile about the run's databases (`ensemble_...`): every statement
# canceled on its lock timeout (SQLSTATE 55P03; the 2PC baseline's participant branches wait
# 1 ms, its other statements 1 s: ARCHITECTURE.md, "Strict two-phase locking on PostgreSQL") or
# chosen as a deadlock's victim, counted by what it waited for and by statement:
#   key lock, shared | exclusive  a key lock (`dialect::KeyLock`): an advisory lock, shared when a
#                                 read takes it, exclusive when an INSERT (or a writer) does
#   row of T (updating | ...)     a row of table T, as the server's CONTEXT line names it
#   table T                       table T whole (`LOCK TABLE`)
#   a table it names              a lock on a whole table the statement names (any other
#                                 statement the server canceled with no CONTEXT: it waited to
#                                 open the table, behind a `LOCK TABLE` another transaction holds)
# MariaDB's counterpart, which samples InnoDB's lock waits instead, is scripts/lock-waits.sh.
# The bench's own result lines are printed after.
# Usage: scripts/pg-lock-waits.sh ENSEMBLE_BINARY BENCH_ARGS...
#   e.g. scripts/pg-lock-waits.sh target/release/ensemble shop --system 2pc --real --backend postgres
#        --instances 3 --topology lan --clients 20 --warmup 1 --measure 8
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/pg-lock-waits.sh ENSEMBLE_BINARY BENCH_ARGS..." >&2; exit 2; }
bin=$1
shift
[ -x "$bin" ] || { echo "pg-lock-waits: $bin is not an executable (cargo build --release -p ensemble)" >&2; exit 2; }
command -v pg_lsclusters > /dev/null || { echo "pg-lock-waits: pg_lsclusters is not installed (Debian's postgresql-common; scripts/setup.sh)" >&2; exit 2; }
# The server log of the cluster on port 5432 (Debian: the last column of pg_lsclusters).
log=$(pg_lsclusters --no-header | awk '$3 == 5432 { print $NF }' | head -1)
[ -n "$log" ] && [ -r "$log" ] || { echo "pg-lock-waits: cannot read the log of the PostgreSQL cluster on port 5432 ('$log'; pg_lsclusters)" >&2; exit 1; }
psql -h 127.0.0.1 -U postgres -d test -Atc "SELECT 1" > /dev/null || { echo "pg-lock-waits: PostgreSQL does not answer at 127.0.0.1:5432 (scripts/start-databases.sh)" >&2; exit 1; }
[ "$(psql -h 127.0.0.1 -U postgres -d test -Atc "SHOW log_min_error_statement")" != panic ] || { echo "pg-lock-waits: the server does not log failing statements (log_min_error_statement = panic)" >&2; exit 1; }
work=$(mktemp -d /tmp/pg-lock-waits.XXXXXX)
trap 'rm -rf "$work"' EXIT

from=$(( $(stat -c %s "$log") + 1 ))
set +e
"$bin" bench "$@" > "$work/bench" 2>&1
status=$?
set -e
tail -c +"$from" "$log" > "$work/log"

# A failed statement's report is its ERROR line, then the same backend's CONTEXT and STATEMENT
# lines (other backends' lines may come between): the STATEMENT line closes it.
awk '
  function pid_of(line) { match(line, /\[[0-9]+\]/); return substr(line, RSTART + 1, RLENGTH - 2) }
  function after(line, tag) { return substr(line, index(line, tag) + length(tag)) }
  / postgres@ensemble_[^ ]* (ERROR|FATAL):  / {
    p = pid_of($0)
    delete why[p]; delete context[p]
    if (index($0, "canceling statement due to lock timeout")) why[p] = "lock timeout"
    else if (index($0, "deadlock detected")) why[p] = "deadlock"
    next
  }
  / postgres@ensemble_[^ ]* CONTEXT:  / { p = pid_of($0); if (p in why) context[p] = after($0, "CONTEXT:  "); next }
  / postgres@ensemble_[^ ]* STATEMENT:  / {
    p = pid_of($0)
    if (!(p in why)) next
    stmt = after($0, "STATEMENT:  ")
    if (match(context[p], /while [a-z ]+ tuple \([0-9]+,[0-9]+\) in relation "[^"]+"/)) {
      c = substr(context[p], RSTART, RLENGTH)
      verb = c; sub(/^while /, "", verb); sub(/ tuple.*/, "", verb)
      rel = c; sub(/.*in relation "/, "", rel); sub(/"$/, "", rel)
      kind = "row of " rel " (" verb ")"
    } else if (index(stmt, "pg_advisory_xact_lock_shared(")) kind = "key lock, shared"
    else if (index(stmt, "pg_advisory_xact_lock(")) kind = "key lock, exclusive"
    else if (stmt ~ /^LOCK TABLE /) { t = stmt; sub(/^LOCK TABLE /, "", t); sub(/ IN .*/, "", t); kind = "table " t }
    # Row and key waits name themselves; anything else a statement waits for is a table lock.
    else kind = "a table it names"
    # The statement without its values, cut short: key lock statements differ only in how many.
    shown = stmt; gsub(/\$[0-9]+/, "$", shown); gsub(/pg_advisory_xact_lock(_shared)?\(\$\)(, pg_advisory_xact_lock(_shared)?\(\$\))*/, "pg_advisory_xact_lock...", shown)
    if (length(shown) > 90) shown = substr(shown, 1, 87) "..."
    count[why[p] "\t" kind "\t" shown]++
    total[why[p]]++
    delete why[p]; delete context[p]
  }
  END {
    printf "pg-lock-waits: %d statement(s) canceled on their lock timeout, %d chosen as deadlock victims, in the run'"'"'s databases\n", total["lock timeout"], total["deadlock"]
    if (length(count) == 0) exit
    printf "%7s  %-12s  %-34s  %s\n", "count", "ended by", "waiting for", "statement"
    n = 0
    for (k in count) { keys[++n] = k }
    # Largest first (insertion sort: a few dozen keys).
    for (i = 2; i <= n; i++) { k = keys[i]; j = i - 1; while (j > 0 && count[keys[j]] < count[k]) { keys[j + 1] = keys[j]; j-- } keys[j + 1] = k }
    for (i = 1; i <= n; i++) { split(keys[i], f, "\t"); printf "%7d  %-12s  %-34s  %s\n", count[keys[i]], f[1], f[2], f[3] }
  }
' "$work/log"
echo
# Each host's counters (a 2PC node's distributed commits and attempts voted down among them),
# then the run's result lines.
sed -nE '/^HostReport/{s/^HostReport \{ host: HostId\(([0-9]+)\).*counters: \[([^]]*)\].*/host \1: \2/; s/\("([a-z_]+)", ([0-9]+)\)/\1 \2/g; p}' "$work/bench"
grep -E "serializable|^[a-z]+-[a-z0-9-]+ +[a-z0-9-]+ +[0-9]+ |not checked|partial|FAILED|rror" "$work/bench" | grep -v "^HostReport" || true
[ "$status" -eq 0 ] || { echo "pg-lock-waits: the bench exited with status $status; its output:" >&2; cat "$work/bench" >&2; exit "$status"; }
