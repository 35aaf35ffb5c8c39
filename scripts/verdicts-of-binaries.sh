#!/usr/bin/env bash
# Runs one `ensemble bench` command on two binaries, alternated (A, B, A, B, ...) so that a
# machine that drifts weighs on both alike, and prints each run's verdict (checked and passed,
# check failed, or partial and why), its throughput and its storage retries, then a tally per
# binary. For a change meant to make some runs end well that did not always (RESULTS.md, "A
# longer back-off for the 2PC baseline's victims"): copy each build's target/release/ensemble
# aside, then e.g.
#   scripts/verdicts-of-binaries.sh /tmp/ens-before /tmp/ens-after 5 rubis --system 2pc --real \
#     --backend mariadb --instances 9 --topology lan --clients 40 --warmup 1 --measure 3
# Unlike scripts/time-binaries.sh it goes on after a run that fails: such runs are what it counts.
set -euo pipefail
script=verdicts-of-binaries rest=BENCH_ARGS
# shellcheck source=scripts/lib/two-binaries.sh
source "$(dirname "$0")/lib/two-binaries.sh"
command -v python3 > /dev/null || { echo "verdicts-of-binaries: python3 reads the runs' result files and is not installed" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "A = $a"
echo "B = $b"
echo "command: ensemble bench $* --quiet"
for ((i = 1; i <= pairs; i++)); do
  for side in A B; do
    bin=$a
    [ "$side" = B ] && bin=$b
    out="$work/$side-$i"
    mkdir -p "$out"
    start=$(date +%s%N)
    status=0
    "$bin" bench "$@" --quiet --out "$out" > "$out/stdout" 2> "$out/stderr" || status=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    # One result file per run (a command of one experiment); none if the run never started.
    python3 - "$side" "$i" "$ms" "$status" "$out" <<'EOF'
import glob, json, sys
side, i, ms, status, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
files = sorted(glob.glob(f"{out}/*.json"))
if not files:
    err = open(f"{out}/stderr").read().strip().splitlines()
    verdict, tput, retries = "no result: " + (err[-1] if err else f"exit status {status}"), None, None
else:
    r = json.load(open(files[-1]))
    if r.get("partial"):
        verdict = "partial: " + r["partial"]
    elif r.get("check_passed") is True:
        verdict = "passed its check"
    elif r.get("check_passed") is False:
        verdict = "FAILED its check"
    else:
        verdict = "not checked"
    tput = r["summary"]["throughput"]
    retries = sum(v for p in r.get("processes", []) for k, v in p["counters"] if k == "storage_retries")
if len(verdict) > 160:
    verdict = verdict[:160] + " ..."
print(f"{side} run {i}: {ms / 1000:.1f} s, exit status {status}, "
      + (f"{tput:.1f} ops/s, {retries} storage retries, " if tput is not None else "")
      + verdict, flush=True)
with open(f"{out}/../tally", "a") as t:
    kind = "passed" if verdict == "passed its check" else verdict.split(":")[0].split(" ")[0].lower()
    t.write(f"{side}\t{kind}\t{tput if tput is not None else ''}\t{retries if retries is not None else ''}\n")
EOF
  done
done
python3 - "$work/tally" <<'EOF'
import sys
from collections import Counter
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
for side in "AB":
    mine = [r for r in rows if r[0] == side]
    kinds = Counter(r[1] for r in mine)
    passed = [r for r in mine if r[1] == "passed"]
    mean = sum(float(r[2]) for r in passed) / len(passed) if passed else float("nan")
    retries = sum(int(r[3]) for r in mine if r[3])
    print(f"{side}: {len(mine)} run(s): " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
          + f"; mean throughput of the passed {mean:.1f} ops/s; {retries} storage retries in all")
EOF
