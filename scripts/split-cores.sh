#!/usr/bin/env bash
# Runs one real `ensemble` command with the machine's cores split: the local database servers
# (PostgreSQL's processes, MariaDB's) on SERVER_CORES, the command with its clients and nodes
# on CLIENT_CORES (`--cpus`), as if the servers had a machine of their own, the way the
# papers deploy them (an application server with Ensemble in front of each DBMS). On two cores
# the defaults give each side one. The servers' CPU affinity is put back as it was when the
# script ends, however it ends. A server restarted meanwhile comes back unpinned.
#   scripts/split-cores.sh target/release/ensemble figure overhead --backend postgres --app tpcw \
#     --threads 4 --measure 15 --rounds 5 --out /tmp/overhead-split
# Not run by .ci/run: a measurement, which moves processes that other work on the machine uses.
set -euo pipefail
usage="usage: [SERVER_CORES=1] [CLIENT_CORES=0] scripts/split-cores.sh ENSEMBLE_BINARY ENSEMBLE_ARGS..."
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
bin=$1
shift
[ -x "$bin" ] || { echo "split-cores: $bin is not an executable (the ensemble binary, e.g. target/release/ensemble)" >&2; exit 2; }
command -v taskset > /dev/null || { echo "split-cores: taskset (util-linux) is not installed" >&2; exit 2; }
server_cores=${SERVER_CORES:-1}
client_cores=${CLIENT_CORES:-0}

# Every process of the local servers: PostgreSQL's postmaster and its children (a backend
# forked later inherits the postmaster's set), MariaDB's one process (a thread started later
# inherits its creator's).
servers=$( (pgrep -x postgres; pgrep -x mariadbd; pgrep -x mysqld) 2> /dev/null | sort -u || true)
[ -n "$servers" ] || { echo "split-cores: no PostgreSQL or MariaDB process is running (scripts/start-databases.sh starts them)" >&2; exit 2; }

declare -A before
for pid in $servers; do
  before[$pid]=$(taskset -cp "$pid" 2> /dev/null | sed 's/.*: //') || true
done
restore() {
  for pid in "${!before[@]}"; do
    [ -n "${before[$pid]}" ] && taskset -a -cp "${before[$pid]}" "$pid" > /dev/null 2>&1 || true
  done
}
trap restore EXIT
trap 'exit 130' INT TERM

for pid in $servers; do
  # A process that ended since the listing has nothing to pin.
  if ! err=$(taskset -a -cp "$server_cores" "$pid" 2>&1 > /dev/null) && [ -d "/proc/$pid" ]; then
    echo "split-cores: cannot pin server process $pid to core(s) $server_cores: $err" >&2
    exit 2
  fi
done
echo "split-cores: the database servers (processes $(echo $servers | tr '\n' ' ')) on core(s) $server_cores; the command, its clients and its nodes on core(s) $client_cores" >&2
"$bin" "$@" --cpus "$client_cores"
