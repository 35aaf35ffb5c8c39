# Sourced by the scripts that run one ensemble command on two binaries alternated
# (time-binaries.sh, verdicts-of-binaries.sh), once they have set `script` (their name, for
# errors) and `rest` (what the arguments after PAIRS are, for the usage line: ENSEMBLE_ARGS or
# BENCH_ARGS): checks and takes the arguments BINARY_A BINARY_B PAIRS, setting `a` and `b`
# (absolute paths) and `pairs`; the command's arguments stay in "$@".
[ $# -ge 4 ] || { echo "usage: scripts/$script.sh BINARY_A BINARY_B PAIRS $rest..." >&2; exit 2; }
a=$1 b=$2 pairs=$3
shift 3
for bin in "$a" "$b"; do
  [ -x "$bin" ] || { echo "$script: $bin is not an executable" >&2; exit 2; }
done
[[ "$pairs" =~ ^[1-9][0-9]*$ ]] || { echo "$script: PAIRS is a positive count, not '$pairs'" >&2; exit 2; }
a=$(realpath "$a") b=$(realpath "$b")
