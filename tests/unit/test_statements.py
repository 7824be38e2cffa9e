"""The hot statements as the databases receive them, guarded by snapshots: a change to the pop is a
change to a reviewed file (regenerate with BATON_UPDATE_SNAPSHOTS=1), and the documentation and benchmarks
quote `pop_sql()`, never a hand copy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from baton.storage.queues import pops
from baton.storage.tables import IS_QUEUED, QUEUED

SNAPSHOTS = Path(__file__).parent / "snapshots"
CASES = {
    "pop_queue.postgresql.sql": lambda: pops.pop_sql("postgresql"),
    "pop_type_fair.postgresql.sql": lambda: pops.pop_sql("postgresql", by_type=True),
    "pop_queue.sqlite.sql": lambda: pops.pop_sql("sqlite"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pop_statement_matches_its_snapshot(name: str) -> None:
    sql = CASES[name]() + "\n"
    path = SNAPSHOTS / name
    if os.environ.get("BATON_UPDATE_SNAPSHOTS"):
        path.write_text(sql)
    assert sql == path.read_text(), f"the pop statement changed; review and regenerate {path}"


def test_the_pop_keeps_its_guarantees_in_sql() -> None:
    sql = pops.pop_sql("postgresql")
    assert "AS MATERIALIZED" in sql, "as a plain IN (subquery) PostgreSQL may dispatch more than `limit`"
    assert "FOR UPDATE SKIP LOCKED" in sql
    assert sql.count("tasks.status = 'queued'") == 2, "the claimed rows are checked again by the UPDATE"


def test_queries_use_the_same_predicate_as_the_partial_indexes() -> None:
    compiled = str(IS_QUEUED.compile(compile_kwargs={"literal_binds": True}))
    assert compiled == f"tasks.{QUEUED}"


def test_a_fair_pop_orders_by_the_tag_and_a_strict_one_does_not() -> None:
    assert "ORDER BY tasks.priority, tasks.fair_key, tasks.seq" in pops.pop_sql("postgresql", by_type=True)
    strict = pops.pop_sql("postgresql", by_type=True, fair=False)
    assert "ORDER BY tasks.priority, tasks.seq" in strict and "fair_key, tasks.seq" not in strict


def test_the_documentation_quotes_the_real_pop_statement() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "queues.md"
    quoted = f"```sql\n{pops.pop_sql('postgresql')}\n```"
    assert quoted in page.read_text(), f"{page.name}'s pop SQL is out of date"
