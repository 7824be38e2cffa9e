"""Rules of periodic rescans (no I/O): when a boefje's schedule is next due, and what the checks of a due
schedule decide (run it, disable it and say why, or leave it for the next round).

A schedule disabled for a reason is enabled again when the reason goes away (the plugin is enabled again,
the object is back at a sufficient level), a skipped schedule is not left due (it is looked at again next
round, never in a loop), and a cancelled task blocks nothing (the grace period counts from when the last
task was queued, whatever became of it). docs/openkat.md compares them with mula's.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from baton.core.cron import next_cron_run
from baton.core.jobs import BoefjeJob, job_hash
from baton.core.queueing import PushSchedule
from baton.core.settings import Settings

# Why a schedule was disabled (schedules.disabled_reason).
PLUGIN_NOT_ENABLED = "plugin_not_enabled"
TYPE_NOT_CONSUMED = "type_not_consumed"
OBJECT_GONE = "object_gone"
SCAN_LEVEL_TOO_LOW = "scan_level_too_low"
# Reasons a new task for the schedule's (boefje, object) proves gone: the planner only makes one for an
# enabled boefje that may scan the object as it is now.
OBJECT_REASONS = frozenset({OBJECT_GONE, SCAN_LEVEL_TOO_LOW, TYPE_NOT_CONSUMED, PLUGIN_NOT_ENABLED})


def next_rescan(
    now: datetime,
    *,
    grace_seconds: float,
    jitter_seconds: float,
    cron: str | None = None,
    interval_minutes: int | None = None,
    rng: random.Random | None = None,
) -> datetime:
    """When a boefje's schedule is next due, counted from `now` (its task queued now): the plugin's cron
    if it has one, else its interval (minutes between runs), else the grace period plus a uniform random
    jitter of up to `jitter_seconds` (mula: 24 h + up to 5 h), so a day's objects do not all come due in
    the same minute."""
    if cron:
        return next_cron_run(cron, now)
    if interval_minutes is not None and interval_minutes > 0:
        return now + timedelta(minutes=interval_minutes)
    jitter = (rng or random).uniform(0.0, jitter_seconds) if jitter_seconds > 0 else 0.0
    return now + timedelta(seconds=max(grace_seconds, 0.0) + jitter)


def first_rescan(
    settings: Settings,
    now: datetime,
    cron: str | None,
    interval_minutes: int | None,
    rng: random.Random | None = None,
) -> datetime:
    """`next_rescan` with the settings' grace period (BATON_GRACE_PERIOD_SECONDS) and jitter
    (BATON_RESCAN_JITTER_SECONDS): when a boefje task queued `now` is next due."""
    return next_rescan(
        now,
        grace_seconds=settings.grace_period_seconds,
        jitter_seconds=settings.openkat.rescan_jitter_seconds,
        cron=cron,
        interval_minutes=interval_minutes,
        rng=rng,
    )


def pushed_schedule(
    settings: Settings, job: BoefjeJob, document: dict[str, Any], now: datetime, cron: str | None, interval: int | None
) -> PushSchedule:
    """The schedule a boefje task pushed from outside gets (rocky's manual run; a runner's hand-back
    keeps its task's): due at the plugin's cron or interval, else after the grace period and jitter,
    and its run recorded now, as every boefje task Baton plans."""
    return PushSchedule(
        hash=job_hash(job),
        data=document,
        deadline_at=first_rescan(settings, now, cron, interval),
        cron=cron,
        boefje_id=job.boefje.id,
        object_key=job.input_ooi or None,
    )


def grace_of(grace_seconds: float, interval_minutes: int | None) -> timedelta:
    """How long after a run the same (boefje, object) may not run again: the plugin's interval if it has one
    (mula), else the grace period."""
    if interval_minutes is not None and interval_minutes > 0:
        return timedelta(minutes=interval_minutes)
    return timedelta(seconds=max(grace_seconds, 0.0))


class Outcome(Enum):
    RUN = "run"  # every check passed: queue its task (unless it ran within the grace period)
    DISABLE = "disable"  # a check failed: disabled with the reason, until the reason goes away
    WAIT = "wait"  # nothing could be checked now (a service is down): looked at again next round


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str | None = None
    detail: str | None = None


RUN = Verdict(Outcome.RUN)
WAIT = Verdict(Outcome.WAIT)


@dataclass(frozen=True)
class PluginView:
    """What the checks need of a boefje as the organisation's catalogue has it now."""

    id: str
    consumes: Collection[str]
    scan_level: int


@dataclass(frozen=True)
class ObjectView:
    """What Octopoes said of the object: None for `level` when Octopoes was not asked (not configured)."""

    found: bool
    object_type: str
    level: int | None = None


def object_type_of(reference: str) -> str:
    """An object's type from its reference ("Hostname|internet|example.com" -> "Hostname")."""
    return reference.split("|", 1)[0]


def judge_without_object(boefje_id: str, plugin: PluginView | None) -> Verdict:
    """The checks of a due schedule whose job has no object (`input_ooi`): the plugin's only. Such a job
    runs the boefje on nothing in particular: there is no object to have vanished or to check the level
    of, so it is queued again (as mula does), not disabled."""
    if plugin is None:
        return Verdict(Outcome.DISABLE, PLUGIN_NOT_ENABLED, f"boefje '{boefje_id}' is not enabled")
    return RUN


def judge(boefje_id: str, plugin: PluginView | None, seen: ObjectView | None) -> Verdict:
    """The checks of one due schedule, in mula's order: the plugin (enabled for the organisation, a boefje),
    then the object (exists, of a type the boefje consumes, at a scan level it may scan). `plugin` None: not
    enabled for the organisation (or unknown); `seen` None: Octopoes could not be asked now."""
    if plugin is None:
        return Verdict(Outcome.DISABLE, PLUGIN_NOT_ENABLED, f"boefje '{boefje_id}' is not enabled")
    if seen is None:
        return WAIT
    if not seen.found:
        return Verdict(Outcome.DISABLE, OBJECT_GONE, "the object no longer exists")
    if seen.object_type not in plugin.consumes:
        return Verdict(
            Outcome.DISABLE, TYPE_NOT_CONSUMED, f"boefje '{boefje_id}' does not consume {seen.object_type[:100]}"
        )
    if seen.level is not None and seen.level < plugin.scan_level:
        return Verdict(
            Outcome.DISABLE,
            SCAN_LEVEL_TOO_LOW,
            f"object at scan level {seen.level}, boefje '{boefje_id}' needs {plugin.scan_level}",
        )
    return RUN
