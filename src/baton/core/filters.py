"""The pop filter language: parsed and validated here; compiled to SQL by baton.storage.filters.

A filter is `{"column", "field"?, "operator", "value"}`; a list of them means AND; `{"and": [...]}`,
`{"or": [...]}` and `{"not": [...]}` nest. Comparisons follow SQL: `ne` or `lt` on a field a task
lacks does not match it, while `not` of a filter does select the tasks that filter did not match.
`column` is a task column or `data`; `field` is a path into `data` whose levels are separated by
`__` (`boefje__id` is `data["boefje"]["id"]`). On PostgreSQL `data` is JSONB and compared as JSON;
on SQLite through `json_extract`/`json_each`.

`parse_filters` checks every value against what its operator and column accept, with the same
rules on both backends, so that compiling can never fail: a bad filter is a 422 naming the filter,
never a database error.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from baton.core.errors import FilterError
from baton.core.moments import RANGE, within_range

OPERATORS = ("eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "like", "ilike", "contains")
OPERATOR_ALIASES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
ORDERING = frozenset({"lt", "le", "gt", "ge"})
MEMBERSHIP = frozenset({"in", "not_in"})
PATTERN = frozenset({"like", "ilike"})

ColumnKind = Literal["text", "integer", "uuid", "timestamp", "boolean"]
Columns = dict[str, "ColumnKind"]
COLUMN_KINDS: Columns = {
    "id": "uuid",
    "scheduler_id": "text",
    "schedule_id": "text",
    "organisation": "text",
    "type": "text",
    "priority": "integer",
    "status": "text",
    "hash": "text",
    "created_at": "timestamp",
    "modified_at": "timestamp",
}
TASK_COLUMNS = COLUMN_KINDS
SCHEDULE_COLUMNS: Columns = {
    "id": "uuid",
    "scheduler_id": "text",
    "organisation": "text",
    "hash": "text",
    "enabled": "boolean",
    "schedule": "text",
    "deadline_at": "timestamp",
    "created_at": "timestamp",
    "modified_at": "timestamp",
}
FIELD_PART = re.compile(r"^[A-Za-z0-9_\-]+$")
MAX_DEPTH = 16
MAX_CONDITIONS = 100
MAX_LIST_ITEMS = 1000
MAX_TEXT = 1024
INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Condition:
    column: str
    path: tuple[str, ...]
    operator: str
    value: Any  # already converted to what the column holds (uuid, datetime, int, str, JSON)


@dataclass(frozen=True)
class Group:
    kind: Literal["and", "or", "not"]
    members: tuple[Condition | Group, ...]


FilterTree = Condition | Group


# -- parsing and validation ---------------------------------------------------------------------------


def parse_filters(spec: Any, where: str = "filters", columns: Columns = TASK_COLUMNS) -> FilterTree:
    """A filter spec (list, group or single filter) as a validated tree; FilterError if it is not one.

    `columns`: the columns the filter may name and what each holds (tasks by default; schedules for
    OpenKAT's schedule search); `data` is always allowed, with a `field` path into it."""
    counter = [0]
    return _parse(spec, where, 0, counter, columns)


def _parse(spec: Any, where: str, depth: int, counter: list[int], columns: Columns) -> FilterTree:
    if depth > MAX_DEPTH:
        raise FilterError(f"{where}: filters nest deeper than {MAX_DEPTH} levels")
    if isinstance(spec, list):
        return Group(
            "and", tuple(_parse(item, f"{where}[{i}]", depth + 1, counter, columns) for i, item in enumerate(spec))
        )
    if not isinstance(spec, dict):
        raise FilterError(f"{where}: a filter is an object or a list of filters, not {_json_type(spec)}")
    groups = [key for key in ("and", "or", "not") if key in spec]
    if groups:
        if len(spec) != 1:
            raise FilterError(f"{where}: a filter group has exactly one key, 'and', 'or' or 'not'; got {sorted(spec)}")
        key = groups[0]
        members = spec[key]
        if not isinstance(members, list):
            raise FilterError(f"{where}.{key}: takes a list of filters, not {_json_type(members)}")
        parsed = tuple(
            _parse(item, f"{where}.{key}[{i}]", depth + 1, counter, columns) for i, item in enumerate(members)
        )
        return Group(key, parsed)  # type: ignore[arg-type]
    counter[0] += 1
    if counter[0] > MAX_CONDITIONS:
        raise FilterError(f"{where}: more than {MAX_CONDITIONS} conditions in one filter")
    return _parse_condition(spec, where, columns)


def _parse_condition(spec: dict[str, Any], where: str, columns: Columns) -> Condition:
    unknown = set(spec) - {"column", "field", "operator", "value"}
    if unknown:
        raise FilterError(
            f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; a filter has column, "
            "field, operator, value (or is a group: and, or, not)"
        )
    column = spec.get("column")
    if not isinstance(column, str) or (column != "data" and column not in columns):
        raise FilterError(f"{where}.column: unknown column {column!r}; one of data, {', '.join(columns)}")
    raw_operator = spec.get("operator", "eq")
    operator = OPERATOR_ALIASES.get(raw_operator, raw_operator) if isinstance(raw_operator, str) else None
    if operator not in OPERATORS:
        raise FilterError(
            f"{where}.operator: unknown operator {raw_operator!r}; one of {', '.join(OPERATORS)} "
            f"(or {', '.join(OPERATOR_ALIASES)})"
        )
    if "value" not in spec:
        raise FilterError(f"{where}: filter on column '{column}' has no 'value'")
    assert isinstance(column, str) and operator is not None
    if column == "data":
        path = _field_path(spec.get("field"), where)
        return Condition(column, path, operator, _data_value(operator, spec["value"], f"{where}.value"))
    if spec.get("field") is not None:
        raise FilterError(f"{where}.field: applies to column 'data' only, not '{column}'")
    kind = columns[column]
    return Condition(column, (), operator, _column_value(column, kind, operator, spec["value"], f"{where}.value"))


def _field_path(field: Any, where: str) -> tuple[str, ...]:
    if field is None or field == "":
        return ()
    if not isinstance(field, str) or len(field) > 512:
        raise FilterError(f"{where}.field: a path into data such as 'boefje__id' (at most 512 characters)")
    parts = field.split("__")
    for part in parts:
        if not FIELD_PART.match(part):
            raise FilterError(f"{where}.field: '{field}' has an invalid part '{part}' (letters, digits, '_', '-')")
    return tuple(parts)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _text(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise FilterError(f"{where}: {what} takes a string, not {_json_type(value)}")
    if len(value) > MAX_TEXT:
        raise FilterError(f"{where}: longer than {MAX_TEXT} characters")
    if "\x00" in value:
        raise FilterError(f"{where}: contains a NUL character")
    return value


def _integer(value: Any, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FilterError(f"{where}: {what} takes an integer, not {_json_type(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise FilterError(f"{where}: {what} takes an integer, not {value!r}")
        value = int(value)
    if not INT64[0] <= value <= INT64[1]:
        raise FilterError(f"{where}: {value} is outside the 64-bit integer range")
    return int(value)


def _scalar(value: Any, where: str, what: str, allow_null: bool = True) -> Any:
    """A JSON scalar usable on both backends: string, finite number in 64-bit range, boolean, null."""
    if value is None:
        if not allow_null:
            raise FilterError(f"{where}: {what} does not take null")
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return _integer(value, where, what)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FilterError(f"{where}: {what} takes a finite number")
        return value
    if isinstance(value, str):
        return _text(value, where, what)
    raise FilterError(f"{where}: {what} takes a string, number, boolean or null, not {_json_type(value)}")


def _column_scalar(column: str, kind: ColumnKind, value: Any, where: str, what: str) -> Any:
    if kind == "integer":
        return _integer(value, where, what)
    if kind == "boolean":
        if not isinstance(value, bool):
            raise FilterError(f"{where}: {what} takes true or false, not {_json_type(value)}")
        return value
    text = _text(value, where, what)
    if kind == "uuid":
        try:
            return uuid.UUID(text)
        except ValueError as exc:
            raise FilterError(f"{where}: column '{column}' holds UUIDs; {text!r} is not one") from exc
    if kind == "timestamp":
        try:
            moment = datetime.fromisoformat(text)
        except ValueError as exc:
            raise FilterError(f"{where}: column '{column}' holds ISO 8601 timestamps; {text!r} is not one") from exc
        if not within_range(moment):
            raise FilterError(f"{where}: {text!r} is out of range: a moment {RANGE}")
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return text


def _as_list(value: Any, where: str, operator: str) -> list[Any]:
    if not isinstance(value, list):
        raise FilterError(f"{where}: operator '{operator}' takes a list, not {_json_type(value)}")
    if len(value) > MAX_LIST_ITEMS:
        raise FilterError(f"{where}: operator '{operator}' takes at most {MAX_LIST_ITEMS} values")
    return value


def _column_value(column: str, kind: ColumnKind, operator: str, value: Any, where: str) -> Any:
    what = f"operator '{operator}' on column '{column}'"
    if operator in MEMBERSHIP:
        items = _as_list(value, where, operator)
        return [_column_scalar(column, kind, item, f"{where}[{i}]", what) for i, item in enumerate(items)]
    if isinstance(value, list):
        raise FilterError(f"{where}: {what} takes a single value, not a list (use 'in' for several)")
    if operator in ("eq", "ne"):
        return None if value is None else _column_scalar(column, kind, value, where, what)
    if operator in ORDERING:
        if kind in ("uuid", "boolean"):
            raise FilterError(f"{where}: column '{column}' cannot be ordered; use eq, ne, in or not_in")
        if value is None:
            raise FilterError(f"{where}: {what} compares with a value, not null")
        return _column_scalar(column, kind, value, where, what)
    # like, ilike, contains: text columns only
    if kind != "text":
        raise FilterError(f"{where}: operator '{operator}' applies to text columns and data, not '{column}'")
    return _text(value, where, what)


def _data_value(operator: str, value: Any, where: str) -> Any:
    what = f"operator '{operator}' on data"
    if operator in MEMBERSHIP:
        items = _as_list(value, where, operator)
        return [_scalar(item, f"{where}[{i}]", what, allow_null=False) for i, item in enumerate(items)]
    if operator == "contains":
        return _containable(value, where, 0)
    if isinstance(value, list | dict):
        hint = "use 'in' for several values" if isinstance(value, list) else "use 'contains' to match an object"
        raise FilterError(f"{where}: {what} takes a single value, not {_json_type(value)} ({hint})")
    if operator in ("eq", "ne"):
        return _scalar(value, where, what)
    if operator in ORDERING:
        if value is None or isinstance(value, bool):
            raise FilterError(f"{where}: {what} compares numbers or strings, not {_json_type(value)}")
        return _scalar(value, where, what)
    return _text(value, where, what)  # like, ilike


def _containable(value: Any, where: str, depth: int) -> Any:
    """`contains` matches a scalar, a list of scalars, or an object whose values follow these rules."""
    if depth > MAX_DEPTH:
        raise FilterError(f"{where}: nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        checked = {}
        for key, sub_value in value.items():
            if not isinstance(key, str) or not FIELD_PART.match(key):
                raise FilterError(f"{where}: key {key!r} is not a field name (letters, digits, '_', '-')")
            checked[key] = _containable(sub_value, f"{where}.{key}", depth + 1)
        return checked
    if isinstance(value, list):
        items = _as_list(value, where, "contains")
        return [
            _scalar(item, f"{where}[{i}]", "a list in 'contains'", allow_null=False) for i, item in enumerate(items)
        ]
    return _scalar(value, where, "operator 'contains' on data", allow_null=False)
