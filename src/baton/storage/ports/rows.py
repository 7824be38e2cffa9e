"""An ORM row as one of core's views: the view's fields read off the row."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

View = TypeVar("View")


def view_of(kind: type[View], row: Any) -> View:
    fields = dataclasses.fields(kind)  # type: ignore[arg-type]
    return kind(**{field.name: getattr(row, field.name) for field in fields})
