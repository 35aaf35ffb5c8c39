#!/usr/bin/env bash
# Where PostgreSQL spends its time in each path of the overhead figure, statement by statement:
# runs `ensemble figure overhead --backend postgres FIGURE_FLAGS...` with the pg_stat_statements
# extension loaded (shared_preload_libraries, which takes a restart of the server, before the run
# and again after it to take the extension out), then prints, for each path (each of the
# figure's runs has databases of its own, named after the path), the server's execution time per
# committed transaction and the statements that took it. A diagnostic: the extension's own
# bookkeeping costs every statement a little, alike on every path.
#
# What it counts is execution (and planning) inside the server: CPU, but also waiting for a lock
# (LOCK TABLE, a row). It does not count what a statement costs outside the executor: the
# protocol's messages, parsing a simple query's text, and the commit itself (a COMMIT statement
# only ends the transaction block; the commit record and its WAL flush come after it, so the
# `of_it_commit_us` column stays near zero).
# Usage: scripts/overhead-server-statements.sh [ENSEMBLE_BINARY] FIGURE_FLAGS...
#   e.g. scripts/overhead-server-statements.sh --app tpcw --threads 4 --measure 10 --rounds 2 --out DIR
#   (the binary defaults to target/release/ensemble).
# Run nothing else against the server meanwhile.
set -euo pipefail
script=overhead-server-statements
# shellcheck source=scripts/lib/figure-binary.sh
source "$(dirname "$0")/lib/figure-binary.sh"
restart() {
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main restart
  for _ in $(seq 1 100); do
    pg "SELECT 1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "overhead-server-statements: PostgreSQL did not come back after its restart" >&2
  return 1
}
work=$(mktemp -d)
watcher=""
reset() {
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null || true
  pg "DROP EXTENSION IF EXISTS pg_stat_statements" >/dev/null 2>&1 || true
  # The extension's settings are known to the server only while it is loaded.
  pg "ALTER SYSTEM RESET pg_stat_statements.track" >/dev/null 2>&1 || true
  pg "ALTER SYSTEM RESET pg_stat_statements.track_planning" >/dev/null 2>&1 || true
  pg "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null
  restart
  echo "overhead-server-statements: pg_stat_statements taken out again (shared_preload_libraries = '$(pg 'SHOW shared_preload_libraries')')" >&2
  rm -rf "$work"
}
trap reset EXIT
pg "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null
restart
# Statements inside functions and prepared statements' EXECUTE are counted as what they run.
pg "ALTER SYSTEM SET pg_stat_statements.track = 'all'" >/dev/null
pg "ALTER SYSTEM SET pg_stat_statements.track_planning = on" >/dev/null
reload_until pg_stat_statements.track all
pg "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
pg "SELECT pg_stat_statements_reset()" >/dev/null
# Each run's databases are dropped when it ends, and pg_stat_statements knows them by oid
# only: note every database's oid and name while the figure runs.
(
  while true; do
    pg "SELECT oid, datname FROM pg_database WHERE datname LIKE 'ensemble\_%'" >>"$work/dbs" 2>/dev/null || true
    sleep 0.5
  done
) &
watcher=$!
"$bin" figure overhead --backend postgres "$@"
kill "$watcher" 2>/dev/null || true
watcher=""
sort -u "$work/dbs" | grep '|' >"$work/dbs.sorted" || true
psql -h 127.0.0.1 -U postgres -d test -v ON_ERROR_STOP=1 -q <<SQL
CREATE TEMP TABLE dbs (oid oid, datname text);
\copy dbs FROM '$work/dbs.sorted' WITH (FORMAT text, DELIMITER '|')
-- The path is the database name's label: the run tag is the label (28 characters at most),
-- the process, a hex stamp, and the instance.
CREATE TEMP VIEW per_path AS
  SELECT regexp_replace(regexp_replace(d.datname, '^ensemble_', ''), '_[0-9]+_[0-9a-f]+_[0-9]+\$', '') AS path, s.*
  FROM pg_stat_statements s JOIN dbs d ON d.oid = s.dbid;
\echo
\echo 'PostgreSQL per path of the figure (pg_stat_statements): committed transactions (COMMIT, COMMIT PREPARED), the server''s execution and planning time per one of them, in microseconds'
SELECT path,
       sum(calls) FILTER (WHERE query ~* '^\s*commit') AS commits,
       round((sum(total_exec_time + total_plan_time) * 1000 / nullif(sum(calls) FILTER (WHERE query ~* '^\s*commit'), 0))::numeric, 1) AS us_per_commit,
       round((sum(total_exec_time + total_plan_time) FILTER (WHERE query ~* '^\s*commit') * 1000 / nullif(sum(calls) FILTER (WHERE query ~* '^\s*commit'), 0))::numeric, 1) AS of_it_commit_us,
       round((sum(calls)::numeric / nullif(sum(calls) FILTER (WHERE query ~* '^\s*commit'), 0)), 2) AS statements_per_commit
  FROM per_path GROUP BY path ORDER BY path;
\echo
\echo 'the statements that took the most of each path''s time, per committed transaction (calls, microseconds)'
SELECT path, calls_per_commit, us_per_commit, statement FROM (
  SELECT p.path,
         round(sum(p.calls)::numeric / c.commits, 3) AS calls_per_commit,
         round((sum(p.total_exec_time + p.total_plan_time) * 1000 / c.commits)::numeric, 1) AS us_per_commit,
         left(regexp_replace(p.query, '\s+', ' ', 'g'), 90) AS statement,
         row_number() OVER (PARTITION BY p.path ORDER BY sum(p.total_exec_time + p.total_plan_time) DESC) AS rank
    FROM per_path p
    JOIN (SELECT path, sum(calls) FILTER (WHERE query ~* '^\s*commit') AS commits FROM per_path GROUP BY path) c USING (path)
   WHERE c.commits > 0
   GROUP BY p.path, c.commits, p.query
) ranked WHERE rank <= 8 ORDER BY path, rank;
SQL
