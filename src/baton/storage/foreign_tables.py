"""What a PostgreSQL schema holds of the tables mula and alembic make, read from the catalogue: the
facts `baton.core.mula` judges (mula's at a revision import-mula reads, Baton's own, someone else's).

`baton migrate` asks first (`refuse_foreign_tables`): it refuses a schema that holds another
application's tables. Where OpenKAT's scheduler database is shared, mula's `tasks`, `schedules` and
`alembic_version` (whose revisions are numbered as Baton's are) would be taken for Baton's and upgraded.
`baton import-mula` asks the same of mula's database and of Baton's (`storage/mula_import/`).

The schema is the connection's current one (the first of its search path that exists), so the same
statements serve mula's connection (search path `public`) and Baton's (BATON_DATABASE_SCHEMA). They take
no parameters: either driver runs them as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection

from baton.core.errors import ConfigurationError
from baton.core.mula import MULA_TABLES, STATUS_TYPE, SchemaFacts, foreign_tables

Run = Callable[[str], Sequence[Sequence[Any]]]  # one statement in, its rows out

_NAMES = ", ".join(f"'{name}'" for name in MULA_TABLES)
COLUMNS = f"""
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname IN ({_NAMES})
ORDER BY c.relname, a.attnum
"""
STATUS_LABELS = f"""
SELECT e.enumlabel
FROM pg_catalog.pg_enum e
JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE t.typname = '{STATUS_TYPE}' AND n.nspname = current_schema()
ORDER BY e.enumsortorder
"""
REVISION = "SELECT string_agg(version_num, ',' ORDER BY version_num) FROM alembic_version"
CURRENT_SCHEMA = "SELECT current_schema()"


def schema_facts(run: Run, database: str) -> SchemaFacts:
    """The facts of the connection's current schema; `database` says where, for messages."""
    schema = run(CURRENT_SCHEMA)[0][0]
    tables: dict[str, dict[str, str]] = {}
    for table, column, column_type in run(COLUMNS):
        tables.setdefault(str(table), {})[str(column)] = str(column_type)
    labels = tuple(str(label) for (label,) in run(STATUS_LABELS))
    revision = run(REVISION)[0][0] if "alembic_version" in tables else None
    where = f"schema {schema} of {database}" if schema else database
    return SchemaFacts(where=where, tables=tables, status_labels=labels, revision=revision)


def refuse_foreign_tables(conn: Connection, database: str) -> None:
    """ConfigurationError, saying what to do, when the connection's schema holds tables not Baton's."""
    facts = schema_facts(lambda sql: [tuple(row) for row in conn.exec_driver_sql(sql)], database)
    refusal = foreign_tables(facts)
    if refusal is not None:
        raise ConfigurationError(refusal)
