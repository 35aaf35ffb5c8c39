#!/usr/bin/env bash
# Where a node's CPU time goes: runs the configuration of the overhead figure's pooled row (shop,
# 50 % browse, one instance on PostgreSQL, four clients on loopback without emulated delay, locals
# side by side under SSI, the node's default pool; the clients and the locals' mode can be
# chosen), records the node process with `perf` (DWARF call graphs) for a few seconds in the
# middle of the clients' window, and prints:
#   1. the node's samples by thread: its loop (the main thread: protocol, every socket), its
#      storage workers (the server connections), its alarm;
#   2. for the loop, and then for the storage workers, the frames that hold most of their samples
#      (inclusive, in % of that thread group's samples), runtime plumbing left out.
# The run itself is checked as every real run is. Installs perf (linux-perf) if it is missing.
# Usage: scripts/profile-node.sh [ENSEMBLE_BINARY] [SECONDS] [CLIENTS] [LOCALS]
#   (defaults target/release/ensemble, 4, 4, side-by-side; LOCALS `default` runs the locals as
#   `ensemble bench` does by default, writers one at a time, the overhead figure's row "the
#   node's own pool of 2")
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/ensemble}
secs=${2:-4}
clients=${3:-4}
locals=${4:-side-by-side}
case "$locals" in
  side-by-side) side=(--writers-side-by-side) ;;
  default) side=() ;;
  *) echo "profile-node: LOCALS is side-by-side or default, not '$locals'" >&2; exit 2 ;;
esac
[[ "$secs" =~ ^[1-9][0-9]*$ && "$clients" =~ ^[1-9][0-9]*$ ]] || { echo "profile-node: SECONDS and CLIENTS are positive counts, not '$secs' and '$clients'" >&2; exit 2; }
script=profile-node
# shellcheck source=scripts/lib/perf-bench.sh
source scripts/lib/perf-bench.sh
warmup=2
measure=$((secs + 8))
"$bin" bench shop --real --backend postgres --system centralized --topology "$work/loopback.toml" --clients "$clients" \
  --browse-fraction 0.5 ${side[@]+"${side[@]}"} --warmup "$warmup" --measure "$measure" --out "$work/results" --quiet \
  > "$work/bench.txt" 2>&1 &
bench=$!
await_node_ready
# The node is the bench's only child; it is profiled once the clients have run a while.
node=$(pgrep -P "$bench" | head -1 || true)
[ -n "$node" ] || { echo "profile-node: the bench's node process was not found" >&2; exit 1; }
sleep $((warmup + 4))
perf record -F 499 --call-graph dwarf,16384 -o "$work/node.data" -p "$node" -- sleep "$secs" > "$work/perf.txt" 2>&1 \
  || { cat "$work/perf.txt" >&2; echo "profile-node: perf record failed" >&2; exit 1; }
wait "$bench" || { cat "$work/bench.txt" >&2; echo "profile-node: the run failed" >&2; exit 1; }
grep -E "^shop-centralized" "$work/bench.txt" || true
loop=$(basename "$bin" | cut -c1-15)
echo
echo "the node's samples by thread (perf record -F 499 for ${secs} s; $clients client(s), locals $locals):"
perf report -i "$work/node.data" --no-children --sort comm -g none --stdio 2>/dev/null | grep -E '^ +[0-9]'
plumbing='tokio::runtime|std::|core::|\(inlined\)|0xffffffff|<alloc::|__libc_start|_start$|clone3|start_thread|ensemble::main|ensemble::node::run|ensemble::systems::dispatch|WithHarness|run_host_on|ensemble_net::host::run::run$|catch_unwind|call_once|panicking'
for group in "$loop" "ensemble-storag"; do
  echo
  echo "inclusive share of ${group}'s samples (frames over 3 %):"
  perf report -i "$work/node.data" --children --comm "$group" --percentage relative --sort sym -g none --percent-limit 3 --stdio 2>/dev/null \
    | grep -E '^ +[0-9]' | grep -Ev "$plumbing" | head -30
done
