#!/bin/sh
# First start: initdb with POSTGRES_USER/POSTGRES_PASSWORD as superuser, create POSTGRES_DB, listen
# on every address, password (scram) logins from the network. Then run the server as `postgres`.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
as_postgres() { setpriv --reuid postgres --regid postgres --init-groups "$@"; }
[ "${1:-}" = postgres ] && shift
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  printf 'host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    echo "CREATE DATABASE \"$POSTGRES_DB\"" | as_postgres postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec setpriv --reuid postgres --regid postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*' "$@"
