"""Fixtures: every store-level test runs on SQLite and on a real PostgreSQL server.

`scripts/test.sh` starts PostgreSQL and sets BATON_TEST_POSTGRES_URL. Without it the PostgreSQL
half is skipped locally, but fails under CI so a broken service set-up cannot pass silently.

The suite runs in parallel (pytest-xdist, `scripts/test.sh` starts several workers). Each worker has
a PostgreSQL database of its own (made in `pytest_configure`, dropped at its end) and, once a test of
it asks for `amqp_url`, a RabbitMQ virtual host of its own; both are exported as BATON_TEST_POSTGRES_URL
and BATON_TEST_AMQP_URL, so processes a test starts use them too. A test that stops or restarts a
server takes a private one (`private_rabbitmq`; harness.servers.ThrowawayPostgres).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from hypothesis import settings as hypothesis_settings
from sqlalchemy import make_url, text

from baton.core.settings import Settings
from baton.runtime import build_app
from baton.storage.engine import Store
from baton.storage.tables import Base
from baton.storage.urls import libpq_conninfo
from harness.servers import ThrowawayPostgres, ThrowawayRabbitMQ, add_rabbitmq_vhost, rabbitmqctl

# Under pytest-xdist each worker replaces these with its own database and virtual host (below).
POSTGRES_URL = os.environ.get("BATON_TEST_POSTGRES_URL")
AMQP_URL = os.environ.get("BATON_TEST_AMQP_URL")
_migrated: set[str] = set()

# `ci` (the default): the same cases on every run and every machine, so a green run means the
# same everywhere. `deep` (scripts/fuzz.sh): random seeds, many examples. Neither has a deadline per
# example: a timing threshold, which a loaded machine (the suite runs on several workers) trips.
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
hypothesis_settings.register_profile("deep", derandomize=False, database=None, print_blob=True, deadline=None)
hypothesis_settings.load_profile(os.environ.get("BATON_HYPOTHESIS_PROFILE", "ci"))


def xdist_worker(config: pytest.Config) -> str | None:
    """This process's pytest-xdist worker id with the run's id (`gw0_1a2b3c`), None when not a worker.
    Read from the config, not the environment: a pytest a test starts inherits PYTEST_XDIST_WORKER."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    return f"{workerinput['workerid']}_{workerinput['testrunuid'][:6]}"


_SHARED_POSTGRES_URL = POSTGRES_URL


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker's own PostgreSQL database, so that workers never see each other's rows,
    NOTIFYs or advisory locks."""
    global POSTGRES_URL
    worker = xdist_worker(config)
    if worker is None or not _SHARED_POSTGRES_URL:
        return
    shared = make_url(_SHARED_POSTGRES_URL)
    with psycopg.connect(libpq_conninfo(_SHARED_POSTGRES_URL), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{shared.database}_{worker}"')
    POSTGRES_URL = shared.set(database=f"{shared.database}_{worker}").render_as_string(hide_password=False)
    os.environ["BATON_TEST_POSTGRES_URL"] = POSTGRES_URL


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drops the worker's database. Here, not in pytest_unconfigure: xdist may end a worker once its
    session has finished."""
    if _sqlite_template is not None:
        shutil.rmtree(_sqlite_template.parent, ignore_errors=True)
    worker = xdist_worker(session.config)
    if worker is None or not _SHARED_POSTGRES_URL:
        return
    name = f"{make_url(_SHARED_POSTGRES_URL).database}_{worker}"
    with psycopg.connect(libpq_conninfo(_SHARED_POSTGRES_URL), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Under pytest-xdist, the order tests are handed to workers in: the longest first, so that no worker
# is still in a minute-long system test when the others have run out of work. Directories, roughly
# from slow to fast; within one, the collection's order.
LONGEST_FIRST = ("tests/system/", "tests/integration/", "tests/unit/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if xdist_worker(config) is None:
        return  # serially the order changes nothing but how soon a failure shows: unit tests first

    def rank(item: pytest.Item) -> int:
        path = item.nodeid
        return next((n for n, prefix in enumerate(LONGEST_FIRST) if path.startswith(prefix)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: each worker collects the same order


@contextmanager
def fresh_postgres_database(prefix: str) -> Iterator[str]:
    """A new, empty database on the test server, dropped afterwards; yields its libpq connection
    string (which Baton takes as a database URL too)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = libpq_conninfo(postgres_url())
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield libpq_conninfo(postgres_url(), dbname=name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_url() -> str:
    if not POSTGRES_URL:
        if os.environ.get("CI"):
            pytest.fail("BATON_TEST_POSTGRES_URL is not set under CI: run the suite with scripts/test.sh")
        pytest.skip("no PostgreSQL: run the suite with scripts/test.sh")
    return POSTGRES_URL


def reset_postgres(store: Store) -> None:
    if store.url not in _migrated:
        store.migrate()
        _migrated.add(store.url)
    tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
    with store.engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'baton.db'}"
    return postgres_url()


@pytest.fixture
def pg_url() -> str:
    return postgres_url()


_sqlite_template: Path | None = None


def migrated_sqlite(path: Path) -> None:
    """A migrated SQLite database at `path`: a copy of one this process migrated once. Alembic's run
    takes longer than most tests on SQLite take themselves, and the suite opens hundreds."""
    global _sqlite_template
    if _sqlite_template is None:
        template = Path(tempfile.mkdtemp(prefix="baton-sqlite-template-")) / "baton.db"
        store = Store(f"sqlite:///{template}")
        store.migrate()
        store.dispose()  # the last connection closed: the write-ahead log is in the file, and gone
        _sqlite_template = template
    shutil.copyfile(_sqlite_template, path)


def open_store(url: str) -> Store:
    """A store on `url`, migrated and empty: PostgreSQL's tables truncated, a new SQLite file copied
    from a migrated one."""
    path = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    copied = path is not None and path.name != ":memory:" and not path.exists()
    if copied and path is not None:
        migrated_sqlite(path)
    store = Store(url)
    if store.dialect == "postgresql":
        reset_postgres(store)
    elif not copied:
        store.migrate()
    return store


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = open_store(database_url)
    yield store
    store.dispose()


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    store = open_store(pg_url)
    yield store
    store.dispose()


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, queue_maxsize=50)


@pytest.fixture
def client(settings: Settings, store: Store) -> Iterator[TestClient]:
    with TestClient(build_app(settings, store)) as test_client:
        yield test_client


def shared_amqp_url() -> str:
    if not AMQP_URL:
        if os.environ.get("CI"):
            pytest.fail("BATON_TEST_AMQP_URL is not set under CI: run the suite with scripts/test.sh")
        pytest.skip("no RabbitMQ: run the suite with scripts/test.sh")
    return AMQP_URL


@pytest.fixture(scope="session")
def amqp_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test broker; under pytest-xdist a virtual host of this worker's own (OpenKAT's queue names
    are fixed: two workers on one virtual host would take each other's messages). Made when a test of
    the worker first asks for it, deleted at the worker's end. A test that stops the broker takes
    `private_rabbitmq` instead."""
    global AMQP_URL
    shared = shared_amqp_url()
    worker = xdist_worker(request.config)
    if worker is None:
        yield shared
        return
    vhost = f"baton-{worker}"
    add_rabbitmq_vhost(vhost)
    AMQP_URL = os.environ["BATON_TEST_AMQP_URL"] = f"{shared.rsplit('/', 1)[0]}/{vhost}"
    try:
        yield AMQP_URL
    finally:
        AMQP_URL = os.environ["BATON_TEST_AMQP_URL"] = shared
        rabbitmqctl("delete_vhost", vhost)


@pytest.fixture
def private_postgres() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL cluster of the test's own, for a test that stops or restarts the server."""
    if not os.environ.get("BATON_TEST_PG_BIN"):
        if os.environ.get("CI"):
            pytest.fail("BATON_TEST_PG_BIN is not set under CI: run the suite with scripts/test.sh")
        pytest.skip("no PostgreSQL binaries: run the suite with scripts/test.sh")
    # Not under tmp_path: the server runs as the postgres user, who cannot enter pytest's 0700 dirs.
    cluster = ThrowawayPostgres(Path(tempfile.mkdtemp(prefix="baton-private-postgres-")))
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster.stop()
        shutil.rmtree(cluster.directory, ignore_errors=True)


@pytest.fixture
def private_rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrowawayRabbitMQ]:
    """A RabbitMQ node of the test's own, for a test that stops or restarts the broker (the shared
    one serves the other workers meanwhile)."""
    shared_amqp_url()  # skips (or fails under CI) without RabbitMQ, as the shared broker's tests do
    broker = ThrowawayRabbitMQ(tmp_path_factory.mktemp("rabbitmq"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
