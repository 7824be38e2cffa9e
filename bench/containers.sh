#!/usr/bin/env bash
# The replication experiment in containers (the bench/containers package): podman-compose up with 3 API
# replicas, 2 directors, PostgreSQL and RabbitMQ; clients on this machine; kills and restarts of
# every component; then two replicas of `baton serve` with the embedded director. Writes
# docs/replication-containers.md and stops every container it started.
# A failed run (a task duplicated or missing) leaves both documents as they were.
#   bash scripts/containers.sh && bash bench/containers.sh [--quick] [--skip-embedded] [--keep]
#   bash bench/containers.sh --dry-run [--quick]   the plan and its prerequisites; starts nothing
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}
version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
dry_run=0
for arg in "$@"; do [ "$arg" = --dry-run ] && dry_run=1; done
for image in "localhost/baton:$version" localhost/baton-postgres:bookworm localhost/baton-rabbitmq:bookworm; do
  if ! command -v podman >/dev/null || ! podman image exists "$image"; then
    if [ $dry_run = 1 ]; then
      echo "prerequisite: image $image is not there yet (bash scripts/containers.sh builds it)"
      continue
    fi
    echo "image $image is missing: run bash scripts/containers.sh first" >&2
    exit 1
  fi
done
if [ $dry_run = 1 ]; then
  exec python3 -m bench.containers "$@"
fi
# The clients and the publisher run here; they need httpx, psycopg, pika and PyYAML (Baton's
# dependencies). Without them in python3, a virtualenv of their own under build/ (never the system's).
python=python3
if ! python3 -c 'import httpx, psycopg, pika, yaml' 2>/dev/null; then
  venv=build/containers-venv
  if [ ! -x "$venv/bin/python" ] && ! python3 -m venv "$venv"; then
    echo "cannot create $venv: install python3-venv (Debian)" >&2
    exit 1
  fi
  "$venv/bin/pip" install --quiet httpx 'psycopg[binary]' pika pyyaml
  python=$venv/bin/python
fi
exec "$python" -m bench.containers "$@"
