"""`baton probe api|director|worker`, the containers' health checks, run as the container runs them: a
real `baton` process against a real database (both backends) or a real HTTP server. Exit 0 is
healthy; 1 comes with one line on stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from baton.core.model import utcnow
from baton.storage.engine import Store
from baton.storage.tables import LeaderRecord, WorkerRecord
from harness.waiting import free_port

HOST = os.uname().nodename


def probe(*args: str, database_url: str | None = None, pod_name: str | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_") and k != "POD_NAME"}
    env["BATON_LOG_LEVEL"] = "warning"
    if database_url:
        env["BATON_DATABASE_URL"] = database_url
    if pod_name:
        env["POD_NAME"] = pod_name
    result = subprocess.run(
        [sys.executable, "-m", "baton", "probe", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.stdout == ""
    return result.returncode, result.stderr.strip()


def reported_age(stderr: str, problem: str) -> int:
    """The age in `baton: error: unhealthy: <problem> <age> s ago` (the probe's process start counts in it)."""
    match = re.fullmatch(rf"baton: error: unhealthy: {problem} (\d+) s ago", stderr)
    assert match, stderr
    return int(match[1])


def lead(store: Store, holder: str, seconds_ago: float) -> None:
    renewed = utcnow() - timedelta(seconds=seconds_ago)
    with store.session() as session:
        session.add(LeaderRecord(role="director", holder=holder, acquired_at=renewed, renewed_at=renewed, term=1))


def register_worker(store: Store, worker_id: str, seconds_ago: float) -> None:
    beat = utcnow() - timedelta(seconds=seconds_ago)
    with store.session() as session:
        session.add(WorkerRecord(id=worker_id, started_at=beat, heartbeat_at=beat, expires_at=beat))


def test_director_passes_while_nobody_leads_or_another_host_leads(store: Store) -> None:
    assert probe("director", database_url=store.url) == (0, "")
    lead(store, "elsewhere:7", seconds_ago=600)
    assert probe("director", database_url=store.url) == (0, "")


def test_director_that_leads_must_have_renewed_within_stale(store: Store) -> None:
    lead(store, f"{HOST}:4242", seconds_ago=120)
    code, stderr = probe("director", database_url=store.url)
    assert code == 1 and reported_age(stderr, "leading but last renewed") >= 120
    assert probe("director", "--live", database_url=store.url)[0] == 1  # hung while the database answers
    # The margins are wide: a probe is a process start, which a loaded machine may stretch to a minute.
    assert probe("director", "--stale", "3600", database_url=store.url) == (0, "")


def test_director_leading_under_its_pod_name(store: Store) -> None:
    lead(store, "baton-director-5d8f9", seconds_ago=90)
    code, stderr = probe("director", database_url=store.url, pod_name="baton-director-5d8f9")
    assert code == 1 and reported_age(stderr, "leading but last renewed") >= 90
    assert probe("director", database_url=store.url, pod_name="baton-director-other") == (0, "")


def test_fresh_leader_and_worker_pass(store: Store) -> None:
    lead(store, f"{HOST}:4242", seconds_ago=1)
    register_worker(store, f"{HOST}:4242#a1b2c3", seconds_ago=1)
    assert probe("director", database_url=store.url) == (0, "")
    assert probe("worker", database_url=store.url) == (0, "")


def test_worker_must_register_and_renew(store: Store) -> None:
    register_worker(store, "elsewhere:1#000000", seconds_ago=1)  # another pod's row does not count
    assert probe("worker", database_url=store.url) == (1, "baton: error: unhealthy: this worker has not registered yet")
    assert probe("worker", "--live", database_url=store.url) == (0, "")
    register_worker(store, f"{HOST}:99#abcdef", seconds_ago=75)
    code, stderr = probe("worker", database_url=store.url)
    assert code == 1 and reported_age(stderr, "worker row last renewed") >= 75
    assert probe("worker", "--live", database_url=store.url)[0] == 1
    assert probe("worker", "--stale", "3600", database_url=store.url) == (0, "")


@pytest.mark.parametrize("kind", ["director", "worker"])
def test_unreachable_database_fails_readiness_but_not_liveness(kind: str, tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path / 'absent.db'}", f"postgresql://postgres@127.0.0.1:{free_port()}/baton"):
        code, stderr = probe(kind, database_url=url)
        assert code == 1 and stderr.startswith("baton: error: unhealthy: database unreachable: "), stderr
        assert probe(kind, "--live", database_url=url) == (0, "")
    assert not (tmp_path / "absent.db").exists()  # read-only: a probe never creates the database


@contextmanager
def ready_endpoint(status: int) -> Iterator[int]:
    """A real HTTP server on a free port whose GET /ready answers `status`."""

    class Ready(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == "/ready" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_api_is_ready_when_ready_answers_200() -> None:
    with ready_endpoint(200) as port:
        assert probe("api", "--port", str(port)) == (0, "")
    with ready_endpoint(503) as port:
        assert probe("api", "--port", str(port)) == (1, "baton: error: unhealthy: /ready answered 503")
    port = free_port()
    code, stderr = probe("api", "--port", str(port))
    assert (code, stderr) == (1, f"baton: error: unhealthy: http://127.0.0.1:{port}/ready: connection refused")
