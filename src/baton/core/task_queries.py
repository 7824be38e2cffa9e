"""What a list of tasks asks for: the API's listing (OpenKAT's query parameters) and the status page's
keyset pages. Storage turns these into SQL (`storage/queues/task_pages.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Literal, get_args

from baton.core.errors import ContradictoryInputError
from baton.core.model import SchedulerType, TaskStatus, utcnow

TASK_TYPES = frozenset(kind.value for kind in SchedulerType)
# The statuses a listing filters on: OpenKAT's seven, `pending` among them (its web UI offers it;
# Baton never gives a task that status, so it matches nothing).
ListedStatus = Literal["pending", "queued", "dispatched", "running", "completed", "failed", "cancelled"]
assert set(get_args(ListedStatus)) == {"pending", *TaskStatus}


def as_moment(value: date | datetime) -> datetime:
    """A date means its midnight; a time without a zone is UTC (as OpenKAT reads them)."""
    moment = value if isinstance(value, datetime) else datetime.combine(value, time.min)
    return moment if moment.tzinfo else moment.replace(tzinfo=utcnow().tzinfo)


@dataclass(frozen=True)
class TaskQuery:
    """The listing's filters, as OpenKAT's web UI and Baton's clients send them."""

    scheduler_id: str | None = None  # OpenKAT's scheduler id is a type; Baton's is a queue id
    organisation: str | None = None
    status: ListedStatus | None = None
    task_type: SchedulerType | None = None
    min_created_at: date | datetime | None = None
    max_created_at: date | datetime | None = None
    input_ooi: str | None = None
    plugin_id: str | None = None

    def created_between(self) -> tuple[datetime | None, datetime | None]:
        """The creation range as moments; a range that ends before it starts is refused (400)."""
        earliest = as_moment(self.min_created_at) if self.min_created_at is not None else None
        latest = as_moment(self.max_created_at) if self.max_created_at is not None else None
        if earliest is not None and latest is not None and earliest > latest:
            raise ContradictoryInputError("min_created_at must be less than max_created_at")
        return earliest, latest


@dataclass(frozen=True)
class TaskFilter:
    organisation: str | None = None
    type: SchedulerType | None = None
    status: TaskStatus | None = None
    q: str | None = None  # a task id, or a hash

    def query(self) -> dict[str, str]:
        given = {"organisation": self.organisation, "type": self.type, "status": self.status, "q": self.q}
        return {key: str(value) for key, value in given.items() if value}
