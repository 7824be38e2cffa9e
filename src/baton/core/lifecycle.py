"""The task lifecycle: which status may follow which."""

from __future__ import annotations

from baton.core.errors import InvalidTransitionError
from baton.core.model import TaskStatus

# Which status a task may move to from each status, through the API. A runner may hand a task back
# (dispatched or running -> queued): OpenKAT's runners do on shutdown, and for duplicates they
# could not run.
ALLOWED_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.QUEUED: frozenset({TaskStatus.DISPATCHED, TaskStatus.CANCELLED}),
    TaskStatus.DISPATCHED: frozenset(
        {TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
    TaskStatus.RUNNING: frozenset({TaskStatus.QUEUED, TaskStatus.COMPLETED, TaskStatus.FAILED}),
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}


def may_precede(requested: TaskStatus) -> frozenset[TaskStatus]:
    """The statuses from which a task may move to `requested`."""
    return frozenset(status for status, allowed in ALLOWED_TRANSITIONS.items() if requested in allowed)


def check_transition(current: TaskStatus, requested: TaskStatus) -> None:
    if requested not in ALLOWED_TRANSITIONS[current]:
        raise InvalidTransitionError(current.value, requested.value)
