#!/usr/bin/env bash
# Run every benchmark and the replication harness against throw-away PostgreSQL and RabbitMQ servers;
# writes docs/benchmarks.md, docs/benchmarks.png and docs/replication-results.md
# Extra arguments (e.g. --quick) go to both.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/services.sh
. scripts/services.sh
start_postgres
start_rabbitmq
python -m pip install --quiet -e '.[bench]'
python -m bench.run --database-url "$BATON_TEST_POSTGRES_URL" --amqp-url "$BATON_TEST_AMQP_URL" "$@"
python -m bench.replication --database-url "$BATON_TEST_POSTGRES_URL" "$@"
