"""The schema check without alembic (what a scheduler process and `/ready` run) agrees with alembic's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from baton.storage.engine import Store, alembic_config, applied_revision, head_revision
from tests.conftest import fresh_postgres_database, postgres_url


def test_head_revision_is_alembics_head() -> None:
    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


@contextmanager
def empty_database(backend: str, tmp_path: Path) -> Iterator[Store]:
    if backend == "sqlite":
        store = Store(f"sqlite:///{tmp_path / 'empty.db'}")
        yield store
        store.dispose()
        return
    postgres_url()  # skips without a server
    with fresh_postgres_database("schema_check") as url:
        store = Store(url)
        try:
            yield store
        finally:
            store.dispose()


def alembics_revision(store: Store) -> str | None:
    with store.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def our_revision(store: Store) -> str | None:
    with store.engine.connect() as conn:
        return applied_revision(conn)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_applied_revision_reads_what_alembic_reads(backend: str, tmp_path: Path) -> None:
    with empty_database(backend, tmp_path) as store:
        assert our_revision(store) is None and alembics_revision(store) is None
        assert not store.migrations_current()

        store.migrate()
        assert our_revision(store) == alembics_revision(store) == head_revision()
        assert store.migrations_current()

        with store.engine.begin() as conn:  # a database one migration behind the code
            conn.execute(text("UPDATE alembic_version SET version_num = '0001'"))
        assert our_revision(store) == alembics_revision(store) == "0001"
        assert not store.migrations_current()

        with store.engine.begin() as conn:  # the table exists but holds no revision
            conn.execute(text("DELETE FROM alembic_version"))
        assert our_revision(store) is None and alembics_revision(store) is None
        assert not store.migrations_current()
