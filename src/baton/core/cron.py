"""Cron expressions (schedules) and when a schedule is due.

croniter (with dateutil) is imported on first use: most scheduler processes never see a cron schedule.
"""

from __future__ import annotations

from datetime import datetime

from baton.core.errors import ContradictoryInputError


def is_valid_cron(expression: str) -> bool:
    from croniter import croniter

    return bool(croniter.is_valid(expression))


def check_cron(expression: str | None) -> None:
    """No expression, or a valid one; anything else is refused naming it."""
    if expression is not None and not is_valid_cron(expression):
        raise ContradictoryInputError(f"Invalid cron expression: {expression}")


def next_cron_run(expression: str, after: datetime) -> datetime:
    from croniter import croniter

    upcoming: datetime = croniter(expression, after).get_next(datetime)
    return upcoming


def next_deadline(expression: str | None, after: datetime) -> datetime | None:
    """A cron schedule's next run after `after`; a one-off schedule (no cron) has none."""
    return next_cron_run(expression, after) if expression else None


def first_deadline(expression: str | None, deadline_at: datetime | None, now: datetime) -> datetime | None:
    """When a new schedule is first due: the deadline it names, else its cron's next run after now."""
    return deadline_at if deadline_at is not None else next_deadline(expression, now)
