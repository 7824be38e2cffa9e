#!/usr/bin/env bash
# Every benchmark scenario against throw-away PostgreSQL and RabbitMQ servers (scripts/services.sh;
# stopped on exit). Writes docs/benchmarks.{json,md,png}, docs/benchmarks-fairness.png and
# docs/replication-results.md. Arguments go to bench.run: --quick for a smoke run of a few minutes,
# --only NAME,... / --skip NAME,... to choose scenarios, --profile for just the profile.
# Uses the `python` first on PATH (activate the virtualenv with Baton and its [bench] extra first).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/services.sh
. scripts/services.sh
start_postgres
start_rabbitmq
python -m bench.run --database-url "$BATON_TEST_POSTGRES_URL" --amqp-url "$BATON_TEST_AMQP_URL" "$@"
