"""Faults against the processes that hold leases (directors, workers) on one PostgreSQL database:
freeze (SIGSTOP) past the lease, kill, terminate the leader's connections, and the measurements
taken around them (who owns which scheduler, how long until every scheduler runs again).

The CI test (tests/system/test_leases.py) runs it small; `bench/scenarios/leases.py` runs it
longer and writes the table in docs/replication.md. Every fault is checked against the write audit
(harness.writelog), not assumed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psycopg
from psycopg.types.json import Json

from baton.storage.urls import libpq_conninfo

FEED_MIME_TYPE = "boefje/dns-records"  # read by a normalizer of the built-in catalogue
LEASE_ENV = {
    # Short, yet with room for a loaded CI machine: a renewal starved past the renew deadline makes a
    # holder give everything up (as it must), which would turn scheduling noise into failovers.
    "BATON_LEASE_SECONDS": "6",
    "BATON_RENEW_DEADLINE_SECONDS": "4",
    "BATON_RETRY_PERIOD_SECONDS": "0.25",
    "BATON_RECONCILE_INTERVAL_SECONDS": "0.25",
    "BATON_POLL_INTERVAL_SECONDS": "0.1",
    "BATON_HEARTBEAT_TIMEOUT_SECONDS": "10",
    "BATON_LOG_LEVEL": "info",
    "BATON_AUTH": "off",
}


@dataclass
class Member:
    """One director or worker process."""

    kind: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def owner_prefix(self) -> str:
        return f"{socket.gethostname()}:{self.pid}#"

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Pool:
    """Directors or workers as real processes, each logging to a file of its own."""

    def __init__(self, database_url: str, extra_env: dict[str, str] | None = None) -> None:
        self.database_url = database_url
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("BATON_") or k.startswith("BATON_TEST")},
            **LEASE_ENV,
            **(extra_env or {}),
            "BATON_DATABASE_URL": database_url,
        }
        self.log_dir = Path(tempfile.mkdtemp(prefix="baton-leases-"))
        self.members: list[Member] = []

    def start(self, kind: str, *args: str) -> Member:
        path = self.log_dir / f"{len(self.members):02d}-{kind}.log"
        handle: IO[bytes] = path.open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "baton", kind, *args],
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        member = Member(kind, process, path)
        self.members.append(member)
        return member

    def stop_all(self) -> None:
        for member in self.members:
            if member.process.poll() is None:
                try:
                    member.signal(signal.SIGCONT)
                    member.process.terminate()
                    member.process.wait(15)
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    member.process.kill()
                    member.process.wait(10)


@contextmanager
def pool(database_url: str, extra_env: dict[str, str] | None = None) -> Iterator[Pool]:
    members = Pool(database_url, extra_env)
    try:
        yield members
    finally:
        members.stop_all()


# -- what the database says -----------------------------------------------------------------------


@dataclass(frozen=True)
class Ownership:
    total: int
    running: int
    owners: Counter[str]  # owner prefix (host:pid#) -> running schedulers it holds

    def held_by(self, member: Member) -> int:
        return self.owners.get(member.owner_prefix, 0)


def ownership(database_url: str) -> Ownership:
    with psycopg.connect(libpq_conninfo(database_url)) as conn:
        rows = conn.execute(
            "SELECT s.owner, s.state FROM schedulers s JOIN organisations o ON o.id = s.organisation"
        ).fetchall()
    owners: Counter[str] = Counter()
    running = 0
    for owner, state in rows:
        if owner is not None and state == "running":
            running += 1
            owners[owner.split("#", 1)[0] + "#"] += 1
    return Ownership(len(rows), running, owners)


def leader_pid(database_url: str) -> int | None:
    with psycopg.connect(libpq_conninfo(database_url)) as conn:
        row = conn.execute(
            "SELECT holder FROM leaders WHERE role = 'director' AND expires_at > clock_timestamp()"
        ).fetchone()
    return None if row is None else int(str(row[0]).rsplit(":", 1)[1])


def leader_term(database_url: str) -> int:
    with psycopg.connect(libpq_conninfo(database_url)) as conn:
        row = conn.execute("SELECT term FROM leaders WHERE role = 'director'").fetchone()
    return 0 if row is None else int(row[0])


def terminate_connections_of(database_url: str, pid_of_client: int) -> int:
    """pg_terminate_backend on every connection a client process holds (a proxy or firewall
    dropping them; what `idle_session_timeout` does to an idle lock connection)."""
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE client_port = ANY(%s) AND pid <> pg_backend_pid() AND datname = current_database()",
            (_client_ports(pid_of_client),),
        ).fetchall()
    return len(rows)


def _client_ports(pid: int) -> list[int]:
    """Local TCP ports of a process's connections (from /proc), to find its backends."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class EventFeeder:
    """Inbox events for every normalizer, all the time: so the schedulers under test write (tasks,
    consumed events) while faults happen, and the audit has something to judge."""

    def __init__(self, database_url: str, organisations: list[str], every: float = 0.02) -> None:
        self.database_url = database_url
        self.organisations = organisations
        self.every = every
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-feeder", daemon=True)

    def _run(self) -> None:
        conn: psycopg.Connection[tuple[object, ...]] | None = None
        while not self._stop.wait(self.every):
            organisation = self.organisations[self.sent % len(self.organisations)]
            payload = {
                "type": "raw_file_received",
                "raw_file": {"id": f"chaos-{self.sent}", "mime_types": [FEED_MIME_TYPE]},
            }
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(libpq_conninfo(self.database_url), autocommit=True)
                conn.execute(
                    "INSERT INTO events (scheduler_id, kind, payload, created_at) "
                    "VALUES (%s, 'raw_file_received', %s, clock_timestamp())",
                    (f"normalizer-{organisation}", Json(payload)),
                )
                self.sent += 1
            except psycopg.OperationalError:
                # The database restarted (its connections are gone): reconnect once it is back.
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.5)
        if conn is not None:
            conn.close()

    def __enter__(self) -> EventFeeder:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> float | None:
    """Seconds until `condition()` held, or None after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(interval)
    return None
