"""How soon a planned task should run: the priority a planner gives it (lower runs first)."""

from __future__ import annotations

from datetime import datetime


def rank_boefje_task(previous_run: datetime | None, now: datetime) -> int:
    """Never-run pairs first (1); then the longer since the last run, the sooner (2..169)."""
    if previous_run is None:
        return 1
    hours_since = int((now - previous_run).total_seconds() // 3600)
    return 2 + max(0, 167 - hours_since)
