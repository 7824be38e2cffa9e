"""The filter language's parser: every malformed filter is refused with a message naming where it is
and what would be accepted, before any SQL exists (the same rules on both backends)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from baton.core.errors import FilterError
from baton.core.filters import parse_filters

NESTED_TOO_DEEP: Any = {"column": "status", "value": "queued"}
for _ in range(18):
    NESTED_TOO_DEEP = [NESTED_TOO_DEEP]

MALFORMED_FILTERS: list[tuple[Any, str]] = [
    # The three that crashed the server (issue #12), then their relatives.
    ({"column": "status", "value": [], "operator": "!="}, "not a list"),
    ({"column": "status", "value": None, "operator": "<"}, "not null"),
    ([{"column": "priority", "value": {"a": 1}, "operator": "eq"}], "integer"),
    ([{"column": "priority", "value": "1", "operator": "eq"}], "integer"),
    ([{"column": "priority", "value": 2**70, "operator": "eq"}], "64-bit"),
    ([{"column": "priority", "value": 1.5, "operator": "lt"}], "integer"),
    ([{"column": "id", "value": "x", "operator": "eq"}], "UUID"),
    ([{"column": "id", "value": "8f5c1b8e-4e7c-4b7a-9a57-0f5f6c1d2e3f", "operator": "lt"}], "cannot be ordered"),
    ([{"column": "created_at", "value": "yesterday", "operator": "gt"}], "ISO 8601"),
    ([{"column": "created_at", "value": 5, "operator": "gt"}], "string"),
    # Year 0 and year 10000 in UTC: binding either overflowed Python's datetime (issue #44).
    ([{"column": "created_at", "value": "0001-01-01T00:00:00+00:01", "operator": "gt"}], "out of range"),
    ([{"column": "modified_at", "value": "9999-12-31T23:59:59-00:01", "operator": "lt"}], "out of range"),
    ([{"column": "created_at", "value": ["2026-01-01", "0001-01-01"], "operator": "in"}], "value[1]: '0001-01-01'"),
    ([{"column": "status", "value": 5, "operator": "like"}], "string"),
    ([{"column": "priority", "value": "1%", "operator": "like"}], "text columns"),
    ([{"column": "status", "value": "a\x00b", "operator": "eq"}], "NUL"),
    ([{"column": "status", "value": ["a", None], "operator": "in"}], "null"),
    ([{"column": "status", "value": "queued", "operator": "in"}], "takes a list"),
    ([{"column": "data", "field": "a", "value": [1], "operator": "eq"}], "use 'in'"),
    ([{"column": "data", "field": "a", "value": {"b": 1}, "operator": "eq"}], "contains"),
    ([{"column": "data", "field": "a", "value": True, "operator": "gt"}], "numbers or strings"),
    ([{"column": "data", "field": "a", "value": [[1]], "operator": "contains"}], "a list in 'contains'"),
    ([{"column": "data", "field": "a", "value": {"b c": 1}, "operator": "contains"}], "field name"),
    ([{"column": "data", "field": "a", "value": 1, "operator": "approximately"}], "unknown operator"),
    ([{"column": "data", "field": "a", "value": 1, "operator": 7}], "unknown operator"),
    ([{"column": "colour", "value": 1}], "unknown column"),
    ([{"column": "status", "field": "x", "value": "queued"}], "'data' only"),
    ([{"column": "data", "field": "a b", "value": 1}], "invalid part"),
    ([{"column": "data", "field": "a"}], "no 'value'"),
    ([{"column": "data", "field": "a", "value": 1, "colour": "red"}], "unknown key"),
    ({"and": [], "or": []}, "exactly one key"),
    ({"or": {"column": "status", "value": "queued"}}, "takes a list"),
    ("nonsense", "object or a list"),
    (NESTED_TOO_DEEP, "deeper"),
]


@pytest.mark.parametrize(("spec", "named"), MALFORMED_FILTERS)
def test_malformed_filters_are_refused_before_any_sql(spec: Any, named: str) -> None:
    with pytest.raises(FilterError, match=re.escape(named)):
        parse_filters(spec)
