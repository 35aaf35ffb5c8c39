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
script=overhead-without-commit-flush
# shellcheck source=scripts/lib/figure-binary.sh
source "$(dirname "$0")/lib/figure-binary.sh"
reset() {
  pg "ALTER SYSTEM RESET synchronous_commit"
  pg "SELECT pg_reload_conf()" >/dev/null
  echo "overhead-without-commit-flush: synchronous_commit reset to the server's default ($(pg 'SHOW synchronous_commit'))" >&2
}
trap reset EXIT
pg "ALTER SYSTEM SET synchronous_commit = off"
reload_until synchronous_commit off
echo "overhead-without-commit-flush: PostgreSQL commits without waiting for their WAL flush (synchronous_commit = off) for this run"
"$bin" figure overhead --backend postgres "$@"
