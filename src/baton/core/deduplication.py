"""Deduplication as OpenKAT's scheduler (mula) does it, as pure rules.

When KATalogus reports other organisations whose settings of a boefje are identical to this one's, and
Octopoes says which of them hold the object, the same scan is the same work: mula makes a twin task for
each of those organisations, all carrying `deduplication_key` = the original task's id, and a boefje pop
whose first task carries a key hands out the queued tasks sharing it together (up to `limit`). OpenKAT's
runner then runs the first and copies its raw files to the others.

Here: which pops do that, what a task's key is, and which organisations get a twin.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from baton.core.jobs import BoefjeJob, job_document, job_hash

KEY = "deduplication_key"
_KEY_TEXT = f'"{KEY}"'
_KEY_BYTES = _KEY_TEXT.encode()
BOEFJE = "boefje"


def pops_together(task_type: str | None, limit: int, enabled: bool) -> bool:
    """Whether a pop may hand out a group: a boefje pop asking for more than one task, with deduplication
    on. A pop of one task is the head of the queue whatever its key (the group's others pop next)."""
    return enabled and limit > 1 and task_type == BOEFJE


def target_type(queue: str | None, task_type: str | None) -> str | None:
    """The type of the tasks a pop targets: the type itself, or the queue id's prefix ("boefje-acme")."""
    if task_type is not None:
        return task_type
    return None if queue is None else queue.partition("-")[0]


def deduplication_key(data: str | bytes | Mapping[str, Any] | None) -> str | None:
    """The task's key, from its `data` as the pop returned it (JSON text, or parsed); None without one.

    JSON text is parsed only when it names the key at all: a task without one costs a substring test.
    Only a string is a key (mula's is a UUID, sent as its string); anything else is none."""
    if data is None:
        return None
    if isinstance(data, str | bytes):
        named = _KEY_TEXT in data if isinstance(data, str) else _KEY_BYTES in data
        if not named:
            return None
        try:
            data = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(data, Mapping):
        return None
    key = data.get(KEY)
    return key if isinstance(key, str) and key else None


def twin_organisations(
    organisation: str,
    duplicates: Iterable[str],
    holders: Mapping[str, int | None],
    boefje_scan_level: int,
) -> list[str]:
    """The organisations that get a twin of `organisation`'s task: those KATalogus reports as sharing the
    boefje's settings (`duplicates`) that hold the object (`holders`: organisation -> the object's scan
    level there, None without a scan profile) at a level the boefje may scan (mula's
    has_boefje_permission_to_run); never the original's own, each once, sorted."""
    twins = set()
    for other in duplicates:
        if other == organisation or other not in holders:
            continue
        level = holders[other]
        if level is not None and level >= boefje_scan_level:
            twins.add(other)
    return sorted(twins)


def twin_document(original: Mapping[str, Any], organisation: str, task_id: uuid.UUID) -> tuple[dict[str, Any], str]:
    """The twin's job (same boefje and object, another organisation, the original's id as its key) as
    task `data`, and its hash."""
    job = BoefjeJob.model_validate(original)
    key = original.get(KEY) or original.get("id")
    twin = BoefjeJob(
        id=task_id,
        boefje=job.boefje,
        input_ooi=job.input_ooi,
        organization=organisation,
        deduplication_key=uuid.UUID(str(key)),
    )
    return job_document(twin), job_hash(twin)
