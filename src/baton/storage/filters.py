"""Filters (validated by baton.core.filters) compiled to SQL: JSONB operators on PostgreSQL,
`json_extract`/`json_each` on SQLite. Compiling never fails: the parser already refused anything
either backend could not run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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

from baton.core.filters import ORDERING, PATTERN, SCHEDULE_COLUMNS, TASK_COLUMNS, FilterTree, Group, parse_filters
from baton.storage.tables import Schedule, Task


@dataclass(frozen=True)
class FilterTable:
    """What a filter may name on one table: its columns, and its JSON `data` column."""

    columns: dict[str, InstrumentedAttribute[Any]]
    data: InstrumentedAttribute[Any]


TASKS = FilterTable({name: getattr(Task, name) for name in TASK_COLUMNS}, Task.data)
SCHEDULES = FilterTable({name: getattr(Schedule, name) for name in SCHEDULE_COLUMNS}, Schedule.data)


def compile_filters(spec: Any, dialect: str) -> ColumnElement[bool] | None:
    """Validate a filter spec and turn it into one SQL condition (None: no filter)."""
    if spec is None:
        return None
    return compile_tree(parse_filters(spec), dialect)


def compile_tree(tree: FilterTree, dialect: str, table: FilterTable = TASKS) -> ColumnElement[bool]:
    """SQL for a validated tree, on `table` (tasks by default)."""
    if isinstance(tree, Group):
        parts = [compile_tree(member, dialect, table) for member in tree.members]
        if tree.kind == "and":
            return and_(true(), *parts)
        if tree.kind == "or":
            return or_(false(), *parts)
        # Null-safe: a task lacking the field does not match the inner filter, so `not` selects it.
        return not_(func.coalesce(and_(true(), *parts), false()))
    if tree.column == "data":
        if dialect == "postgresql":
            return _postgres_data(table.data, list(tree.path), tree.operator, tree.value)
        return _sqlite_data(table.data, list(tree.path), tree.operator, tree.value)
    return _compile_column(table.columns[tree.column], tree.operator, tree.value)


def _comparison(target: Any, operator: str, value: Any, convert: Callable[[Any], Any]) -> ColumnElement[bool]:
    if operator == "in":
        return target.in_([convert(item) for item in value])  # type: ignore[no-any-return]
    if operator == "not_in":
        return target.not_in([convert(item) for item in value])  # type: ignore[no-any-return]
    if value is None:  # only eq/ne get here with null (validated)
        return target.is_(None) if operator == "eq" else target.is_not(None)  # type: ignore[no-any-return]
    compare: dict[str, Callable[[Any, Any], ColumnElement[bool]]] = {
        "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b,
        "lt": lambda a, b: a < b,
        "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b,
    }
    return compare[operator](target, convert(value))


def _escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _same(value: Any) -> Any:
    return value


def _compile_column(target: Any, operator: str, value: Any) -> ColumnElement[bool]:
    matched: ColumnElement[bool]
    if operator == "like":
        matched = target.like(value)
    elif operator == "ilike":
        matched = target.ilike(value)
    elif operator == "contains":
        matched = target.like(f"%{_escape_like(value)}%", escape="\\")
    else:
        matched = _comparison(target, operator, value, _same)
    return matched


# -- PostgreSQL: JSONB -------------------------------------------------------------------------------


def _postgres_data(data: Any, path: list[str], operator: str, value: Any) -> ColumnElement[bool]:
    document: Any = type_coerce(data, JSONB)  # JSONB operators (#>, #>>, @>), not generic JSON's
    node: Any = document[tuple(path)] if path else document
    if operator in PATTERN:
        text_value = node.astext if path else cast(data, Text)
        matched: ColumnElement[bool] = text_value.like(value) if operator == "like" else text_value.ilike(value)
        return matched
    if operator == "contains":
        contained: ColumnElement[bool] = node.contains(bindparam(None, value, type_=JSONB))
        return contained

    def as_jsonb(item: Any) -> Any:
        return bindparam(None, item, type_=JSONB)

    if value is None:
        json_null: ColumnElement[bool] = node.is_(None) | (func.jsonb_typeof(node) == "null")
        return json_null if operator == "eq" else not_(json_null)
    condition = _comparison(node, operator, value, as_jsonb)
    if operator in ORDERING:
        # JSONB orders across types (null < string < number < bool); only compare like with like.
        condition = and_(func.jsonb_typeof(node) == func.jsonb_typeof(as_jsonb(value)), condition)
    return condition


# -- SQLite: json_extract / json_each ------------------------------------------------------------------


def _json_path(path: list[str]) -> str:
    return "$" + "".join(f'."{part}"' for part in path)


def _sqlite_data(data: Any, path: list[str], operator: str, value: Any) -> ColumnElement[bool]:
    json_path = _json_path(path)
    extracted = func.json_extract(data, json_path)
    if operator == "like":
        return _sqlite_case_sensitive_like(extracted, value)
    if operator == "ilike":
        return extracted.ilike(value)
    if operator == "contains":
        return _sqlite_contains(data, json_path, value)
    if value is None:
        is_null = extracted.is_(None)
        return is_null if operator == "eq" else not_(is_null)
    condition = _comparison(extracted, operator, value, _same)
    if operator in ORDERING:
        expected = "text" if isinstance(value, str) else ("real", "integer")
        kind = func.json_type(data, json_path)
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


def _sqlite_contains(data: Any, json_path: str, value: Any) -> ColumnElement[bool]:
    """JSON containment in the spirit of PostgreSQL's `@>`, for SQLite (values validated by the parser)."""
    if isinstance(value, dict):
        if not value:
            return func.json_type(data, json_path) == "object"
        parts = [_sqlite_contains(data, f'{json_path}."{key}"', sub_value) for key, sub_value in value.items()]
        return and_(func.json_type(data, json_path) == "object", *parts)
    if isinstance(value, list):
        return and_(
            func.json_type(data, json_path) == "array",
            *(_sqlite_array_has(data, json_path, item) for item in value),
        )
    scalar = func.json_extract(data, json_path) == value
    return or_(scalar, _sqlite_array_has(data, json_path, value))


def _sqlite_array_has(data: Any, json_path: str, item: Any) -> ColumnElement[bool]:
    each = func.json_each(data, json_path).table_valued("value", "type")
    return and_(
        func.json_type(data, json_path) == "array",
        exists(select(literal(1)).select_from(each).where(each.c.value == item)),
    )
