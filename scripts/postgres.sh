#!/usr/bin/env bash
# A throwaway PostgreSQL for tests and benchmarks (Debian's postgresql package).
#
#   scripts/postgres.sh start [PORT]   -> creates a temp data dir, starts postgres on 127.0.0.1,
#                                         creates user/db "airflow" and prints two lines:
#                                           PGDATA_DIR=/tmp/gpu-dag-pg.XXXX
#                                           DATABASE_URL=postgresql+psycopg2://airflow:airflow@127.0.0.1:PORT/airflow
#   scripts/postgres.sh stop DIR       -> stops that server (fast shutdown) and removes DIR.
#
# PORT defaults to a free port. Nothing is installed here: run scripts/ci_system_deps.sh (as root)
# first if the PostgreSQL server binaries are missing. When run as root the server runs as the
# `postgres` system user (PostgreSQL refuses to run as root). Logs: DIR/postgres.log.
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

find_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$dir" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return; fi
  if command -v pg_ctl >/dev/null; then dirname "$(command -v pg_ctl)"; return; fi
  die "PostgreSQL server binaries not found; install them with: sudo bash scripts/ci_system_deps.sh (apt-get install -y postgresql)"
}

as_owner() {
  # Run a command as the data dir's owner: the `postgres` user when we are root.
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  local port=${1:-} bin dir
  bin=$(find_bin)
  [ -n "$port" ] || port=$(free_port)
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    die "running as root but there is no 'postgres' user; install Debian's postgresql package"
  fi
  dir=$(mktemp -d /tmp/gpu-dag-pg.XXXXXX)
  chmod 0755 "$dir"
  mkdir "$dir/data"
  printf 'airflow\n' > "$dir/pwfile"
  if [ "$(id -u)" = 0 ]; then chown -R postgres:postgres "$dir"; fi
  as_owner "$bin/initdb" -D "$dir/data" -U airflow --pwfile="$dir/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; die "initdb failed (log above)"; }
  # Throwaway server: durability off (fast), enough connections for scheduler + api-server + workers.
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start -o \
    "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    >/dev/null || { cat "$dir/postgres.log" >&2; die "postgres did not start (log above)"; }
  as_owner "$bin/createdb" -h "$dir" -p "$port" -U airflow airflow \
    || { as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true; die "createdb failed"; }
  echo "PGDATA_DIR=$dir"
  echo "DATABASE_URL=postgresql+psycopg2://airflow:airflow@127.0.0.1:$port/airflow"
}

stop() {
  local dir=${1:-} bin
  [ -n "$dir" ] || die "usage: $0 stop DIR (the PGDATA_DIR printed by start)"
  case "$dir" in /tmp/gpu-dag-pg.*) ;; *) die "refusing to stop/remove $dir: not a directory made by '$0 start'";; esac
  [ -d "$dir" ] || return 0
  bin=$(find_bin)
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null \
      || as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: $0 start [PORT] | $0 stop DIR" >&2; exit 2 ;;
esac
