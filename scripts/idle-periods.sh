#!/usr/bin/env bash
# What the machine waits for while a node serves four clients on PostgreSQL: the overhead
# figure's CPU table shows the node's paths leaving the cores idle more than the direct path
# does, and this says which threads end those idle periods. It runs `ensemble bench` through one
# node (an application on PostgreSQL, the clients on loopback without emulated delay, checked as
# every real run is), records the scheduler (`perf sched record -a`) for a few seconds in the
# middle of the clients' window, and prints:
#   1. the CPU time each kind of thread ran in the window (by its name: the server's backends
#      `postgres`, the node's storage workers `ensemble-storag`, the client driver's and the
#      node's loops `ensemble` (the loop `ensemble-host` when embedded), and the idle task);
#   2. every period a core spent idle, by the thread that ran on that core right after it: how
#      many, their total and their mean. A server backend there was woken by a statement or by
#      its log flush; a storage worker, by a statement's answer; a loop, by a request or a reply.
#   3. the idle time per operation, at the run's mean throughput.
# Installs perf (linux-perf) if it is missing.
# Usage: scripts/idle-periods.sh [ENSEMBLE_BINARY] [SECONDS] [APP] [BENCH_FLAGS...]
#   (defaults target/release/ensemble, 2, tpcw; the flags go to `ensemble bench` after
#   `--clients 4`, e.g. `--storage-workers 3` or `--embedded --clients-on-loop`)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/ensemble}
secs=${2:-2}
app=${3:-tpcw}
shift $(( $# < 3 ? $# : 3 ))
[[ "$secs" =~ ^[1-9][0-9]*$ ]] || { echo "idle-periods: SECONDS is a positive count, not '$secs'" >&2; exit 2; }
script=idle-periods
# shellcheck source=scripts/lib/perf-bench.sh
source scripts/lib/perf-bench.sh
warmup=2
measure=$((secs + 8))
"$bin" bench "$app" --real --backend postgres --system centralized --topology "$work/loopback.toml" --clients 4 "$@" \
  --warmup "$warmup" --measure "$measure" --out "$work/results" --quiet > "$work/bench.txt" 2>&1 &
bench=$!
await_node_ready
sleep $((warmup + 3))
perf sched record -a -o "$work/sched.data" -- sleep "$secs" > "$work/perf.txt" 2>&1 \
  || { cat "$work/perf.txt" >&2; echo "idle-periods: perf sched record failed" >&2; exit 1; }
wait "$bench" || { cat "$work/bench.txt" >&2; echo "idle-periods: the run failed" >&2; exit 1; }
row=$(grep -E "^$app-centralized-1-postgres-[a-z-]+ +centralized " "$work/bench.txt" | tail -1 || true)
[ -n "$row" ] || { cat "$work/bench.txt" >&2; echo "idle-periods: no result row in the run's output" >&2; exit 1; }
echo "$row"
grep -E "^$app-centralized-1-postgres-[a-z-]+: serializable" "$work/bench.txt" | cut -c1-160 || true
ops=$(awk '{print $5}' <<<"$row")
perf sched timehist -i "$work/sched.data" 2>/dev/null > "$work/timehist.txt"
python3 - "$work/timehist.txt" "$ops" "$secs" <<'EOF'
import collections, re, sys
path, ops_per_s, secs = sys.argv[1], float(sys.argv[2]), sys.argv[3]
# A line of `perf sched timehist`: the instant a task was switched out, its core, its name and
# ids, then its wait, scheduling delay and run time in ms.
line = re.compile(r'\s*([\d.]+)\s+\[(\d+)\]\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$')
ran = collections.Counter()
after_idle, periods = collections.Counter(), collections.Counter()
pending = {}
first = last = None
for text in open(path):
    m = line.match(text)
    if not m:
        continue
    t, core, task, _wait, _delay, run = m.groups()
    t, run = float(t), float(run)
    first = t if first is None else first
    last = t
    name = re.sub(r'\[.*', '', task).strip()
    ran[name] += run
    if name == '<idle>':
        pending[core] = run
    elif core in pending:
        after_idle[name] += pending.pop(core)
        periods[name] += 1
window = (last - first) if first is not None else 0.0
idle = ran['<idle>']
print(f"\nperf sched record -a for {secs} s: {window:.3f} s of scheduler events on every core")
print("\nCPU time in the window by thread name, ms:")
for name, ms in ran.most_common(8):
    print(f"  {name:<20} {ms:9.1f}")
print("\nidle periods by the thread that ran next on that core:")
print(f"  {'thread':<20} {'periods':>8} {'idle ms':>9} {'mean us':>8}")
for name, ms in after_idle.most_common(6):
    print(f"  {name:<20} {periods[name]:>8} {ms:>9.1f} {ms / periods[name] * 1000:>8.0f}")
if ops_per_s > 0 and window > 0:
    print(f"\nidle per operation, at the run's mean {ops_per_s:.1f} operations/s: {idle * 1000 / (ops_per_s * window):.0f} us")
EOF
