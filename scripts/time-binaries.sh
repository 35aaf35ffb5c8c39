#!/usr/bin/env bash
# Times one ensemble command on two binaries, alternated (A, B, A, B, ...) so that a machine
# that drifts weighs on both alike, and prints each run's wall time and each binary's mean.
# Used to compare builds (RESULTS.md, "mimalloc"): copy each build's target/release/ensemble
# aside, then e.g.
#   scripts/time-binaries.sh /tmp/ens-before /tmp/ens-after 5 bench --quiet
#   scripts/time-binaries.sh /tmp/ens-before /tmp/ens-after 2 sweep --primitive g-dur --runs 150 --quiet
# A run that fails stops the script: a time is only worth printing for a run that did its work.
set -euo pipefail
script=time-binaries rest=ENSEMBLE_ARGS
# shellcheck source=scripts/lib/two-binaries.sh
source "$(dirname "$0")/lib/two-binaries.sh"
# Each run in a directory of its own: `ensemble bench` writes its results under the working
# directory, which must not be the repository's `results/`.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
declare -A total=([A]=0 [B]=0)
for ((i = 1; i <= pairs; i++)); do
  for side in A B; do
    bin=$a
    [ "$side" = B ] && bin=$b
    start=$(date +%s%N)
    if ! "$bin" "$@" > /dev/null 2> "$work/stderr"; then
      echo "time-binaries: $bin $* failed:" >&2
      tail -5 "$work/stderr" >&2
      exit 1
    fi
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    total[$side]=$(( total[$side] + ms ))
    printf '%s run %d: %d.%03d s\n' "$side" "$i" $((ms / 1000)) $((ms % 1000))
  done
done
for side in A B; do
  bin=$a
  [ "$side" = B ] && bin=$b
  mean=$(( total[$side] / pairs ))
  printf '%s (%s) mean over %d run(s): %d.%03d s\n' "$side" "$bin" "$pairs" $((mean / 1000)) $((mean % 1000))
done
