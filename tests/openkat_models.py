"""OpenKAT's clients' models, written from OpenKAT's published field lists (boefjes' worker and
scheduler client, rocky's scheduler client), with the strictness those clients have: what they
require, Baton's answers must carry. Used by tests/integration/test_openkat.py; nothing here is
OpenKAT's code."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, BaseModel, Field


class TaskStatus(StrEnum):
    PENDING = "pending"
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# -- boefjes: the runner's view ---------------------------------------------------------------------


class Job(BaseModel):
    id: uuid.UUID
    started_at: AwareDatetime | None = None
    ended_at: AwareDatetime | None = None


class RunnerBoefje(BaseModel):
    id: str = Field(min_length=1)
    version: str | None = None
    oci_image: str | None = None


class BoefjeMeta(Job):
    boefje: RunnerBoefje
    input_ooi: str | None = None
    arguments: dict[str, Any] = {}
    organization: str
    runnable_hash: str | None = None
    environment: dict[str, str] | None = None


class RawDataMeta(BaseModel):
    id: uuid.UUID
    boefje_meta: BoefjeMeta
    mime_types: list[dict[str, str]]


class RunnerNormalizer(BaseModel):
    id: str = Field(min_length=1)
    version: str | None = None


class NormalizerMeta(Job):
    raw_data: RawDataMeta
    normalizer: RunnerNormalizer


class RunnerTask(BaseModel):
    """boefjes' `Task`: `schedule_id` must be present (may be null), priority and type non-null."""

    id: uuid.UUID
    scheduler_id: str
    schedule_id: str | None
    organisation: str
    priority: int
    status: TaskStatus
    type: str
    hash: str | None = None
    data: BoefjeMeta | NormalizerMeta
    created_at: datetime
    modified_at: datetime


class TaskPop(BaseModel):
    results: list[RunnerTask]


# -- rocky: the web UI's view ------------------------------------------------------------------------


class RockyBoefje(BaseModel):
    id: str
    name: str | None = None
    version: str | None = None
    oci_image: str | None = None


class RockyBoefjeTask(BaseModel):
    type: str = "boefje"
    id: uuid.UUID | None = None
    boefje: RockyBoefje
    input_ooi: str | None = None
    organization: str
    deduplication_key: uuid.UUID | None = None


class RockyBoefjeMeta(BaseModel):
    id: uuid.UUID
    boefje: RockyBoefje
    input_ooi: str | None = None
    arguments: dict[str, Any]  # required by rocky
    organization: str
    started_at: datetime | None = None
    ended_at: datetime  # the task detail view formats it: must not be null


class RockyRawData(BaseModel):
    id: uuid.UUID
    boefje_meta: RockyBoefjeMeta
    mime_types: list[dict[str, str]]
    secure_hash: str | None = None
    hash_retrieval_link: str | None = None


class RockyNormalizer(BaseModel):
    id: str | None = None
    name: str | None = None
    version: str | None = None


class RockyNormalizerTask(BaseModel):
    type: str = "normalizer"
    id: uuid.UUID | None = None
    normalizer: RockyNormalizer
    raw_data: RockyRawData


class RockyReportTask(BaseModel):
    type: str = "report"
    organisation_id: str
    report_recipe_id: str


class RockyTask(BaseModel):
    id: uuid.UUID
    scheduler_id: str
    schedule_id: str | None = None
    organisation: str
    priority: int
    status: TaskStatus | None = TaskStatus.PENDING
    type: str | None = None
    hash: str | None = None
    data: RockyBoefjeTask | RockyNormalizerTask | RockyReportTask
    created_at: datetime | None = None
    modified_at: datetime | None = None


class PaginatedTasksResponse(BaseModel):
    count: int
    next: str | None = None
    previous: str | None = None
    results: list[RockyTask]


class ScheduleResponse(BaseModel):
    id: uuid.UUID
    scheduler_id: str
    organisation: str
    hash: str  # rocky needs it non-null
    data: dict[str, Any]
    enabled: bool
    schedule: str | None
    deadline_at: datetime | None
    created_at: datetime
    modified_at: datetime


class PaginatedSchedulesResponse(BaseModel):
    count: int
    next: str | None = None
    previous: str | None = None
    results: list[ScheduleResponse]


class ServiceHealth(BaseModel):
    """rocky's health model: `service` is required; `healthy` defaults to False (then the web UI
    reports the scheduler unhealthy)."""

    service: str
    healthy: bool = False
    version: str | None = None
    additional: Any = None
    results: list[ServiceHealth] = Field(default_factory=list)


OPENKAT_TASK_KEYS = {
    "id",
    "scheduler_id",
    "schedule_id",
    "organisation",
    "priority",
    "status",
    "type",
    "hash",
    "data",
    "created_at",
    "modified_at",
}


def runner_task(answer: dict[str, Any]) -> RunnerTask:
    """A task as boefjes reads it; also every key OpenKAT's scheduler sends must be present."""
    missing = OPENKAT_TASK_KEYS - set(answer)
    assert not missing, f"keys OpenKAT's task has and Baton's lacks: {missing}"
    return RunnerTask.model_validate(answer)


def stats_document(answer: Any) -> dict[str, dict[str, int]]:
    """`/tasks/stats` as rocky sums it: an object of objects of integers."""
    assert isinstance(answer, dict)
    for hour, counts in answer.items():
        datetime.fromisoformat(hour)
        assert isinstance(counts, dict) and all(isinstance(value, int) for value in counts.values())
    return answer
