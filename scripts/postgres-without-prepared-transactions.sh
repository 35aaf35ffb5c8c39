#!/usr/bin/env bash
# A second PostgreSQL server on 127.0.0.1:5433, as a fresh install leaves it:
# max_prepared_transactions = 0. The server suites check on it that the 2pc baseline refuses such
# a server before anything starts. Created (Debian's pg_createcluster, trust authentication, a
# few connections) and started when needed; prints its URL.
set -euo pipefail
port=5433
name=ensemble_noprep
version="$(ls /etc/postgresql | sort -V | tail -n 1)"
status() { pg_lsclusters -h | awk -v n="$name" '$2 == n { print $4 }'; }
if [ -z "$(status)" ]; then
  echo "postgres-without-prepared-transactions: creating cluster $version/$name on port $port" >&2
  pg_createcluster "$version" "$name" -p "$port" -o max_prepared_transactions=0 -o max_connections=20 -- --auth=trust >/dev/null
fi
if [ "$(status)" != online ]; then
  # Its messages (such as "Removed stale pid file." after a restart) go to stderr: this
  # script's stdout is the URL alone, which the server suites capture.
  pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start >&2
fi
for _ in $(seq 1 60); do
  psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atc 'SELECT 1' >/dev/null 2>&1 && break
  sleep 1
done
[ "$(psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atc 'SHOW max_prepared_transactions')" = 0 ] || {
  echo "postgres-without-prepared-transactions: the server on port $port has prepared transactions enabled" >&2
  exit 1
}
echo "postgres://postgres@127.0.0.1:$port/postgres"
