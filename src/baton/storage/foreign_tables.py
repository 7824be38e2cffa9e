"""`baton migrate` refuses a PostgreSQL schema that holds another application's tables: where OpenKAT's
scheduler database is shared, mula's `tasks`, `schedules` and `alembic_version` (whose revisions are
numbered as Baton's are) would be taken for Baton's and upgraded."""

from __future__ import annotations

from sqlalchemy import Connection

from baton.core.errors import ConfigurationError
from baton.core.mula import foreign_tables
from baton.storage.mula_import.catalogue import schema_facts


def refuse_foreign_tables(conn: Connection, database: str) -> None:
    """ConfigurationError, saying what to do, when the connection's schema holds tables not Baton's."""
    facts = schema_facts(lambda sql: [tuple(row) for row in conn.exec_driver_sql(sql)], database)
    refusal = foreign_tables(facts)
    if refusal is not None:
        raise ConfigurationError(refusal)
