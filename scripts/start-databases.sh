#!/usr/bin/env bash
# Starts PostgreSQL (127.0.0.1:5432) and MariaDB (127.0.0.1:3306) if they are down, and waits until
# they accept connections. The suites that need the real servers run after this.
set -euo pipefail
up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() {
  for _ in $(seq 1 60); do up "$1" && return 0; sleep 1; done
  echo "start-databases: $2 did not come up on port $1" >&2
  return 1
}
if ! up 5432; then
  echo "start-databases: starting PostgreSQL" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
fi
if ! up 3306; then
  echo "start-databases: starting MariaDB" >&2
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --max_connections=2000 --back_log=1000
fi
wait_for 5432 PostgreSQL
wait_for 3306 MariaDB
# The two-phase-commit baseline (`--system 2pc`) gives every instance one storage connection per
# client and parks each prepared branch's connection until its decision: 13 instances with 40
# clients need over a thousand. MariaDB's default is 151.
#
# A burst of connections needs a listen queue to match: a node opens one per storage worker at
# start (40 per instance in Figure 5). MariaDB's `back_log` (80 when it starts with 151
# connections) can change only at a restart; with it too short, the kernel drops the excess
# handshakes and the clients wait for retransmissions, seconds each (seen: a 2pc node still
# connecting 10 s after its run ended). So MariaDB is restarted with both options when
# `back_log` is short.
my() { mariadb -h 127.0.0.1 -u root -N -e "$1"; }
MY_OPTIONS=(--max_connections=2000 --back_log=1000)
if [ "$(my 'SELECT @@back_log')" -lt 1000 ]; then
  echo "start-databases: restarting MariaDB with ${MY_OPTIONS[*]}" >&2
  mariadb-admin -h 127.0.0.1 -u root shutdown
  # The port closes before the process has exited; start-stop-daemon would then find it still
  # running and start nothing (seen on a fresh machine: MariaDB stayed down).
  for _ in $(seq 1 60); do up 3306 || pgrep -x mariadbd >/dev/null || break; sleep 1; done
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- "${MY_OPTIONS[@]}"
  wait_for 3306 MariaDB
  for _ in $(seq 1 60); do my 'SELECT 1' >/dev/null 2>&1 && break; sleep 1; done
fi
my "SET GLOBAL max_connections = GREATEST(@@max_connections, 2000)"
# PostgreSQL needs the same for 2pc, and prepared transactions, which it disables by default
# (max_prepared_transactions = 0): up to one prepared branch per client at each instance. Both
# settings take effect only at a restart, so the server is restarted when they are too low.
pg() { psql -h 127.0.0.1 -U postgres -d postgres -Atc "$1"; }
if [ "$(pg 'SHOW max_prepared_transactions')" -lt 1000 ] || [ "$(pg 'SHOW max_connections')" -lt 1000 ]; then
  echo "start-databases: setting PostgreSQL's max_prepared_transactions and max_connections to 1000 (restart)" >&2
  pg "ALTER SYSTEM SET max_prepared_transactions = 1000" >/dev/null
  pg "ALTER SYSTEM SET max_connections = 1000" >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main restart
  wait_for 5432 PostgreSQL
  for _ in $(seq 1 60); do pg 'SELECT 1' >/dev/null 2>&1 && break; sleep 1; done
fi
