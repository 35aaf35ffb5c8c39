#!/usr/bin/env bash
# A probe of MariaDB (crates/server/tests/xa_commit_window.rs): a branch is prepared, its
# session closed, and XA COMMIT sent from another session as soon as the server takes it, then
# the row read back; per wait (none, the session gone from the process list, and from InnoDB
# too), how many commits were answered OK and committed nothing. Such a branch stays prepared
# in InnoDB, in no list, holding its locks until a restart: so after each wait's probe MariaDB
# is restarted (scripts/start-databases.sh), what it then lists of the probe rolled back, and the
# probe's database dropped. Not part of any suite; RESULTS.md, "A branch decided while its
# session was torn down", quotes it.
#
# Usage: scripts/xa-commit-window.sh [--branches N] [none|list|innodb]...   (default: all three, 1000)
set -euo pipefail
branches=1000
waits=()
while [ $# -gt 0 ]; do
  case "$1" in
    --branches) [ $# -ge 2 ] || { echo "xa-commit-window: --branches wants a count" >&2; exit 2; }; branches="$2"; shift 2 ;;
    none|list|innodb) waits+=("$1"); shift ;;
    *) echo "xa-commit-window: unknown argument '$1' (usage: scripts/xa-commit-window.sh [--branches N] [none|list|innodb]...)" >&2; exit 2 ;;
  esac
done
[[ "$branches" =~ ^[1-9][0-9]*$ ]] || { echo "xa-commit-window: --branches wants a positive count, not '$branches'" >&2; exit 2; }
[ ${#waits[@]} -gt 0 ] || waits=(none list innodb)
cd "$(dirname "$0")/.."
my() { mariadb -h 127.0.0.1 -u root -N -e "$1"; }
for wait in "${waits[@]}"; do
  line="$(XA_PROBE_WAIT="$wait" XA_PROBE_BRANCHES="$branches" cargo test --locked -q -p ensemble-server --test xa_commit_window -- --ignored --nocapture 2>&1 | grep '^xa-commit-window:')" \
    || { echo "xa-commit-window: the probe failed (cargo test -p ensemble-server --test xa_commit_window -- --ignored --nocapture)" >&2; exit 1; }
  echo "$line"
  db="${line##* database }"
  run="${db#ensemble_}"
  run="${run%_0}"
  # Only a restart lets go of a branch InnoDB holds in no list; then XA RECOVER lists it.
  mariadb-admin -h 127.0.0.1 -u root shutdown
  # The port closes before the process has exited, and a server still running is not started.
  for _ in $(seq 1 60); do pgrep -x mariadbd >/dev/null || break; sleep 1; done
  scripts/start-databases.sh
  left=0
  for xid in $(my "XA RECOVER" | awk '{ print $4 }' | grep "^${run}-" || true); do
    my "XA ROLLBACK '$xid'"
    left=$((left + 1))
  done
  echo "xa-commit-window: wait $wait: after the restart, XA RECOVER listed $left branch(es) of the probe, rolled back"
  my "DROP DATABASE \`$db\`"
done
