#!/usr/bin/env bash
# Which InnoDB locks the transactions of a run on MariaDB wait for. It runs one `ensemble bench`
# command (its flags as given; `--backend mariadb` is the caller's to pass) and, while it runs,
# reads MariaDB's lock waits five times a second (`information_schema.innodb_lock_waits`, each
# joined with the lock it requests in `innodb_locks`), and prints how often each lock was seen
# waited for: by table, index, mode and what the lock covers, where the lock's data is named by
# kind: `supremum` (the end of the index: the gap above its largest key), `generated`
# (a row of the loaded data), `minted` (a row whose id a client minted, 2^23 and above, as
# RUBiS's clients do; in a secondary index, the row's id is the key's last column), or the value
# itself for other keys. A lock waited for across several
# reads is counted at each: the counts weigh the locks by how long they were waited for.
# The bench's own result line and verdict are printed after.
# Usage: scripts/lock-waits.sh ENSEMBLE_BINARY BENCH_ARGS...
#   e.g. scripts/lock-waits.sh target/release/ensemble rubis --system 2pc --real --backend mariadb
#        --instances 9 --topology lan --clients 40 --warmup 1 --measure 3
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/lock-waits.sh ENSEMBLE_BINARY BENCH_ARGS..." >&2; exit 2; }
bin=$1
shift
[ -x "$bin" ] || { echo "lock-waits: $bin is not an executable (cargo build --release -p ensemble)" >&2; exit 2; }
command -v mariadb > /dev/null || { echo "lock-waits: the mariadb client is not installed (scripts/setup.sh)" >&2; exit 2; }
work=$(mktemp -d /tmp/lock-waits.XXXXXX)
trap 'rm -rf "$work"' EXIT
sql() { mariadb -h 127.0.0.1 -uroot --batch --skip-column-names -e "$1"; }
sql "SELECT 1" > /dev/null || { echo "lock-waits: MariaDB does not answer at 127.0.0.1:3306 (scripts/start-databases.sh)" >&2; exit 1; }

# Only the run's own databases (`ensemble_...`); the lock's data is its key's columns, quoted.
query="SELECT l.lock_table, IFNULL(l.lock_index, '-'), l.lock_mode, IFNULL(l.lock_data, '(table)')
  FROM information_schema.innodb_lock_waits w
  JOIN information_schema.innodb_locks l ON l.lock_id = w.requested_lock_id
  WHERE l.lock_table LIKE '\`ensemble\\_%'"
# The query once before the run: a failing read during it would look like no waits.
sql "$query" > /dev/null || { echo "lock-waits: MariaDB did not answer the query of its lock waits" >&2; exit 1; }
"$bin" bench "$@" --out "$work/results" --quiet > "$work/bench.txt" 2>&1 &
bench=$!
reads=0
failed=0
while kill -0 "$bench" 2> /dev/null; do
  sql "$query" >> "$work/waits.tsv" 2> /dev/null || failed=$((failed + 1))
  reads=$((reads + 1))
  sleep 0.2
done
status=0
wait "$bench" || status=$?

echo "lock waits seen in $reads reads of innodb_lock_waits (one every 0.2 s; $failed of them failed) during: ensemble bench $*"
if [ ! -s "$work/waits.tsv" ]; then
  echo "  none"
else
  awk -F'\t' '
    {
      table = $1; sub(/^`[^`]*`\./, "", table); gsub(/`/, "", table)
      data = $4
      if (data == "supremum pseudo-record") kind = "supremum"
      else if (data == "(table)") kind = "(table)"
      else {
        # A secondary index'"'"'s key ends with the row'"'"'s primary key: the id that says whose row.
        k = split(data, key, ", ")
        id = (key[1] ~ /^[0-9]+$/) ? key[1] : key[k]
        if (id ~ /^[0-9]+$/) kind = (id + 0 >= 8388608) ? "minted" : "generated"
        else kind = data
      }
      n[table "\t" $2 "\t" $3 "\t" kind]++
      total++
    }
    END {
      printf "  %6s  %-24s  %-20s  %-10s  %s\n", "waits", "table", "index", "mode", "lock data"
      by_count = "sort -k1,1nr"
      for (k in n) { split(k, f, "\t"); printf "  %6d  %-24s  %-20s  %-10s  %s\n", n[k], f[1], f[2], f[3], f[4] | by_count }
      close(by_count)
      printf "  %6d  in all\n", total
    }' "$work/waits.tsv"
fi
echo
echo "the run's last lines:"
tail -n 4 "$work/bench.txt"
exit "$status"
