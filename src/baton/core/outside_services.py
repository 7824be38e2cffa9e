"""What Baton says about an outside service (KATalogus, Octopoes, Bytes) from what its callers recorded
(storage/scheduling/service_states.py): up, down (since when), or unknown.

Callers record a service's state when it changes and again at least once per KATalogus poll while they
keep calling it. A record older than `STALE_POLLS` polls is no longer news: nobody has called the service
since (no backfill waits on Octopoes, say), so its state is unknown, and an old failure does not keep
Baton "degraded" for ever. A service configured here but never recorded is unknown too (not called yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

OUTSIDE_SERVICES = ("katalogus", "octopoes", "bytes")  # the order the page and /ready list them in
STALE_POLLS = 3  # a record is news for this many KATalogus polls (callers rewrite it at least once per poll)

State = Literal["up", "down", "unknown"]


@dataclass(frozen=True)
class Recorded:
    """A caller's record: failing since `down_since` (None: answering), written at `checked_at`."""

    down_since: datetime | None
    reason: str | None
    checked_at: datetime


@dataclass(frozen=True)
class OutsideServiceStatus:
    service: str
    state: State
    configured: bool  # this process's settings name the service's URL
    down_since: datetime | None  # while down; also kept when a down record went stale
    down_seconds: float | None  # how long it has been down (None unless down)
    reason: str | None
    checked_at: datetime | None  # when a caller last recorded it (None: never)
    checked_seconds_ago: float | None


def stale_after_seconds(poll_seconds: float) -> float:
    return STALE_POLLS * poll_seconds


def outside_status(
    service: str, configured: bool, recorded: Recorded | None, now: datetime, stale_after: float
) -> OutsideServiceStatus:
    if recorded is None:
        return OutsideServiceStatus(service, "unknown", configured, None, None, None, None, None)
    age = max(0.0, (now - recorded.checked_at).total_seconds())
    fresh: State = "up" if recorded.down_since is None else "down"
    state: State = "unknown" if age > stale_after else fresh
    down_seconds = None
    if state == "down" and recorded.down_since is not None:
        down_seconds = max(0.0, (now - recorded.down_since).total_seconds())
    return OutsideServiceStatus(
        service, state, configured, recorded.down_since, down_seconds, recorded.reason, recorded.checked_at, age
    )


def outside_statuses(
    configured: set[str], recorded: dict[str, Recorded], now: datetime, stale_after: float
) -> list[OutsideServiceStatus]:
    """One per service configured here or recorded by any caller: KATalogus, Octopoes, Bytes first, in that
    order, then any other a caller recorded (by name)."""
    names = sorted(configured | recorded.keys(), key=lambda name: (_rank(name), name))
    return [outside_status(name, name in configured, recorded.get(name), now, stale_after) for name in names]


def _rank(name: str) -> int:
    return OUTSIDE_SERVICES.index(name) if name in OUTSIDE_SERVICES else len(OUTSIDE_SERVICES)
