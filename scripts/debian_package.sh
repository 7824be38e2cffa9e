#!/usr/bin/env bash
# Build Baton's Debian package, baton_<version>_<arch>.deb, in the style of OpenKAT's kat-mula: Baton and
# its dependencies in a virtualenv at /opt/venvs/baton (dh-virtualenv, Debian's python3), the unit
# baton.service, /etc/baton/baton.conf, baton and update-baton-db; packaging/ holds the debian/ folder and the files.
#   1. installs dh-virtualenv, debhelper, lintian and python3-venv (Debian; as root) when missing;
#   2. copies what the package is built from (pyproject.toml, README.md, src/, packaging/) to
#      build/debian/source/baton-<version>/, writes its debian/changelog, runs dpkg-buildpackage -b
#      (pip installs Baton's dependencies from this machine's package index);
#   3. lints the package: any lintian error fails the build (warnings are printed).
#   bash scripts/debian_package.sh               build into build/debian/
#   bash scripts/debian_package.sh --output DIR  build into DIR (the .deb, the build log, lintian's report)
#   bash scripts/debian_package.sh --no-lint     skip lintian
#   bash scripts/debian_package.sh --dry-run     check the tools and print the plan; build nothing
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUTPUT=$ROOT/build/debian
LINT=1
DRY_RUN=0
while [ $# -gt 0 ]; do
  case $1 in
    --output) OUTPUT=$(realpath -m "${2:?--output needs a folder}"); shift ;;
    --no-lint) LINT=0 ;;
    --dry-run) DRY_RUN=1 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "debian_package.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Debian's python3, whatever python3 comes first on PATH: the virtualenv must run with the
# interpreter of the machines the package goes to.
PYTHON=/usr/bin/python3
VERSION=$($PYTHON -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
ARCH=$(dpkg --print-architecture 2>/dev/null || uname -m)
DEB=baton_${VERSION}_${ARCH}.deb
TOOLS=(dpkg-buildpackage:dpkg-dev dh:debhelper dh_virtualenv:dh-virtualenv lintian:lintian)

missing_packages() {
  local entry
  for entry in "${TOOLS[@]}"; do
    command -v "${entry%%:*}" >/dev/null || echo "${entry#*:}"
  done
  $PYTHON -c 'import ensurepip, venv' 2>/dev/null || echo python3-venv
}

install_tools() {
  local missing
  mapfile -t missing < <(missing_packages)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "missing: ${missing[*]}; install them (Debian: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "== installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

if [ $DRY_RUN = 1 ]; then
  echo "plan (--dry-run: nothing is installed or built):"
  mapfile -t missing < <(missing_packages)
  status=0
  if [ ${#missing[@]} -eq 0 ]; then
    echo "  tools: dpkg-buildpackage, dh_virtualenv, lintian and python3-venv are installed"
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "  tools: would install ${missing[*]} (apt-get)"
  else
    echo "  missing: ${missing[*]}; install them (Debian: apt-get install ${missing[*]})" >&2
    status=1
  fi
  for path in packaging/debian/control packaging/debian/rules packaging/debian/baton.service \
    packaging/data/usr/bin/update-baton-db; do
    [ -f "$path" ] || { echo "  $path is missing" >&2; status=1; }
  done
  echo "  source: pyproject.toml README.md src/ packaging/ -> $OUTPUT/source/baton-$VERSION"
  echo "  build: dpkg-buildpackage -b with $($PYTHON --version) ($PYTHON) -> $OUTPUT/$DEB"
  [ $LINT = 1 ] && echo "  lint: lintian $OUTPUT/$DEB (an error fails the build)"
  exit $status
fi

started=$(date +%s)
install_tools
SOURCE=$OUTPUT/source/baton-$VERSION
rm -rf "$OUTPUT/source"
mkdir -p "$SOURCE"
# The files the package is made of, as they are in this tree (committed or not), without caches.
tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude='*.pyc' \
  pyproject.toml README.md src packaging | tar -x -C "$SOURCE"
cp -r packaging/debian "$SOURCE/debian"
cat >"$SOURCE/debian/changelog" <<CHANGELOG
baton ($VERSION) unstable; urgency=medium

  * Baton $VERSION, built from its repository by scripts/debian_package.sh.

 -- Baton maintainers <maintainers@baton.example>  $(LC_ALL=C date -R)
CHANGELOG

echo "== dpkg-buildpackage: baton $VERSION ($ARCH) with $($PYTHON --version)"
log=$OUTPUT/build.log
# Debian's tools first on PATH (a pyenv or virtualenv python3 would otherwise run the build helpers).
if ! (cd "$SOURCE" && PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -us -uc -b) >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "debian_package.sh: the build failed; its log: $log" >&2
  exit 1
fi
mv "$OUTPUT/source/$DEB" "$OUTPUT/$DEB"
rm -rf "$OUTPUT/source"

if [ $LINT = 1 ]; then
  echo "== lintian $DEB"
  report=$OUTPUT/lintian.txt
  status=0
  lintian --fail-on error --info "$OUTPUT/$DEB" >"$report" 2>&1 || status=$?
  grep -E '^[EWIO]: ' "$report" | cut -d' ' -f1-3 | sort | uniq -c | sort -rn || true
  if [ $status != 0 ]; then
    grep -E '^E: ' "$report" >&2 || tail -n 20 "$report" >&2
    echo "debian_package.sh: lintian reports errors; its report: $report" >&2
    exit 1
  fi
fi
echo "== $OUTPUT/$DEB ($(du -h "$OUTPUT/$DEB" | cut -f1)) in $(($(date +%s) - started)) s"
