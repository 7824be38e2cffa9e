#!/usr/bin/env bash
# The test suite, against real servers: starts a throw-away PostgreSQL and RabbitMQ (installing the
# Debian packages when missing and run as root, chromium too), runs ruff, mypy, the import-layer
# contracts and pytest (tests/unit, integration, system), and stops the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/services.sh
. scripts/services.sh
start_postgres
start_rabbitmq
# The status page's browser test drives Debian's chromium (tests/system/test_ui_browser.py); as root,
# install it when missing, like PostgreSQL above. Without it that test is skipped, or fails under CI.
if [ ! -x /usr/bin/chromium ]; then
  _apt_install chromium chromium-driver || echo "no chromium: the status page's browser test cannot run" >&2
fi
# The failover test builds a pg_auto_failover formation (tests/system/test_failover.py); as root,
# install Debian's packages when missing. Without them that test is skipped, or fails under CI.
if ! command -v pg_autoctl >/dev/null 2>&1; then
  _apt_install pg-auto-failover-cli postgresql-15-auto-failover || echo "no pg_auto_failover: the failover test cannot run" >&2
fi
# Every temporary file of the run lives under the services folder, which goes when we exit.
export TMPDIR="$BATON_SERVICES_DIR/tmp"
mkdir -p "$TMPDIR" && chmod 755 "$TMPDIR"
ruff check src tests bench scripts
ruff format --check src tests bench scripts
mypy
lint-imports
python -m pytest --basetemp="$TMPDIR/pytest" "$@"
