# Sourced by the scripts that run `ensemble figure overhead` under a changed server: an optional
# first argument names the ensemble binary (from the caller's directory); then the script moves
# to the repository, builds the release binary if none was named and it is missing, and starts
# the databases. Sets `bin`; the other arguments stay in "$@". `script` names the caller in
# errors.
bin=""
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
  # Named from the caller's directory, before the script moves to the repository's.
  bin=$(realpath "$1")
  shift
fi
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bin=${bin:-target/release/ensemble}
if [ ! -x "$bin" ]; then
  [ "$bin" = target/release/ensemble ] || { echo "$script: no executable at $bin" >&2; exit 2; }
  scripts/setup.sh
  cargo build --release --locked -p ensemble
fi
scripts/start-databases.sh >/dev/null

# Runs SQL on the local PostgreSQL's `test` database, one value per line.
pg() { psql -h 127.0.0.1 -U postgres -d test -v ON_ERROR_STOP=1 -Atqc "$1"; }

# Reloads PostgreSQL's configuration and waits until a new session sees setting $1 = $2 (a
# reload reaches the server's processes by a signal).
reload_until() {
  pg "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 1 100); do
    [ "$(pg "SHOW $1")" = "$2" ] && return 0
    sleep 0.1
  done
  echo "$script: the server did not take $1 = $2" >&2
  exit 1
}
