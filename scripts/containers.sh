#!/usr/bin/env bash
# Build Baton's container images with Podman, from Debian's packages only (no registry needed):
#   1. installs podman, podman-compose, runc and debootstrap (Debian; as root) when missing, and
#      the CNI dnsname plugin when Podman runs on CNI without it (service names would not resolve);
#   2. uses deploy/podman/containers.conf (exported as CONTAINERS_CONF unless you set your own);
#   3. builds the base images: localhost/baton-python:bookworm (debootstrap: Debian + python3-venv),
#      localhost/baton-postgres:bookworm and localhost/baton-rabbitmq:bookworm (deploy/podman/*);
#   4. builds Baton's image from ./Dockerfile on that base and tags it baton:<version>, the name
#      deploy/docker-compose.yml expects (Podman resolves baton:<version> to localhost/); pip inside the build uses this machine's pip index settings.
# Idempotent: what exists is kept (image builds are cached), so a rerun takes seconds.
#   bash scripts/containers.sh            build what is missing or changed
#   bash scripts/containers.sh --rebuild  debootstrap the base again and rebuild every image
#   bash scripts/containers.sh --dry-run  check the prerequisites and print the plan; install and build
#                                         nothing (exit 1 when the plan cannot be carried out)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REBUILD=0
DRY_RUN=0
for arg in "$@"; do
  case $arg in
    --rebuild) REBUILD=1 ;;
    --dry-run) DRY_RUN=1 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "containers.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/deploy/podman/containers.conf}
PYTHON_BASE=localhost/baton-python:bookworm
POSTGRES_IMAGE=localhost/baton-postgres:bookworm
RABBITMQ_IMAGE=localhost/baton-rabbitmq:bookworm
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
BATON_IMAGE=${BATON_IMAGE:-localhost/baton:$VERSION}

step() { printf '\n== %s\n' "$*"; }

DNSNAME_PACKAGE=golang-github-containernetworking-plugin-dnsname

needs_dnsname() {
  # Podman on CNI (Debian bookworm's default) resolves the compose services' names (postgres,
  # rabbitmq) only with the dnsname plugin; without it every Baton container fails with "unknown host".
  command -v podman >/dev/null && [ "$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null)" = cni ] \
    && [ ! -x /usr/lib/cni/dnsname ] && [ ! -x /opt/cni/bin/dnsname ]
}

install_tools() {
  local missing=() packages=()
  for tool in podman podman-compose runc debootstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  packages=("${missing[@]}")
  needs_dnsname && packages+=("$DNSNAME_PACKAGE")
  [ ${#missing[@]} -eq 0 ] && ! needs_dnsname && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "missing: ${packages[*]}; install them (Debian: apt-get install ${packages[*]})" >&2
    exit 1
  fi
  step "installing ${packages[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  # podman itself may have come just now, on CNI and without the plugin
  if needs_dnsname; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$DNSNAME_PACKAGE" >/dev/null
  fi
}

debian_mirror() {
  # The mirror apt already uses for bookworm's main archive (deb822 .sources or one-line lists).
  python3 scripts/debian_mirror.py bookworm
}

BASE_BUILT=false
build_python_base() {
  if [ $REBUILD = 0 ] && podman image exists "$PYTHON_BASE"; then
    echo "$PYTHON_BASE exists"
    return 0
  fi
  BASE_BUILT=true
  local mirror dir
  mirror=$(debian_mirror)
  dir=$(mktemp -d /var/tmp/baton-rootfs.XXXXXX)
  step "debootstrap bookworm from $mirror -> $PYTHON_BASE"
  if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$dir" "$mirror" \
    >"$dir.log" 2>&1; then
    tail -n 20 "$dir.log" >&2
    rm -rf "$dir"
    exit 1
  fi
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | podman import --change 'ENV LANG=C.UTF-8' - "$PYTHON_BASE" >/dev/null
  rm -rf "$dir" "$dir.log"
}

build_service_image() {
  local name=$1 tag=$2
  step "$tag (deploy/podman/$name)"
  local log
  log=$(mktemp /tmp/baton-build.XXXXXX.log)
  if ! podman build --build-arg "BASE_IMAGE=$PYTHON_BASE" -t "$tag" "deploy/podman/$name" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    exit 1
  fi
  rm -f "$log"
}

pip_settings() {
  # This machine's effective pip settings (config files and PIP_* variables) as one pip.conf for the
  # build, plus a -v mount for every local file or directory they name (file:// indexes, find-links,
  # certificates, constraints), so pip in the build resolves exactly as pip here does.
  local conf=$1
  python3 - "$conf" <<'PY'
import os, re, subprocess, sys
listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
settings = {}
for line in listing.splitlines():
    match = re.match(r"^([^.]*)\.([\w-]+)='(.*)'$", line)
    if match:
        section, key, value = match.groups()
        section = "global" if section in ("", ":env:") else section
        settings.setdefault(section, {})[key] = value
with open(sys.argv[1], "w") as out:
    for section, values in settings.items():
        out.write(f"[{section}]\n" + "".join(f"{key} = {value}\n" for key, value in values.items()))
paths = set()
for values in settings.values():
    for value in values.values():
        for token in value.split():
            path = token[len("file://"):] if token.startswith("file://") else token
            if path.startswith("/") and os.path.exists(path):
                path = os.path.realpath(path)
                # A local "simple" index links to its files relatively (../../files/...): mount its parent.
                paths.add(os.path.dirname(path) if os.path.basename(path) == "simple" else path)
for path in sorted(paths):
    print(path)
PY
}

build_baton() {
  step "Baton's image from ./Dockerfile -> $BATON_IMAGE"
  local conf mounts=() path
  conf=$(mktemp /tmp/baton-pip.XXXXXX.conf)
  while IFS= read -r path; do
    mounts+=(-v "$path:$path:ro")
  done < <(pip_settings "$conf")
  mounts+=(-v "$conf:/etc/pip.conf:ro")
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    mounts+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
  fi
  local no_cache=()
  [ $REBUILD = 1 ] && no_cache=(--no-cache)
  if ! podman build "${no_cache[@]}" "${mounts[@]}" --build-arg "PYTHON_IMAGE=$PYTHON_BASE" \
    -t "$BATON_IMAGE" -f Dockerfile . >"$conf.log" 2>&1; then
    tail -n 30 "$conf.log" >&2
    exit 1
  fi
  rm -f "$conf" "$conf.log"
}

dry_run() {
  local missing=() tool feasible=0 conf mounts
  echo "plan (--dry-run: nothing is installed, built or written):"
  for tool in podman podman-compose runc debootstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "  tools: podman, podman-compose, runc and debootstrap are installed"
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "  tools: would install ${missing[*]} (apt-get)"
  else
    echo "  missing: ${missing[*]}; install them (Debian: apt-get install podman podman-compose runc debootstrap)" >&2
    feasible=1
  fi
  if needs_dnsname; then
    echo "  container DNS: would install $DNSNAME_PACKAGE (Podman on CNI resolves service names only with it)"
  fi
  if [ $REBUILD = 0 ] && command -v podman >/dev/null && podman image exists "$PYTHON_BASE"; then
    echo "  $PYTHON_BASE: exists, kept"
  else
    echo "  $PYTHON_BASE: would debootstrap bookworm (minbase, python3 python3-venv ca-certificates) from $(debian_mirror)"
  fi
  for name in postgres rabbitmq; do
    if [ ! -f "deploy/podman/$name/Containerfile" ]; then
      echo "  deploy/podman/$name/Containerfile is missing" >&2
      feasible=1
    fi
  done
  echo "  $POSTGRES_IMAGE: would build deploy/podman/postgres on $PYTHON_BASE"
  echo "  $RABBITMQ_IMAGE: would build deploy/podman/rabbitmq on $PYTHON_BASE"
  [ -f Dockerfile ] || { echo "  ./Dockerfile is missing" >&2; feasible=1; }
  conf=$(mktemp)
  mounts=$(pip_settings "$conf" | wc -l)
  rm -f "$conf"
  echo "  $BATON_IMAGE: would build ./Dockerfile (PYTHON_IMAGE=$PYTHON_BASE$([ $REBUILD = 1 ] && echo ', no cache')) with this machine's pip settings ($mounts local paths mounted)"
  echo "  then: write build/containers-images.json (how the build went, for bench/containers.sh)"
  return $feasible
}

if [ $DRY_RUN = 1 ]; then
  dry_run
  exit $?
fi
started=$(date +%s)
install_tools
build_python_base
build_service_image postgres "$POSTGRES_IMAGE"
build_service_image rabbitmq "$RABBITMQ_IMAGE"
build_baton
seconds=$(($(date +%s) - started))
step "done in $seconds s"
# What bench/containers.sh reports about the images it ran.
mkdir -p build
printf '{"seconds": %s, "base_debootstrapped": %s, "rebuild": %s, "finished": "%s", "image": "%s"}\n' \
  "$seconds" "$BASE_BUILT" "$([ $REBUILD = 1 ] && echo true || echo false)" "$(date -u +%FT%TZ)" "$BATON_IMAGE" \
  >build/containers-images.json.tmp
mv build/containers-images.json.tmp build/containers-images.json
podman images --filter reference='*baton*' --format '{{.Repository}}:{{.Tag}}\t{{.Size}}'
cat <<EOF

Podman needs these settings in your shell too (this sandbox cannot raise resource limits):
  export CONTAINERS_CONF=$CONTAINERS_CONF
Then: podman-compose -p baton -f deploy/docker-compose.yml -f deploy/docker-compose.local.yml up -d
EOF
