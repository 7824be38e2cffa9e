"""`baton import-mula` against databases mula built and filled itself, named by BATON_TEST_MULA_DATABASE_URL
(one or several connection strings, separated by spaces; skipped without it). docs/development.md ("Against
mula's own database") says how to make them from OpenKAT's source. Each is compared with the stand-in's
schema at its revision (harness/standins/mula_db.py: columns, types, defaults, enum values, indexes and
constraints), then imported into SQLite and into a PostgreSQL database of its own and checked as the
stand-in is (tests/mula_checks.py). Nothing is written to it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from baton.runtime import build_app
from harness.standins.mula_db import MulaDatabase
from tests.conftest import fresh_postgres_database
from tests.mula_checks import Target, baton_tasks, check_moved, check_openkat_clients, read_mula, run_import, untouched

URLS = os.environ.get("BATON_TEST_MULA_DATABASE_URL", "").split()
pytestmark = pytest.mark.skipif(not URLS, reason="BATON_TEST_MULA_DATABASE_URL names no database mula built")


def schema_of(conninfo: str) -> dict[str, Any]:
    """What of a database's `public` schema matters to import-mula and to mula itself."""
    with psycopg.connect(conninfo) as conn:
        columns = conn.execute(
            """SELECT c.table_name, c.column_name, c.data_type, c.udt_name, c.character_maximum_length,
                      c.is_nullable, c.column_default
               FROM information_schema.columns c WHERE c.table_schema = 'public' ORDER BY 1, 2"""
        ).fetchall()
        labels = conn.execute(
            """SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid
               WHERE t.typname = 'taskstatus' ORDER BY e.enumsortorder"""
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, replace(indexdef, 'public.', '') FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
        ).fetchall()
        constraints = conn.execute(
            """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
               WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2"""
        ).fetchall()
        [(revision,)] = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    return {
        "revision": revision,
        "columns": columns,
        "labels": labels,
        "indexes": indexes,
        "constraints": constraints,
    }


@pytest.fixture(params=URLS)
def real(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_stand_in_has_mulas_own_schema(real: str) -> None:
    found = schema_of(real)
    with fresh_postgres_database("standin") as conninfo:
        MulaDatabase(conninfo, found["revision"]).create()
        assert schema_of(conninfo) == found


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        yield Target(f"sqlite:///{tmp_path / 'baton.db'}")
    else:
        with fresh_postgres_database("baton") as conninfo:
            yield Target(conninfo)


def test_mulas_own_database_is_taken_over(real: str, target: Target) -> None:
    before = untouched(real)
    report = run_import(real, target)
    assert report.outcome == "imported"
    state = read_mula(real)
    store = target.store()
    try:
        check_moved(state, store)
        imported = baton_tasks(store)
        assert run_import(real, target).outcome == "already"
        assert baton_tasks(store) == imported
        with TestClient(build_app(target.settings(), store)) as client:
            check_openkat_clients(state, client)
    finally:
        store.dispose()
    assert untouched(real) == before, "mula's database was written"
