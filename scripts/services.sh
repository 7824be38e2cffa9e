# Throw-away PostgreSQL (and RabbitMQ) servers for the test suite, on free ports under one temp dir.
# Source this file, then call start_postgres / start_rabbitmq; everything stops on exit.
# Installs the Debian packages first when they are missing and we are root.

_baton_cleanups=()
if [ -z "${BATON_SERVICES_DIR:-}" ]; then
  BATON_SERVICES_DIR=$(mktemp -d /tmp/baton-services.XXXXXX)
  # Runs last (cleanups run in reverse): the servers are stopped by then.
  _baton_cleanups+=("rm -rf '$BATON_SERVICES_DIR'")
fi
chmod 755 "$BATON_SERVICES_DIR"

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

_stop_epmd() {
  local epmd
  epmd=$(command -v epmd || ls /usr/lib/erlang/erts-*/bin/epmd 2>/dev/null | tail -n 1)
  [ -n "$epmd" ] && "$epmd" -kill >/dev/null 2>&1 || true
}

start_rabbitmq() {
  if [ -n "${BATON_TEST_AMQP_URL:-}" ]; then return 0; fi
  local rabbit_bin=/usr/lib/rabbitmq/bin
  if [ ! -x "$rabbit_bin/rabbitmq-server" ]; then _apt_install rabbitmq-server; fi
  local dir="$BATON_SERVICES_DIR/rabbitmq" port dist_port
  port=$(_free_port)
  dist_port=$(_free_port)
  mkdir -p "$dir"
  echo "[]." >"$dir/enabled_plugins"
  printf 'loopback_users = none\nlisteners.tcp.default = %s\n' "$port" >"$dir/rabbitmq.conf"
  # Everything the node and rabbitmqctl need, exported so the tests can restart the broker.
  export RABBITMQ_NODENAME="baton-test-$$@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$dist_port"
  export RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log"
  export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" RABBITMQ_CONFIG_FILE="$dir/rabbitmq"
  export RABBITMQ_PID_FILE="$dir/rabbitmq.pid"
  export BATON_TEST_RABBITMQCTL="$rabbit_bin/rabbitmqctl"
  # The node starts the Erlang port mapper (epmd) unless one runs already; stop it afterwards
  # only if we started it (`epmd -kill` also refuses while other nodes are registered).
  if ! cat /proc/[0-9]*/comm 2>/dev/null | grep -qx epmd; then
    _baton_cleanups+=("_stop_epmd")
  fi
  # The Erlang cookie lives in $HOME; give the throw-away node its own.
  HOME="$dir" "$rabbit_bin/rabbitmq-server" >"$dir/server.log" 2>&1 &
  _baton_cleanups+=("HOME='$dir' '$rabbit_bin/rabbitmqctl' shutdown >/dev/null 2>&1 || kill $! 2>/dev/null")
  export BATON_TEST_RABBITMQ_HOME="$dir"
  if ! HOME="$dir" "$rabbit_bin/rabbitmqctl" await_startup --timeout 120 >/dev/null 2>&1; then
    # await_startup can fail while the node is still booting; poll the AMQP port as well.
    python3 - "$port" <<'PY'
import socket, sys, time
deadline = time.time() + 120
while time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit("RabbitMQ did not start")
PY
    HOME="$dir" "$rabbit_bin/rabbitmqctl" await_startup --timeout 120 >/dev/null
  fi
  export BATON_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/%2F"
  echo "RabbitMQ on 127.0.0.1:$port ($dir)"
}
