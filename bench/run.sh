#!/usr/bin/env bash
# Run every benchmark against throw-away PostgreSQL and RabbitMQ servers; writes docs/benchmarks.md
# and docs/benchmarks.png. Extra arguments go to bench/run.py (e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/services.sh
. scripts/services.sh
start_postgres
start_rabbitmq
python -m pip install --quiet -e '.[bench]'
python -m bench.run --database-url "$BATON_TEST_POSTGRES_URL" --amqp-url "$BATON_TEST_AMQP_URL" "$@"
