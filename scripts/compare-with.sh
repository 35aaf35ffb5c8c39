#!/usr/bin/env bash
# Compares this tree with an earlier revision, side by side in one run:
#  1. every quick simulated figure of RESULTS.md (and, with --long, the WAN-scaling sweeps), run
#     by both binaries with the same seed: the printed tables must be identical;
#  2. the simulator's criterion benchmark (crates/sim/benches/events.rs), old and new alternately,
#     so that both see the same machine load.
# Usage: scripts/compare-with.sh REV [--long]
# OLD_TREE=DIR reuses a checkout of REV (and its target directory) instead of making one.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/compare-with.sh REV [--long]}
long=${2:-}
work=$(mktemp -d)
scripts/setup.sh
if [ -n "${OLD_TREE:-}" ]; then
  [ "$(git -C "$OLD_TREE" rev-parse HEAD)" = "$(git rev-parse "$rev^{commit}")" ] || { echo "OLD_TREE is not at $rev" >&2; exit 2; }
  mkdir -p "$work" && ln -s "$(cd "$OLD_TREE" && pwd)" "$work/old"
  trap 'rm -rf "$work"' EXIT
else
  trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  git worktree add --detach "$work/old" "$rev" >/dev/null
fi
echo "building $rev and this tree (release)" >&2
(cd "$work/old" && cargo build --release --locked -p ensemble -q)
cargo build --release --locked -p ensemble -q
old="$work/old/target/release/ensemble"
new=target/release/ensemble
figures=("gyro-fig3" "table3" "table3 --app tpcw" "table3 --app rubis" "table3 --app tpcw --write-share 0.3"
         "table3 --app rubis --write-share 0.15" "gyro-fig4")
if [ "$long" = "--long" ]; then
  figures+=("wan-scaling --app tpcw" "wan-scaling --app rubis" "wan-scaling --app tpcw --write-share 0.3"
            "wan-scaling --app rubis --write-share 0.15" "gyro-fig4 --cores 16 --clients 25,100,400,800")
fi
same=0; differ=0
for args in "${figures[@]}"; do
  # shellcheck disable=SC2086
  "$old" figure $args --quiet --out "$work/old-results" 2>/dev/null | grep -v '^wrote' > "$work/old.txt"
  # shellcheck disable=SC2086
  "$new" figure $args --quiet --out "$work/new-results" 2>/dev/null | grep -v '^wrote' > "$work/new.txt"
  if diff -u "$work/old.txt" "$work/new.txt" > "$work/diff.txt"; then
    echo "figure $args: identical to $rev"; same=$((same + 1))
  else
    echo "figure $args: DIFFERS from $rev:"; cat "$work/diff.txt"; differ=$((differ + 1))
  fi
done
echo "figures: $same identical, $differ different"
for round in 1 2; do
  for side in old new; do
    dir=.; [ $side = old ] && dir="$work/old"
    line=$(cd "$dir" && cargo bench --locked -q -p ensemble-sim --bench events -- --sample-size 10 2>/dev/null | grep -E '^sim:|thrpt' | tr -s ' ' | tr '\n' ' ')
    echo "simulator benchmark, round $round, $side ($( [ $side = old ] && echo "$rev" || echo this tree )): $line"
  done
done
[ "$differ" -eq 0 ]
