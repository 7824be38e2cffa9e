"""Baton's Debian package, for real: built by scripts/debian_package.sh (lintian errors fail it),
installed with dpkg into a throw-away Debian root that has OpenKAT's kat-mula (a stand-in package with
its user, its /etc/kat/mula.conf and its defaults), its unit checked by `systemd-analyze verify`, the
unit's command started in the root with the unit's environment and user, OpenKAT's scheduler API
called on mula's address, then upgraded, removed and purged.

The root is Debian bookworm's minbase (debootstrap), made once per machine and cached
(harness/debian.py); the database is the suite's PostgreSQL, reached from the root over 127.0.0.1
(a chroot shares the host's network). `BATON_TEST_DEBIAN_PACKAGE` names a package built already
(scripts/test.sh builds it beside the other checks); without it the test builds one. It needs root,
dpkg-dev, debhelper, dh-virtualenv, lintian and debootstrap: skipped without them, failing under CI
(scripts/test.sh installs them).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from harness.debian import (
    BaseRoot,
    base_root,
    copy_root,
    in_root,
    kat_mula_package,
    unit_command,
    user_exists,
    user_ids,
)
from harness.debian import (
    started as unit_started,
)
from harness.standins import mula_db
from harness.waiting import free_port, wait_until
from tests.conftest import fresh_postgres_database, postgres_url

REPOSITORY = Path(__file__).resolve().parents[2]
UNIT = "/lib/systemd/system/baton.service"
TOOLS = {
    "dpkg-buildpackage": "dpkg-dev",
    "dh": "debhelper",
    "dh_virtualenv": "dh-virtualenv",
    "lintian": "lintian",
    "debootstrap": "debootstrap",
    "chroot": "coreutils",
    "systemd-analyze": "systemd",
}
# Baton's files and folders: none of them may outlive a purge.
PACKAGE_PATHS = (
    "opt/venvs/baton",
    "usr/lib/baton",
    "usr/bin/update-baton-db",
    "usr/bin/baton",
    "lib/systemd/system/baton.service",
    "etc/baton",
    "var/lib/baton",
    "usr/share/doc/baton",
)
# mula's organisation whose code Baton cannot hold: its rows are left out (harness/standins/mula_db.py).
LEFT_OUT_ORGANISATION = "bad org"


def require_debian_tools() -> None:
    problems = []
    if os.geteuid() != 0:
        problems.append("not root (dpkg and chroot need it)")
    missing = sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        problems.append(f"missing {' '.join(missing)} (apt-get install {' '.join(missing)})")
    if problems:
        if os.environ.get("CI"):
            pytest.fail("; ".join(problems) + " under CI: scripts/test.sh installs them")
        pytest.skip("; ".join(problems))


@dataclass(frozen=True)
class Package:
    path: Path
    seconds: float  # building it here, or waiting for the build scripts/test.sh started
    prebuilt: bool


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Package:
    require_debian_tools()
    began = time.monotonic()
    prebuilt = os.environ.get("BATON_TEST_DEBIAN_PACKAGE")
    if prebuilt:
        wait_for_prebuilt(Path(prebuilt))
        return Package(Path(prebuilt), time.monotonic() - began, prebuilt=True)
    output = tmp_path_factory.mktemp("debian")
    # Its own session, so that a test stopped half-way stops the whole build (pip, dpkg-deb, lintian).
    build = subprocess.Popen(
        ["bash", str(REPOSITORY / "scripts" / "debian_package.sh"), "--output", str(output)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = build.communicate(timeout=900)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()
    assert build.returncode == 0, f"the package did not build:\n{out[-6000:]}"
    (deb,) = output.glob("baton_*.deb")
    return Package(deb, time.monotonic() - began, prebuilt=False)


def wait_for_prebuilt(path: Path) -> None:
    """scripts/test.sh builds the package while the other checks run, and writes the build's exit
    status beside it when done (`status`, with its output in `output.log`)."""
    status = path.parent / "status"
    assert wait_until(status.exists, timeout=900, interval=1), f"no package at {path} after 15 minutes"
    log = path.parent / "output.log"
    assert status.read_text().strip() == "0", f"scripts/debian_package.sh failed ({log}):\n{log.read_text()[-4000:]}"


@pytest.fixture(scope="module")
def base() -> BaseRoot:
    require_debian_tools()
    return base_root()


@pytest.fixture
def root(base: BaseRoot, tmp_path: Path) -> Iterator[Path]:
    copy = copy_root(base.path, tmp_path / "root")
    yield copy
    shutil.rmtree(copy, ignore_errors=True)


def database_url(libpq_or_url: str, dbname: str) -> str:
    """The suite's PostgreSQL as OpenKAT writes SCHEDULER_DB_URI: postgresql://user@host:port/db."""
    parts = urlsplit(libpq_or_url.replace("postgresql+psycopg://", "postgresql://"))
    return urlunsplit(parts._replace(path=f"/{dbname}"))


def mula_conf(port: int, database: str, queue: str) -> str:
    """/etc/kat/mula.conf as OpenKAT's package installs it and its guide fills it in: the listen address
    and the services commented out (kat-mula's defaults apply), the rest set."""
    return (
        "# Host address, default: localhost\n# SCHEDULER_API_HOST=localhost\n\n"
        f"SCHEDULER_API_PORT={port}\n\n"
        f"QUEUE_URI={queue}\n\n"
        "# KATALOGUS_API=http://localhost:8003\n# BYTES_API=http://localhost:8002\n"
        "# OCTOPOES_API=http://localhost:8001\n\n"
        "BYTES_USERNAME=bytes\nBYTES_PASSWORD=bytes-secret\n\n"
        f"SCHEDULER_DB_URI={database}\n"
    )


def tables(conninfo: str, schema: str) -> set[str]:
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    return {row[0] for row in rows}


def rows(conninfo: str, table: str) -> int:
    with psycopg.connect(conninfo) as conn:
        count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(count[0]) if count else 0


def public_rows(conninfo: str) -> dict[str, str]:
    """Every table of schema public with a digest of all its rows: mula's tables, when mula ran there."""
    digests = {}
    with psycopg.connect(conninfo) as conn:
        for table in sorted(tables(conninfo, "public")):
            row = conn.execute(
                f"SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM \"{table}\" t"
            )
            digests[table] = str(row.fetchone())
    return digests


def mode(root: Path, path: str) -> tuple[str, str, int]:
    stat = (root / path).stat()
    names = {int(line.split(":")[2]): line.split(":")[0] for line in (root / "etc/passwd").read_text().splitlines()}
    groups = {int(line.split(":")[2]): line.split(":")[0] for line in (root / "etc/group").read_text().splitlines()}
    return names[stat.st_uid], groups[stat.st_gid], stat.st_mode & 0o7777


def dpkg(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return in_root(root, "dpkg", *args)


@pytest.mark.timeout(1200)  # a first run builds the package and debootstraps the root
def test_the_package_takes_kat_mulas_place(package: Package, base: BaseRoot, root: Path, tmp_path: Path) -> None:
    began = time.monotonic()
    admin = postgres_url()
    port = free_port()
    queue = os.environ.get("BATON_TEST_AMQP_URL", "")
    closed = free_port()  # nothing listens there: PostgreSQL "not up yet" at installation time
    with fresh_postgres_database("baton_deb") as conninfo:
        dbname = conninfo.rsplit("dbname=", 1)[1].split()[0].strip("'")
        scheduler_db = database_url(admin, dbname)

        # mula ran here: its tables, in every state it leaves rows in.
        mula_db.fill_example(mula_db.MulaDatabase(conninfo, "0010").create())
        mula_rows = public_rows(conninfo)

        # OpenKAT's scheduler is installed, its database not reachable yet.
        unreachable = f"postgresql://postgres@127.0.0.1:{closed}/{dbname}"
        kat_mula = kat_mula_package(tmp_path, mula_conf(port, unreachable, queue))
        shutil.copy(kat_mula, root / "tmp" / kat_mula.name)
        shutil.copy(package.path, root / "tmp" / package.path.name)
        assert dpkg(root, "-i", f"/tmp/{kat_mula.name}").returncode == 0

        # 1. dpkg -i: kat-mula goes (its settings stay), the database error does not fail the install.
        installed = dpkg(root, "-i", f"/tmp/{package.path.name}")
        output = installed.stdout + installed.stderr
        assert installed.returncode == 0, output
        assert "will remove kat-mula in favour of baton" in output
        assert "sudo update-baton-db && sudo systemctl restart baton" in output, output
        assert "ok config-files" in dpkg(root, "-s", "kat-mula").stdout  # removed, its conffiles kept
        assert (root / "etc/kat/mula.conf").exists() and not (root / "usr/lib/kat/mula.defaults").exists()
        assert "Provides: kat-mula" in dpkg(root, "-s", "baton").stdout
        # Baton's command line with the service's settings, as its user (root switches).
        version = in_root(root, "baton", "--version")
        assert version.returncode == 0 and version.stdout.startswith("baton "), version.stderr

        # Its user: baton, in OpenKAT's group kat; its settings readable by that user only.
        assert user_exists(root, "baton")
        assert user_ids(root, "kat")[1] in user_ids(root, "baton")[2], "baton is in group kat"
        assert mode(root, "etc/baton") == ("root", "baton", 0o750)
        assert mode(root, "etc/baton/baton.conf") == ("root", "baton", 0o640)
        assert mode(root, "var/lib/baton")[:2] == ("baton", "baton")

        # 2. The unit, as systemd reads it.
        verified = subprocess.run(["systemd-analyze", "verify", f"--root={root}", UNIT], capture_output=True, text=True)
        assert verified.returncode == 0, verified.stderr

        # 3. The unit, started while the database is still down, does not serve: its ExecStartPre
        # (update-baton-db) fails, and systemd would try again (Restart=on-failure).
        command = unit_command(root, UNIT)
        assert command.before == [["/usr/bin/update-baton-db"]]
        assert command.argv == ["/usr/lib/baton/baton-env", "/opt/venvs/baton/bin/baton", "serve"]
        failed = "ExecStartPre=/usr/bin/update-baton-db failed"
        with pytest.raises(RuntimeError, match=failed), unit_started(root, command, tmp_path / "down.log"):
            pytest.fail("the unit served without its database")

        # 4. The database answers now (the settings fixed): the unit's start migrates, imports mula's
        # state once, then serves, with the unit's environment, as its user: OpenKAT's API on mula's port.
        conf = (root / "etc/kat/mula.conf").read_text().splitlines()
        fixed = [f"SCHEDULER_DB_URI={scheduler_db}" if line.startswith("SCHEDULER_DB_URI=") else line for line in conf]
        (root / "etc/kat/mula.conf").write_text("\n".join(fixed) + "\n")
        command = unit_command(root, UNIT)
        assert command.environment["SCHEDULER_API_PORT"] == str(port)  # mula.conf's, over the defaults'
        assert command.environment["SCHEDULER_API_HOST"] == "localhost"  # kat-mula's default
        with unit_started(root, command, tmp_path / "serve.log") as server:
            url = f"http://127.0.0.1:{port}"

            def answers() -> bool:
                assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                try:
                    return httpx.get(f"{url}/health", timeout=2).status_code == 200
                except httpx.TransportError:
                    return False

            assert wait_until(answers, timeout=90, interval=0.2), (tmp_path / "serve.log").read_text()[-3000:]
            assert httpx.get(f"{url}/health").json()["healthy"] is True
            # rocky and the runners send no token; a pop of mula's boefje queue answers as mula's.
            popped = httpx.post(f"{url}/schedulers/boefje/pop", timeout=10)
            assert popped.status_code == 200, popped.text
            (task,) = popped.json()["results"]  # mula's queued tasks, its manual run (priority 1) first
            assert (task["priority"], task["status"]) == (1, "dispatched"), task
            ready = httpx.get(f"{url}/ready", timeout=10).json()
            assert ready["database"] == "postgresql"
            # KATalogus, Octopoes and Bytes where kat-mula's defaults put them (nothing listens there).
            assert {"katalogus", "octopoes", "bytes"} <= set(ready.get("outside_services", {})), ready
        serve_log = (tmp_path / "serve.log").read_text()
        assert "url=http://localhost:8003" in serve_log, serve_log[-3000:]
        (migrated,) = [line for line in serve_log.splitlines() if "is up to date" in line]  # by update-baton-db
        assert f"127.0.0.1:{urlsplit(scheduler_db).port}/{dbname}" in migrated
        assert {"tasks", "schedules", "organisations", "mula_imports"} <= tables(conninfo, "baton")
        # update-baton-db's `baton import-mula --if-present`: mula's state, recorded, beside mula's own rows.
        assert "Import finished and recorded" in serve_log, serve_log[-3000:]
        assert rows(conninfo, "baton.mula_imports WHERE finished_at IS NOT NULL") == 1
        for table in ("tasks", "schedules"):
            missing = rows(
                conninfo,
                f"public.{table} m WHERE m.organisation <> '{LEFT_OUT_ORGANISATION}' "
                f"AND NOT EXISTS (SELECT 1 FROM baton.{table} b WHERE b.id::text = m.id::text)",
            )
            assert missing == 0 and rows(conninfo, f"baton.{table}") > 0, f"mula's {table} not all imported"
        assert public_rows(conninfo) == mula_rows

        # 5. An upgrade (the same version again): the old bytecode goes first, the new is compiled, and
        # the postinst's update-baton-db (root switching to baton) finds the database up to date and
        # mula's state imported already.
        upgraded = dpkg(root, "-i", f"/tmp/{package.path.name}")
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        assert "not empty" not in upgraded.stdout + upgraded.stderr
        assert "is up to date" in upgraded.stdout
        assert "Nothing added or changed: an import is taken over once" in upgraded.stdout, upgraded.stdout

        # 6. Removal: the program goes; settings, user and database stay.
        removed = dpkg(root, "-r", "baton")
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert "not empty" not in removed.stdout + removed.stderr, removed.stderr
        assert not (root / "opt/venvs/baton").exists() and not (root / "usr/bin/update-baton-db").exists()
        assert not (root / UNIT.lstrip("/")).exists()
        assert (root / "etc/baton/baton.conf").exists() and user_exists(root, "baton")
        assert {"tasks", "schedules"} <= tables(conninfo, "baton")

        # 7. Purge: nothing of Baton's is left but its database; OpenKAT's settings and user stay.
        purged = dpkg(root, "-P", "baton")
        assert purged.returncode == 0, purged.stdout + purged.stderr
        left = [path for path in PACKAGE_PATHS if (root / path).exists()]
        assert left == [], f"left after purge: {left}"
        assert not user_exists(root, "baton"), "the package made the user baton, so purge removes it"
        members = {
            entry.split(":")[0]: entry.split(":")[3].split(",") for entry in (root / "etc/group").read_text().split()
        }
        assert "baton" not in members and "baton" not in members["kat"], "its group and membership go too"
        assert dpkg(root, "-s", "baton").returncode != 0
        assert user_exists(root, "kat") and (root / "etc/kat/mula.conf").exists()
        assert {"tasks", "schedules"} <= tables(conninfo, "baton")
        assert public_rows(conninfo) == mula_rows, "mula's tables untouched throughout"

    build = (
        f"waited {package.seconds:.0f} s for scripts/test.sh's build"
        if package.prebuilt
        else (f"built in {package.seconds:.0f} s")
    )
    made = f"debootstrapped in {base.seconds:.0f} s" if base.seconds else "cached"
    print(f"debian package: {build}; root {made}; install to purge {time.monotonic() - began:.0f} s")
