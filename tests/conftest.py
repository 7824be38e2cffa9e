"""Fixtures: every store-level test runs on SQLite and on a real PostgreSQL server.

`scripts/test.sh` starts PostgreSQL and sets BATON_TEST_POSTGRES_URL. Without it the PostgreSQL
half is skipped locally, but fails under CI so a broken service set-up cannot pass silently.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from hypothesis import settings as hypothesis_settings
from sqlalchemy import text

from baton.core.settings import Settings
from baton.runtime import build_app
from baton.storage.engine import Store
from baton.storage.tables import Base
from baton.storage.urls import libpq_conninfo

POSTGRES_URL = os.environ.get("BATON_TEST_POSTGRES_URL")
_migrated: set[str] = set()

# `ci` (the default): the same cases on every run and every machine, so a green run means the
# same everywhere. `deep` (scripts/fuzz.sh): random seeds, many examples.
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
hypothesis_settings.register_profile("deep", derandomize=False, database=None, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("BATON_HYPOTHESIS_PROFILE", "ci"))


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


def open_store(url: str) -> Store:
    store = Store(url)
    if store.dialect == "postgresql":
        reset_postgres(store)
    else:
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


AMQP_URL = os.environ.get("BATON_TEST_AMQP_URL")


@pytest.fixture
def amqp_url() -> str:
    if not AMQP_URL:
        if os.environ.get("CI"):
            pytest.fail("BATON_TEST_AMQP_URL is not set under CI: run the suite with scripts/test.sh")
        pytest.skip("no RabbitMQ: run the suite with scripts/test.sh")
    return AMQP_URL
