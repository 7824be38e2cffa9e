"""The pop filter language, compiled to SQL (never evaluated in Python after fetching).

A filter is `{"column", "field"?, "operator", "value"}`; a list of them means AND; `{"and": [...]}`,
`{"or": [...]}` and `{"not": [...]}` nest. Comparisons follow SQL: `ne` or `lt` on a field a task
lacks does not match it, while `not` of a filter does select the tasks that filter did not match.
`column` is a task column or `data`; `field` is a path into `data` whose levels are separated by
`__` (`boefje__id` is `data["boefje"]["id"]`). On
PostgreSQL `data` is JSONB and compared as JSON; on SQLite through `json_extract`/`json_each`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    bindparam,
    cast,
    exists,
    false,
    func,
    literal,
    not_,
    or_,
    select,
    true,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import InstrumentedAttribute

from baton.models import Task

OPERATORS = ("eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "like", "ilike", "contains")
OPERATOR_ALIASES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
COLUMNS: dict[str, InstrumentedAttribute[Any]] = {
    "id": Task.id,
    "scheduler_id": Task.scheduler_id,
    "schedule_id": Task.schedule_id,
    "organisation": Task.organisation,
    "type": Task.type,
    "priority": Task.priority,
    "status": Task.status,
    "hash": Task.hash,
    "created_at": Task.created_at,
    "modified_at": Task.modified_at,
}
FIELD_PART = re.compile(r"^[A-Za-z0-9_\-]+$")
MAX_DEPTH = 16


class FilterError(ValueError):
    """A filter that cannot be compiled; the message names the offending part."""


def compile_filters(spec: Any, dialect: str) -> ColumnElement[bool] | None:
    """Turn a filter spec (list, group or single filter) into one SQL condition."""
    if spec is None:
        return None
    return _compile(spec, dialect, depth=0)


def _compile(spec: Any, dialect: str, depth: int) -> ColumnElement[bool]:
    if depth > MAX_DEPTH:
        raise FilterError(f"filters nest deeper than {MAX_DEPTH} levels")
    if isinstance(spec, list):
        return and_(true(), *(_compile(item, dialect, depth + 1) for item in spec))
    if not isinstance(spec, dict):
        raise FilterError(f"a filter must be an object or a list, not {type(spec).__name__}")
    groups = [key for key in ("and", "or", "not") if key in spec]
    if groups:
        if len(spec) != 1:
            raise FilterError(f"a filter group has exactly one key of and/or/not, got {sorted(spec)}")
        key = groups[0]
        members = spec[key]
        if not isinstance(members, list):
            raise FilterError(f"'{key}' takes a list of filters")
        parts = [_compile(item, dialect, depth + 1) for item in members]
        if key == "and":
            return and_(true(), *parts)
        if key == "or":
            return or_(false(), *parts)
        # Null-safe: a task lacking the field does not match the inner filter, so `not` selects it.
        return not_(func.coalesce(and_(true(), *parts), false()))
    return _compile_leaf(spec, dialect)


def _compile_leaf(spec: dict[str, Any], dialect: str) -> ColumnElement[bool]:
    unknown = set(spec) - {"column", "field", "operator", "value"}
    if unknown:
        raise FilterError(f"unknown filter key(s): {', '.join(sorted(unknown))}")
    column = spec.get("column")
    if not isinstance(column, str):
        raise FilterError("filter 'column' is required and must be a string")
    raw_operator = spec.get("operator", "eq")
    operator = OPERATOR_ALIASES.get(raw_operator, raw_operator)
    if operator not in OPERATORS:
        raise FilterError(f"unknown filter operator '{raw_operator}' (known: {', '.join(OPERATORS)})")
    if "value" not in spec:
        raise FilterError(f"filter on column '{column}' has no 'value'")
    value = spec["value"]
    if operator in ("in", "not_in") and not isinstance(value, list):
        raise FilterError(f"operator '{operator}' takes a list value")
    if operator in ("like", "ilike") and not isinstance(value, str):
        raise FilterError(f"operator '{operator}' takes a string value")

    if column == "data":
        path = _field_path(spec.get("field"))
        if dialect == "postgresql":
            return _postgres_data(path, operator, value)
        return _sqlite_data(path, operator, value)
    if column not in COLUMNS:
        raise FilterError(f"unknown filter column '{column}' (known: data, {', '.join(COLUMNS)})")
    if spec.get("field") is not None:
        raise FilterError(f"'field' applies to column 'data' only, not '{column}'")
    return _compile_column(column, operator, value)


def _field_path(field: Any) -> list[str]:
    if field is None or field == "":
        return []
    if not isinstance(field, str):
        raise FilterError("filter 'field' must be a string")
    parts = field.split("__")
    for part in parts:
        if not FIELD_PART.match(part):
            raise FilterError(f"filter field '{field}' has an invalid part '{part}'")
    return parts


def _coerce(column: str, value: Any) -> Any:
    if value is None:
        return None
    try:
        if column == "id":
            return uuid.UUID(str(value))
        if column in ("created_at", "modified_at"):
            return datetime.fromisoformat(str(value))
        if column == "priority" and not isinstance(value, bool):
            return int(value)
    except ValueError as exc:
        raise FilterError(f"value {value!r} does not fit column '{column}'") from exc
    return value


def _comparison(target: Any, operator: str, value: Any, coerce: Callable[[Any], Any]) -> ColumnElement[bool]:
    if operator == "in":
        return target.in_([coerce(item) for item in value])  # type: ignore[no-any-return]
    if operator == "not_in":
        return target.not_in([coerce(item) for item in value])  # type: ignore[no-any-return]
    coerced = coerce(value)
    if coerced is None and operator in ("eq", "ne"):
        return target.is_(None) if operator == "eq" else target.is_not(None)  # type: ignore[no-any-return]
    compare: dict[str, Callable[[Any, Any], ColumnElement[bool]]] = {
        "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b,
        "lt": lambda a, b: a < b,
        "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b,
    }
    return compare[operator](target, coerced)


def _escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _compile_column(column: str, operator: str, value: Any) -> ColumnElement[bool]:
    target = COLUMNS[column]
    if operator == "like":
        return target.like(value)
    if operator == "ilike":
        return target.ilike(value)
    if operator == "contains":
        if not isinstance(value, str):
            raise FilterError(f"operator 'contains' on column '{column}' takes a string value")
        return target.like(f"%{_escape_like(value)}%", escape="\\")
    return _comparison(target, operator, value, lambda item: _coerce(column, item))


# -- PostgreSQL: JSONB -------------------------------------------------------------------------------


def _postgres_data(path: list[str], operator: str, value: Any) -> ColumnElement[bool]:
    document: Any = type_coerce(Task.data, JSONB)  # JSONB operators (#>, #>>, @>), not generic JSON's
    node: Any = document[tuple(path)] if path else document
    if operator in ("like", "ilike"):
        text_value = node.astext if path else cast(Task.data, Text)
        matched: ColumnElement[bool] = text_value.like(value) if operator == "like" else text_value.ilike(value)
        return matched
    if operator == "contains":
        contained: ColumnElement[bool] = node.contains(bindparam(None, value, type_=JSONB))
        return contained

    def as_jsonb(item: Any) -> Any:
        return bindparam(None, item, type_=JSONB)

    if value is None and operator in ("eq", "ne"):
        json_null: ColumnElement[bool] = node.is_(None) | (func.jsonb_typeof(node) == "null")
        return json_null if operator == "eq" else not_(json_null)
    condition = _comparison(node, operator, value, as_jsonb)
    if operator in ("lt", "le", "gt", "ge"):
        # JSONB orders across types (null < string < number < bool); only compare like with like.
        condition = and_(func.jsonb_typeof(node) == func.jsonb_typeof(as_jsonb(value)), condition)
    return condition


# -- SQLite: json_extract / json_each ------------------------------------------------------------------


def _json_path(path: list[str]) -> str:
    return "$" + "".join(f'."{part}"' for part in path)


def _sqlite_scalar(item: Any) -> Any:
    if isinstance(item, dict | list):
        raise FilterError("comparison values on SQLite must be scalars; use 'contains' for objects")
    return item


def _sqlite_data(path: list[str], operator: str, value: Any) -> ColumnElement[bool]:
    json_path = _json_path(path)
    extracted = func.json_extract(Task.data, json_path)
    if operator == "like":
        return _sqlite_case_sensitive_like(extracted, value)
    if operator == "ilike":
        return extracted.ilike(value)
    if operator == "contains":
        return _sqlite_contains(json_path, value)
    if value is None and operator in ("eq", "ne"):
        is_null = extracted.is_(None)
        return is_null if operator == "eq" else not_(is_null)
    condition = _comparison(extracted, operator, value, _sqlite_scalar)
    if operator in ("lt", "le", "gt", "ge"):
        expected = "text" if isinstance(value, str) else ("real", "integer")
        kind = func.json_type(Task.data, json_path)
        condition = and_(kind.in_(expected) if isinstance(expected, tuple) else kind == expected, condition)
    return condition


def _sqlite_case_sensitive_like(text_value: Any, pattern: str) -> ColumnElement[bool]:
    # Translate the LIKE pattern to GLOB, which is case-sensitive in SQLite.
    glob = []
    for char in pattern:
        if char == "%":
            glob.append("*")
        elif char == "_":
            glob.append("?")
        elif char in "*?[":
            glob.append(f"[{char}]")
        else:
            glob.append(char)
    return text_value.op("GLOB")("".join(glob))  # type: ignore[no-any-return]


def _sqlite_contains(json_path: str, value: Any) -> ColumnElement[bool]:
    """JSON containment in the spirit of PostgreSQL's `@>`, for SQLite."""
    if isinstance(value, dict):
        if not value:
            return func.json_type(Task.data, json_path) == "object"
        parts = []
        for key, sub_value in value.items():
            if not FIELD_PART.match(str(key)):
                raise FilterError(f"'contains' key '{key}' is not a valid field name")
            parts.append(_sqlite_contains(f'{json_path}."{key}"', sub_value))
        return and_(func.json_type(Task.data, json_path) == "object", *parts)
    if isinstance(value, list):
        return and_(
            func.json_type(Task.data, json_path) == "array",
            *(_sqlite_array_has(json_path, item) for item in value),
        )
    scalar = func.json_extract(Task.data, json_path) == value
    return or_(scalar, _sqlite_array_has(json_path, value))


def _sqlite_array_has(json_path: str, item: Any) -> ColumnElement[bool]:
    if isinstance(item, dict | list):
        raise FilterError("'contains' on SQLite matches arrays of scalars only")
    each = func.json_each(Task.data, json_path).table_valued("value", "type")
    return and_(
        func.json_type(Task.data, json_path) == "array",
        exists(select(literal(1)).select_from(each).where(each.c.value == item)),
    )
