#!/usr/bin/env bash
# Entrypoint of the PostgreSQL stand-in (postgres.Dockerfile): initialises $PGDATA at the first start
# from POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, then runs the server as `postgres`.
set -euo pipefail
if [[ "${1:-}" != "postgres" ]]; then
  exec "$@"
fi
: "${POSTGRES_PASSWORD:?the PostgreSQL stand-in needs POSTGRES_PASSWORD}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-${user}}"
as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups)
mkdir -p "${PGDATA}" /run/postgresql
chown postgres:postgres "${PGDATA}" /run/postgresql
chmod 700 "${PGDATA}"
if [[ ! -s "${PGDATA}/PG_VERSION" ]]; then
  pwfile="$(mktemp)"
  printf '%s\n' "${POSTGRES_PASSWORD}" >"${pwfile}"
  chown postgres "${pwfile}"
  "${as_postgres[@]}" initdb --username="${user}" --pwfile="${pwfile}" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 -D "${PGDATA}"
  rm -f "${pwfile}"
  echo "host all all all scram-sha-256" >>"${PGDATA}/pg_hba.conf"
  echo "listen_addresses = '*'" >>"${PGDATA}/postgresql.conf"
  if [[ "${db}" != "postgres" ]]; then
    echo "CREATE DATABASE \"${db}\" OWNER \"${user}\";" \
      | "${as_postgres[@]}" postgres --single -D "${PGDATA}" -j postgres >/dev/null
  fi
fi
shift
exec "${as_postgres[@]}" postgres -D "${PGDATA}" "$@"
