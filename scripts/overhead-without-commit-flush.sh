#!/usr/bin/env bash
# The overhead figure on PostgreSQL with commits that do not wait for their WAL flush
# (synchronous_commit = off, set server-wide for the run and reset when the script ends): a
# diagnostic, not a configuration Ensemble runs or recommends (a crash of the server can lose the
# last commits a client was told of). Beside a run of the figure as it is, it tells how much of a
# path's added latency is a lock held across a commit's flush: the node's writer lock is held to
# COMMIT, which on PostgreSQL ends with the flush, where the direct path's writers flush side by
# side.
# Usage: scripts/overhead-without-commit-flush.sh [ENSEMBLE_BINARY] FIGURE_FLAGS...
#   e.g. scripts/overhead-without-commit-flush.sh --app tpcw --threads 4 --measure 15 --rounds 5 --out DIR
#   (the binary defaults to target/release/ensemble; --backend postgres is given here).
# Run nothing else against the server meanwhile: every session on it commits without waiting for
# its flush until the reset.
set -euo pipefail
bin=""
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
  # Named from the caller's directory, before the script moves to the repository's.
  bin=$(realpath "$1")
  shift
fi
cd "$(dirname "$0")/.."
bin=${bin:-target/release/ensemble}
if [ ! -x "$bin" ]; then
  [ "$bin" = target/release/ensemble ] || { echo "overhead-without-commit-flush: no executable at $bin" >&2; exit 2; }
  scripts/setup.sh
  cargo build --release --locked -p ensemble
fi
scripts/start-databases.sh >/dev/null
pg() { psql -h 127.0.0.1 -U postgres -d test -Atqc "$1"; }
reset() {
  pg "ALTER SYSTEM RESET synchronous_commit"
  pg "SELECT pg_reload_conf()" >/dev/null
  echo "overhead-without-commit-flush: synchronous_commit reset to the server's default ($(pg 'SHOW synchronous_commit'))" >&2
}
trap reset EXIT
pg "ALTER SYSTEM SET synchronous_commit = off"
pg "SELECT pg_reload_conf()" >/dev/null
# The reload reaches the server's processes by a signal: wait until a new session sees it.
for _ in $(seq 1 100); do
  [ "$(pg 'SHOW synchronous_commit')" = off ] && break
  sleep 0.1
done
[ "$(pg 'SHOW synchronous_commit')" = off ] || { echo "overhead-without-commit-flush: the server did not take synchronous_commit = off" >&2; exit 1; }
echo "overhead-without-commit-flush: PostgreSQL commits without waiting for their WAL flush (synchronous_commit = off) for this run"
"$bin" figure overhead --backend postgres "$@"
