#!/usr/bin/env bash
# OpenKAT's own scheduler clients, unmodified, against `baton serve` on SQLite and on PostgreSQL, with
# messages published to RabbitMQ as Octopoes and Bytes publish them (see scripts/openkat_clients/drive.py).
#
#   bash scripts/openkat_clients.sh                  # fetches OpenKAT's files from GitHub (needs network)
#   OPENKAT_CHECKOUT=/path/to/nl-kat-coordination bash scripts/openkat_clients.sh   # a local clone instead
#
# Takes OpenKAT's client files (boefjes' scheduler client, worker models and manager; rocky's scheduler
# client; Bytes' event models) at OPENKAT_COMMIT into a temporary directory with a virtualenv holding the
# versions OpenKAT pins, and stand-ins for what those files import but the check does not need (KATalogus'
# plugin service, Octopoes' connector). Needs `baton` on PATH and the servers scripts/services.sh starts.
# About two minutes in all (measured: 2 min 10 s with the packages cached). Not part of CI: it needs
# the network for OpenKAT's files and the packages.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=${OPENKAT_COMMIT:-cae5e263ecdc689182e2e510ba54d869b10d6ffb}
files=(
  boefjes/boefjes/clients/scheduler_client.py
  boefjes/boefjes/worker/interfaces.py
  boefjes/boefjes/worker/job_models.py
  boefjes/boefjes/worker/manager.py
  rocky/rocky/scheduler.py
  rocky/rocky/health.py
  bytes/bytes/models.py
  bytes/bytes/events/events.py
)
command -v baton >/dev/null || { echo "baton is not on PATH (pip install -e .)" >&2; exit 1; }
baton_python=$(dirname "$(command -v baton)")/python

cd "$repo"
. scripts/services.sh
work=$(mktemp -d /tmp/baton-openkat.XXXXXX)
_baton_cleanups+=("rm -rf '$work'")

checkout=${OPENKAT_CHECKOUT:-}
if [ -z "$checkout" ]; then
  checkout=$work/openkat
  git clone --quiet --filter=blob:none --no-checkout https://github.com/minvws/nl-kat-coordination "$checkout"
fi
mkdir -p "$work/src"
cp -r scripts/openkat_clients/stubs/. "$work/src/"
for file in "${files[@]}"; do
  target=$work/src/${file#*/}
  mkdir -p "$(dirname "$target")"
  git -C "$checkout" show "$commit:$file" > "$target"
done
for package in boefjes/clients boefjes/worker rocky bytes bytes/events; do touch "$work/src/$package/__init__.py"; done

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check \
  httpx==0.28.1 pydantic==2.12.4 structlog==25.4.0 jsonschema==4.25.1 django==5.1.14 pika

start_postgres
start_rabbitmq

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_backend() {
  local backend=$1 database port serve status=0
  if [ "$backend" = sqlite ]; then
    database="sqlite:///$work/baton.db"
  else
    database=$("$baton_python" - <<'PY'
import os, uuid
import psycopg
from sqlalchemy import make_url
url = make_url(os.environ["BATON_TEST_POSTGRES_URL"])
name = f"openkat_{uuid.uuid4().hex[:8]}"
with psycopg.connect(url.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False), autocommit=True) as conn:
    conn.execute(f'CREATE DATABASE "{name}"')
print(url.set(database=name).render_as_string(hide_password=False))
PY
)
  fi
  "$work/venv/bin/python" - <<PY
import pika
connection = pika.BlockingConnection(pika.URLParameters("$BATON_TEST_AMQP_URL"))
channel = connection.channel()
for queue in ("scan_profile_mutations", "raw_file_received"):
    channel.queue_declare(queue, durable=True)
    channel.queue_purge(queue)
connection.close()
PY
  port=$(free_port)
  BATON_DATABASE_URL=$database BATON_PORT=$port BATON_AUTH=off BATON_AMQP_ENABLED=true \
    BATON_AMQP_URL=$BATON_TEST_AMQP_URL BATON_LOG_LEVEL=warning baton serve > "$work/serve-$backend.log" 2>&1 &
  serve=$!
  for _ in $(seq 120); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.5; done
  echo "== $backend"
  SCHEDULER_API=http://127.0.0.1:$port AMQP=$BATON_TEST_AMQP_URL PYTHONPATH=$work/src \
    "$work/venv/bin/python" scripts/openkat_clients/drive.py || status=$?
  kill "$serve"; wait "$serve" || true
  if [ "$status" != 0 ]; then echo "--- baton serve ($backend):"; cat "$work/serve-$backend.log"; fi
  return "$status"
}

failed=0
run_backend sqlite || failed=1
run_backend postgresql || failed=1
exit $failed
