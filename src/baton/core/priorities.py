"""How soon a planned task should run: the priority a planner gives it (lower runs first).

Priority 1 is a person's: rocky pushes a manual run with it, and it must pop before every task Baton
plans by itself, whatever the organisation (the fair pop orders by priority first). So an automatic
task never gets less than `AUTOMATIC_PRIORITY`.
"""

from __future__ import annotations

from datetime import datetime

MANUAL_PRIORITY = 1
AUTOMATIC_PRIORITY = 2  # the most urgent an automatic task gets
RANKED_HOURS = 167  # a week: pairs that last ran longer ago than this rank alike


def rank_boefje_task(previous_run: datetime | None, now: datetime) -> int:
    """Never-run pairs first among automatic tasks (2); then the longer since the last run, the sooner
    (3..170)."""
    if previous_run is None:
        return AUTOMATIC_PRIORITY
    hours_since = int((now - previous_run).total_seconds() // 3600)
    return AUTOMATIC_PRIORITY + 1 + max(0, RANKED_HOURS - hours_since)
