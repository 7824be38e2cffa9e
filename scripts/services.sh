# Throw-away PostgreSQL (and RabbitMQ) servers for the test suite, on free ports under one temp dir.
# Source this file, then call start_postgres / start_rabbitmq; everything stops on exit.
# Installs the Debian packages first when they are missing and we are root.

BATON_SERVICES_DIR=${BATON_SERVICES_DIR:-$(mktemp -d /tmp/baton-services.XXXXXX)}
chmod 755 "$BATON_SERVICES_DIR"
_baton_cleanups=()

_baton_cleanup() {
  local i
  for ((i=${#_baton_cleanups[@]}-1; i>=0; i--)); do eval "${_baton_cleanups[$i]}" || true; done
}
trap _baton_cleanup EXIT

_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

_apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "missing $*; install it (Debian: apt-get install $*)" >&2
    return 1
  fi
  if [ -z "${_baton_apt_updated:-}" ]; then
    apt-get update -qq
    _baton_apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

_pg_bin() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$found" ] && echo "$found"
}

_as_db_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_postgres() {
  if [ -n "${BATON_TEST_POSTGRES_URL:-}" ]; then return 0; fi
  local bin
  bin=$(_pg_bin) || true
  if [ -z "$bin" ]; then _apt_install postgresql; bin=$(_pg_bin); fi
  local dir="$BATON_SERVICES_DIR/pg" port
  port=$(_free_port)
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  _as_db_user "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$BATON_SERVICES_DIR/initdb.log"
  _as_db_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" start >/dev/null
  _baton_cleanups+=("_as_db_user '$bin/pg_ctl' -D '$dir/data' -m immediate stop >/dev/null 2>&1")
  "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres baton_test
  export BATON_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$port/baton_test"
  export BATON_TEST_PG_BIN="$bin" BATON_TEST_PG_DATA="$dir/data" BATON_TEST_PG_PORT="$port" BATON_TEST_PG_SOCKET="$dir"
  echo "PostgreSQL on 127.0.0.1:$port ($BATON_SERVICES_DIR)"
}
