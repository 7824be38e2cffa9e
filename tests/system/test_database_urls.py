"""Every database URL form, on every connection Baton opens, against the real test server.

Each multi-host form names an unreachable host first and the real server second, with
`target_session_attrs=read-write`: a connection that took only one of the hosts (the bug the
SQLAlchemy spelling had on the API's pool) fails. Per form: `baton migrate` and `baton serve` as real
processes (the start-up checks, the SQLAlchemy engine, `/ready`), a push and a pop through the API's
fast path (the psycopg pool), a waiting pop woken by LISTEN (a task queued by this test process, and
nobody looks again on a timer), and a scheduler lease taken on the control engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import text

from baton.storage.control import scheduler_leases as leases
from baton.storage.engine import Store
from baton.storage.urls import database_address
from harness.factories import add_organisation, push
from harness.servers import api_replicas
from harness.waiting import free_port, wait_until
from tests.conftest import fresh_postgres_database

QUEUE = "boefje-acme"
LONG = 120
WAITING = {"BATON_POP_RECHECK_SECONDS": "60", "BATON_POP_MAX_WAIT_SECONDS": str(LONG)}


class Server:
    """Where the test server is, and a closed port on the same address."""

    def __init__(self, conninfo: str) -> None:
        params = database_address(conninfo).params
        self.host, self.port, self.user, self.db = params["host"], params["port"], params["user"], params["dbname"]
        self.dead = free_port()  # nothing listens there: connection refused


# Each form: (URL, extra environment). Several hosts: the unreachable one first.
FORMS: dict[str, Callable[[Server], tuple[str, dict[str, str]]]] = {
    "pg_autoctl show uri": lambda s: (
        f"postgres://{s.user}@{s.host}:{s.dead},{s.host}:{s.port}/{s.db}?target_session_attrs=read-write&sslmode=prefer",
        {},
    ),
    "SQLAlchemy's host=h:p&host=h:p": lambda s: (
        f"postgresql+psycopg://{s.user}@/{s.db}?host={s.host}:{s.dead}&host={s.host}:{s.port}"
        "&target_session_attrs=read-write",
        {},
    ),
    "host=h1,h2&port=p1,p2": lambda s: (
        f"postgresql://{s.user}@/{s.db}?host={s.host},{s.host}&port={s.dead},{s.port}&target_session_attrs=read-write",
        {},
    ),
    "options and sslmode": lambda s: (
        f"postgresql://{s.user}@{s.host}:{s.port}/{s.db}?sslmode=disable&options=-c%20statement_timeout%3D61000",
        {},
    ),
    "libpq key/value string": lambda s: (
        f"host={s.host},{s.host} port={s.dead},{s.port} user={s.user} dbname={s.db} target_session_attrs=read-write",
        {},
    ),
    "PG* environment variables": lambda s: (
        "postgresql://",
        {"PGHOST": s.host, "PGPORT": s.port, "PGUSER": s.user, "PGDATABASE": s.db},
    ),
}


@pytest.fixture
def server() -> Iterator[Server]:
    with fresh_postgres_database("baton_urls") as conninfo:
        yield Server(conninfo)


def baton(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "baton", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def waiters(url: str) -> float:
    lines = httpx.get(f"{url}/metrics", timeout=10).text.splitlines()
    return next(float(line.split()[1]) for line in lines if line.startswith("baton_pop_waiters "))


@pytest.mark.parametrize("form", list(FORMS))
def test_every_connection_path_takes_the_url(form: str, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    url, variables = FORMS[form](server)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    env = {**os.environ, "BATON_DATABASE_URL": url, "BATON_LOG_LEVEL": "warning"}

    migrated = baton(["migrate"], env)
    assert migrated.returncode == 0, migrated.stderr
    assert f"PostgreSQL at {server.host}:" in migrated.stdout

    store = Store(url)  # this test process: another writer than the server, and the control engine
    try:
        add_organisation(store, "acme")
        with api_replicas(url, 1, WAITING) as urls, ThreadPoolExecutor(max_workers=1) as pool:
            api = urls[0]  # api_replicas waited for /ready
            pushed = httpx.post(f"{api}/queues/{QUEUE}/push", json={"priority": 1, "data": {"n": 1}}, timeout=30)
            assert pushed.status_code == 201, pushed.text
            popped = httpx.post(f"{api}/queues/{QUEUE}/pop", timeout=30)
            assert popped.status_code == 200 and popped.json()["id"] == pushed.json()["id"], popped.text

            waiting = pool.submit(httpx.post, f"{api}/queues/{QUEUE}/pop", params={"wait": LONG}, timeout=LONG + 30)
            assert wait_until(lambda: waiters(api) == 1, 60), "the pop never waited"
            queued = push(store, QUEUE, data={"n": 2})
            woken = waiting.result(timeout=LONG + 30)
            assert woken.status_code == 200 and woken.json()["id"] == str(queued.task["id"]), woken.text

        with store.control_session() as session:
            claims = leases.claim_schedulers(session, [QUEUE], "test:1#urls", lease_seconds=15)
        assert [claim.scheduler_id for claim in claims] == [QUEUE]
        with store.control_session() as session, store.session() as other:
            timeout = session.execute(text("SHOW statement_timeout")).scalar()
            assert timeout == ("61s" if form == "options and sslmode" else "0")
            # Baton's own server options come on top of the URL's, on both engines.
            idle = other.execute(text("SHOW idle_in_transaction_session_timeout")).scalar()
            assert idle == "5s"
    finally:
        store.dispose()
