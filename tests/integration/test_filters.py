"""The filter language compiled to SQL, on SQLite (json_extract) and PostgreSQL (JSONB)."""

from __future__ import annotations

from typing import Any

import pytest

from baton.core.errors import FilterError
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.filters import compile_filters
from tests import queue_api as queue

TASKS: list[dict[str, Any]] = [
    {
        "boefje": {"id": "dns", "oci_image": "ghcr.io/x/dns:1"},
        "size": 10,
        "tags": ["a", "b"],
        "flag": True,
        "name": "Alpha",
    },
    {
        "boefje": {"id": "nmap", "oci_image": "ghcr.io/x/nmap:2"},
        "size": 20,
        "tags": ["b"],
        "flag": False,
        "name": "beta",
    },
    {"boefje": {"id": "ssl", "oci_image": None}, "size": 30, "tags": [], "name": "Gamma"},
    {"normalizer": {"id": "n1"}, "size": 2.5, "name": "alphabet"},
]


@pytest.fixture
def filled(store: Store) -> Store:
    with store.session() as session:
        create_organisation(session, "acme", "Acme", maxsize=0)
    for priority, data in enumerate(TASKS):
        with store.session() as session:
            queue.push(session, "boefje-acme", priority=priority, data=data, task_hash=f"h{priority}")
    return store


def matching(store: Store, spec: Any) -> list[int]:
    """Indexes (priorities) of the tasks the filter selects, read through a real pop."""
    with store.session() as session:
        condition = compile_filters(spec, store.dialect)
        popped = queue.pop(session, scheduler_id="boefje-acme", limit=100, condition=condition)
        result = sorted(task.priority for task in popped)
        session.rollback()  # leave the queue as it was for the next case
    return result


def data(field: str, operator: str, value: Any) -> dict[str, Any]:
    return {"column": "data", "field": field, "operator": operator, "value": value}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ([data("boefje__id", "eq", "dns")], [0]),
        ([data("boefje__id", "==", "dns")], [0]),
        ([data("boefje__id", "ne", "dns")], [1, 2]),
        ([data("size", "lt", 20)], [0, 3]),
        ([data("size", "le", 20)], [0, 1, 3]),
        ([data("size", "gt", 20)], [2]),
        ([data("size", "ge", 20)], [1, 2]),
        ([data("boefje__id", "in", ["dns", "ssl", "zzz"])], [0, 2]),
        ([data("boefje__id", "not_in", ["dns"])], [1, 2]),
        ([data("name", "like", "alpha%")], [3]),
        ([data("name", "ilike", "alpha%")], [0, 3]),
        ([data("tags", "contains", "b")], [0, 1]),
        ([data("tags", "contains", ["a", "b"])], [0]),
        ([data("boefje", "contains", {"id": "nmap"})], [1]),
        ([data("flag", "eq", True)], [0]),
        ([data("boefje__oci_image", "eq", None)], [2, 3]),
        ([data("boefje__oci_image", "in", ["ghcr.io/x/dns:1", "ghcr.io/x/nmap:2"])], [0, 1]),
        ([{"column": "priority", "operator": "ge", "value": 2}], [2, 3]),
        ([{"column": "hash", "operator": "in", "value": ["h1", "h3"]}], [1, 3]),
        ([{"column": "hash", "operator": "contains", "value": "3"}], [3]),
        ([{"column": "organisation", "operator": "eq", "value": "acme"}], [0, 1, 2, 3]),
        ([data("size", "gt", 5), {"column": "priority", "operator": "lt", "value": 2}], [0, 1]),
        ({"or": [data("boefje__id", "eq", "dns"), data("normalizer__id", "eq", "n1")]}, [0, 3]),
        ({"not": [data("boefje__id", "eq", "dns")]}, [1, 2, 3]),
        (
            {"and": [{"or": [data("size", "lt", 15), data("size", "gt", 25)]}, {"not": [data("name", "eq", "Gamma")]}]},
            [0, 3],
        ),
        ([], [0, 1, 2, 3]),
    ],
)
def test_operator(filled: Store, spec: Any, expected: list[int]) -> None:
    assert matching(filled, spec) == expected


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ([{"column": "colour", "operator": "eq", "value": 1}], "colour"),
        ([data("x", "approximately", 1)], "approximately"),
        ([data("x", "in", "not-a-list")], "list"),
        ([data("a__b c", "eq", 1)], "b c"),
        ([{"column": "data", "field": "x", "operator": "eq"}], "value"),
        ({"xor": []}, "xor"),
        ({"and": [], "or": []}, "exactly one"),
        ([{"column": "id", "operator": "eq", "value": "not-a-uuid"}], "id"),
        ("nonsense", "str"),
    ],
)
def test_bad_filters_name_the_problem(spec: Any, named: str) -> None:
    with pytest.raises(FilterError, match=named):
        compile_filters(spec, "postgresql")
    with pytest.raises(FilterError, match=named):
        compile_filters(spec, "sqlite")
