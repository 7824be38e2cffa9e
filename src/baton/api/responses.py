"""Task answers written straight from the database row: no model validation, `data` passed through
as the JSON text the database returned (orjson.Fragment), timestamps as RFC 3339 with `Z`, exactly
as the documented models (schemas.TaskOut) would render them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from fastapi.responses import Response

from baton.core.queueing import TASK_FIELDS

OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def task_document(record: Mapping[str, Any]) -> dict[str, Any]:
    """Baton's task shape (`/queues/...`): `scheduler_id` is the queue id; `data` left as raw JSON text."""
    document = {key: record[key] for key in TASK_FIELDS}
    document["queue"] = record["scheduler_id"]
    if isinstance(document["data"], str):
        document["data"] = orjson.Fragment(document["data"])
    return document


def openkat_task_document(record: Mapping[str, Any]) -> dict[str, Any]:
    """OpenKAT's task shape (`/schedulers/...`, `/tasks/...`): `scheduler_id` is the scheduler OpenKAT
    knows (the task type: boefje, normalizer, report), the organisation a field of its own; Baton's
    queue id is in `queue`."""
    document = task_document(record)
    document["scheduler_id"] = record["type"]
    return document


def json_response(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content, option=OPTIONS), status_code, headers, media_type="application/json")


def tasks_response(
    records: Iterable[Mapping[str, Any]], shape: Callable[[Mapping[str, Any]], dict[str, Any]] = openkat_task_document
) -> Response:
    return json_response({"results": [shape(record) for record in records]})
