"""Throw-away Debian machines for the package test: a debootstrapped root, cached on this machine and
copied for each run, the way a systemd unit would run a command in it, and a stand-in for OpenKAT's
kat-mula package.

The base root (Debian's minbase with python3, adduser and systemd: what a server that runs OpenKAT's
packages has) is made once per machine under `BATON_DEBIAN_CACHE` (default `~/.cache/baton/debian`)
and never changed afterwards: each test copies it (`cp -a`, under a second) and installs into the copy.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "adduser", "systemd")
# What a configured machine has and debootstrap does not write.
HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
# systemd's PATH for services (systemd.exec(5), "Environment variables in spawned processes").
UNIT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cache_dir() -> Path:
    configured = os.environ.get("BATON_DEBIAN_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "baton" / "debian"


def debian_mirror() -> str:
    mirror = subprocess.run(
        [sys.executable, str(REPOSITORY / "scripts" / "debian_mirror.py"), SUITE],
        capture_output=True,
        text=True,
        check=True,
    )
    return mirror.stdout.strip()


@dataclass(frozen=True)
class BaseRoot:
    path: Path
    seconds: float  # how long making it took; 0 when it was in the cache already


def base_root() -> BaseRoot:
    """The cached root, made by debootstrap when missing. Parallel callers wait for one to make it."""
    key = hashlib.sha256(" ".join((SUITE, *BASE_PACKAGES)).encode()).hexdigest()[:12]
    root = cache_dir() / f"{SUITE}-{key}"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "etc" / "hosts").exists():
            return BaseRoot(root, 0.0)
        started = time.monotonic()
        partial = root.parent / f"{root.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        command = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            SUITE,
            str(partial),
            debian_mirror(),
        ]
        made = subprocess.run(command, capture_output=True, text=True)
        if made.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise RuntimeError(f"{shlex.join(command)} failed:\n{made.stdout[-3000:]}{made.stderr[-3000:]}")
        for cached in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (partial / cached).glob("*"):
                if item.is_file():
                    item.unlink()
        (partial / "etc" / "hosts").write_text(HOSTS)  # last: it marks the root complete
        partial.rename(root)
        return BaseRoot(root, time.monotonic() - started)


def copy_root(base: Path, destination: Path) -> Path:
    subprocess.run(["cp", "-a", "--reflink=auto", str(base), str(destination)], check=True)
    return destination


def in_root(root: Path, *command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a command as root inside the root, with a clean environment, as an operator's shell would."""
    return subprocess.run(
        ["chroot", str(root), "env", "-i", f"PATH={UNIT_PATH}", "LANG=C.UTF-8", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- the unit -------------------------------------------------------------------------------------------


def unit_settings(text: str, section: str = "Service") -> list[tuple[str, str]]:
    """The `Key=value` lines of one section of a unit file, in order (repeated keys kept)."""
    settings: list[tuple[str, str]] = []
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current == section and "=" in line:
            key, _, value = line.partition("=")
            settings.append((key.strip(), value.strip()))
    return settings


def environment_file(text: str) -> dict[str, str]:
    """Variables of an EnvironmentFile= as systemd reads one: `KEY=VALUE` lines, `#` and `;` comments,
    a value in matching single or double quotes unquoted."""
    variables = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        variables[key.strip()] = value
    return variables


@dataclass(frozen=True)
class UnitCommand:
    argv: list[str]
    environment: dict[str, str]
    user: str
    working_directory: str
    before: list[list[str]]  # ExecStartPre=, each to succeed before ExecStart= runs


def unit_command(root: Path, unit: str) -> UnitCommand:
    """What systemd would start for `unit` inside `root`: ExecStartPre= then ExecStart=, with the
    environment its EnvironmentFile= lines give (in order, later files winning; a `-` file may be
    missing), as User= in WorkingDirectory=."""
    settings = unit_settings((root / unit.lstrip("/")).read_text())
    values = dict(settings)
    user = values.get("User", "root")
    home = next((line.split(":")[5] for line in passwd(root) if line.split(":")[0] == user), "/")
    environment = {"PATH": UNIT_PATH, "HOME": home, "USER": user, "LOGNAME": user}
    for key, value in settings:
        if key == "Environment":
            environment.update(pair.split("=", 1) for pair in shlex.split(value))  # type: ignore[misc]
        elif key == "EnvironmentFile":
            optional = value.startswith("-")
            path = root / value.lstrip("-").lstrip("/")
            if path.exists():
                environment.update(environment_file(path.read_text()))
            elif not optional:
                raise FileNotFoundError(f"{unit}: EnvironmentFile={value} is missing")
    before = [shlex.split(value) for key, value in settings if key == "ExecStartPre"]
    working_directory = values.get("WorkingDirectory", "/")
    return UnitCommand(shlex.split(values["ExecStart"]), environment, user, working_directory, before)


def passwd(root: Path) -> list[str]:
    return (root / "etc" / "passwd").read_text().splitlines()


def user_ids(root: Path, user: str) -> tuple[int, int, list[int]]:
    """uid, gid and every group of `user` in the root's own databases (what initgroups gives)."""
    entry = next(line.split(":") for line in passwd(root) if line.split(":")[0] == user)
    uid, gid = int(entry[2]), int(entry[3])
    groups = [gid]
    for line in (root / "etc" / "group").read_text().splitlines():
        _name, _, group_id, members = line.split(":")
        if user in members.split(",") and int(group_id) not in groups:
            groups.append(int(group_id))
    return uid, gid, groups


def as_unit(root: Path, command: UnitCommand, argv: list[str]) -> list[str]:
    """`argv` run in the root as the unit's user and groups, in its working directory."""
    uid, gid, groups = user_ids(root, command.user)
    return [
        "chroot",
        f"--userspec={uid}:{gid}",
        f"--groups={','.join(map(str, groups))}",
        str(root),
        "/bin/sh",
        "-c",
        'cd "$0" && exec "$@"',
        command.working_directory,
        *argv,
    ]


@contextmanager
def started(root: Path, command: UnitCommand, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Start the unit in the root as systemd would: each ExecStartPre= to its end (one failing fails the
    start: RuntimeError with its output), then ExecStart=, all as its user with exactly its environment;
    SIGTERM at the end. Their output goes to `log`."""
    with open(log, "wb") as output:
        for before in command.before:
            done = subprocess.run(as_unit(root, command, before), env=command.environment, stdout=output, stderr=output)
            if done.returncode != 0:
                raise RuntimeError(f"ExecStartPre={shlex.join(before)} failed ({done.returncode}):\n{log.read_text()}")
        argv = as_unit(root, command, command.argv)
        child = subprocess.Popen(argv, env=command.environment, stdout=output, stderr=subprocess.STDOUT)
    try:
        yield child
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def user_exists(root: Path, user: str) -> bool:
    return any(line.split(":")[0] == user for line in passwd(root))


# -- a stand-in for OpenKAT's kat-mula -------------------------------------------------------------------

KAT_MULA_POSTINST = """#!/bin/sh
set -e
getent group kat >/dev/null || addgroup --system --quiet kat
getent passwd kat >/dev/null || adduser --system --quiet --ingroup kat --no-create-home kat
chown -R root:kat /etc/kat
chmod 750 /etc/kat
chmod 640 /etc/kat/mula.conf
"""


def kat_mula_package(directory: Path, mula_conf: str) -> Path:
    """A package named kat-mula with what Baton's package meets of OpenKAT's: the user and group `kat`,
    /etc/kat (root:kat, 0750) and the conffile /etc/kat/mula.conf, and /usr/lib/kat/mula.defaults.
    No scheduler in it: it is there to be replaced."""
    tree = directory / "kat-mula"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: kat-mula\nVersion: 1.20.1\nArchitecture: all\nDepends: adduser\n"
        "Maintainer: Baton maintainers <maintainers@baton.example>\n"
        "Description: stand-in for OpenKAT's scheduler package\n its settings, no scheduler\n"
    )
    (tree / "DEBIAN" / "conffiles").write_text("/etc/kat/mula.conf\n")
    postinst = tree / "DEBIAN" / "postinst"
    postinst.write_text(KAT_MULA_POSTINST)
    postinst.chmod(0o755)
    (tree / "etc" / "kat").mkdir(parents=True)
    (tree / "etc" / "kat" / "mula.conf").write_text(mula_conf)
    (tree / "usr" / "lib" / "kat").mkdir(parents=True)
    (tree / "usr" / "lib" / "kat" / "mula.defaults").write_text(
        "SCHEDULER_API_HOST=localhost\nSCHEDULER_API_PORT=8004\n"
    )
    package = directory / "kat-mula_1.20.1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(tree), str(package)], check=True, capture_output=True)
    return package
