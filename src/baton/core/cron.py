"""Cron expressions (report schedules)."""

from __future__ import annotations

from datetime import datetime

from croniter import croniter


def is_valid_cron(expression: str) -> bool:
    return bool(croniter.is_valid(expression))


def next_cron_run(expression: str, after: datetime) -> datetime:
    upcoming: datetime = croniter(expression, after).get_next(datetime)
    return upcoming
