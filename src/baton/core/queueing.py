"""What a pop and a push ask for, and what a push answers: the words the API, the services, the
schedulers and storage share."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from baton.core.admission import OnDuplicate

Outcome = Literal["created", "updated", "duplicate"]


@dataclass(frozen=True)
class PopTarget:
    """One queue (`queue` = its id), or every queue of a type (`type`) in fair or strict order."""

    queue: str | None = None
    type: str | None = None
    fair: bool = True

    def __post_init__(self) -> None:
        if (self.queue is None) == (self.type is None):
            raise ValueError("a pop targets either one queue or one type")


@dataclass(frozen=True)
class PushRequest:
    queue: str
    priority: int
    data: dict[str, Any]
    hash: str | None = None
    schedule_id: str | None = None
    task_id: uuid.UUID | None = None
    # `reprioritise`: a queued task with this hash gets the new priority (Baton's rule);
    # `refuse`: it is left alone and the push is a duplicate (OpenKAT's rule).
    on_duplicate: OnDuplicate = "reprioritise"


@dataclass(frozen=True)
class PushResult:
    outcome: Outcome
    task: dict[str, Any]

    @property
    def created(self) -> bool:
        return self.outcome == "created"
