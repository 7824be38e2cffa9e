"""Cron expressions (report schedules).

croniter (with dateutil) is imported on first use: most scheduler processes never see a cron schedule.
"""

from __future__ import annotations

from datetime import datetime


def is_valid_cron(expression: str) -> bool:
    from croniter import croniter

    return bool(croniter.is_valid(expression))


def next_cron_run(expression: str, after: datetime) -> datetime:
    from croniter import croniter

    upcoming: datetime = croniter(expression, after).get_next(datetime)
    return upcoming
