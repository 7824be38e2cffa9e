#!/usr/bin/env bash
# The test suite, against real servers: starts a throw-away PostgreSQL and RabbitMQ (installing the
# Debian packages when missing and run as root, chromium and prometheus too), runs ruff, mypy, the
# import-layer contracts, builds the documentation site (strict: a broken link fails), checks the
# alert rules with promtool, runs pytest (tests/unit, integration, system), and stops the servers.
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
# promtool (Debian's prometheus package) checks the alert rules of deploy/observability, as root
# installed when missing; without it those checks are skipped, saying so.
if ! command -v promtool >/dev/null; then
  _apt_install prometheus || echo "no promtool: the alert rules' syntax and unit tests are not checked" >&2
fi
# The failover test builds a pg_auto_failover formation (tests/system/test_failover.py); as root,
# install Debian's packages when missing. Without them that test is skipped, or fails under CI.
if ! command -v pg_autoctl >/dev/null 2>&1; then
  _apt_install pg-auto-failover-cli postgresql-15-auto-failover || echo "no pg_auto_failover: the failover test cannot run" >&2
fi
# Baton's Debian package (tests/system/test_debian_package.py) needs Debian's packaging tools; as root,
# install them when missing. Without them that test is skipped, or fails under CI.
if ! command -v dh_virtualenv >/dev/null || ! command -v lintian >/dev/null || ! command -v debootstrap >/dev/null; then
  _apt_install dpkg-dev debhelper dh-virtualenv lintian debootstrap python3-venv \
    || echo "no Debian packaging tools: the package test cannot run" >&2
fi
# Every temporary file of the run lives under the services folder, which goes when we exit.
export TMPDIR="$BATON_SERVICES_DIR/tmp"
mkdir -p "$TMPDIR" && chmod 755 "$TMPDIR"
# When the package test is selected (no test paths given, or paths that hold it), the package is built,
# and the test's Debian root made when this machine has none cached, in the background while the checks
# below run; the test waits for the build's status file. Stopped, the whole build with it, if we exit first.
package_test_selected() {
  local arg paths=0
  for arg in "$@"; do
    case $arg in
      tests | tests/ | tests/system | tests/system/ | *test_debian_package*) return 0 ;;
      tests/*) paths=1 ;;
    esac
  done
  [ $paths = 0 ]
}
if [ "$(id -u)" = 0 ] && command -v dh_virtualenv >/dev/null && command -v debootstrap >/dev/null \
  && package_test_selected "$@"; then
  deb_dir="$TMPDIR/debian-package"
  mkdir -p "$deb_dir"
  setsid bash -c 'python3 -c "from harness.debian import base_root; base_root()" >"$1/root.log" 2>&1
    bash scripts/debian_package.sh --output "$1" >"$1/output.log" 2>&1; echo $? >"$1/status"' _ "$deb_dir" &
  _baton_cleanups+=("kill -- -$! 2>/dev/null")
  version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
  export BATON_TEST_DEBIAN_PACKAGE="$deb_dir/baton_${version}_$(dpkg --print-architecture).deb"
fi
ruff check src harness tests bench scripts
ruff format --check src harness tests bench scripts
mypy
lint-imports
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$TMPDIR/site"  # not --quiet: it hides the warnings strict counts
if command -v promtool >/dev/null; then
  promtool check rules deploy/observability/baton-alerts.yml
  promtool test rules deploy/observability/baton-alerts.test.yml
fi
python -m pytest --basetemp="$TMPDIR/pytest" "$@"
