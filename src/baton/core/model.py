"""The domain's vocabulary: scheduler types, task and scheduler states, scheduler identities."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

OrganisationId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$",
        description="Letters, digits, '_', '.', '-'; starts with a letter or digit.",
        examples=["acme"],
    ),
]


def utcnow() -> datetime:
    return datetime.now(UTC)


class RunnerKind(enum.StrEnum):
    """Where a director runs its schedulers."""

    thread = "thread"
    process = "process"
    kubernetes = "kubernetes"


class SchedulerType(enum.StrEnum):
    """The kind of work a queue holds (OpenKAT calls it the scheduler id)."""

    BOEFJE = "boefje"
    NORMALIZER = "normalizer"
    REPORT = "report"


class TaskStatus(enum.StrEnum):
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class SchedulerState(enum.StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


def scheduler_id_for(scheduler_type: SchedulerType | str, organisation: str) -> str:
    """Queue id = scheduler id = `{type}-{organisation}`."""
    return f"{SchedulerType(scheduler_type).value}-{organisation}"


def queue_type(queue_id: str) -> SchedulerType | None:
    """The type of the tasks a queue holds, from its id (`boefje-acme` -> boefje); None: not a queue id."""
    kind = queue_id.partition("-")[0]
    return SchedulerType(kind) if kind in _TYPES else None


_TYPES = frozenset(kind.value for kind in SchedulerType)


@dataclass(frozen=True, order=True)
class SchedulerSpec:
    """One scheduler: an (organisation, type) pair; its id is its queue's id."""

    organisation: str
    type: SchedulerType

    @property
    def id(self) -> str:
        return scheduler_id_for(self.type, self.organisation)

    @classmethod
    def parse(cls, scheduler_id: str) -> SchedulerSpec:
        kind, _, organisation = scheduler_id.partition("-")
        return cls(organisation, SchedulerType(kind))
