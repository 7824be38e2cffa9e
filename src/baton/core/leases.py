"""Lease arithmetic: the rules the lease holders (a process's scheduler leases, a director's
leadership, a worker's share of the pool) decide by, apart from the statements that apply them.

Times are seconds on a monotonic clock of the deciding process, except where a lease's own
timestamps are compared (a Kubernetes Lease: datetimes as the API server wrote them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta

# Claim a lease's end this long after the database's clock says it ends (rounding, clock reads).
LEASE_END_MARGIN_SECONDS = 0.02


def past_renew_deadline(now: float, renewed_at: float, renew_deadline_seconds: float) -> bool:
    """More than the renew deadline has passed since the last renewal: the holder must stop acting
    (the deadline comes before the lease ends, so it stops before anyone may take over)."""
    return now - renewed_at > renew_deadline_seconds


def making_progress(now: float, progressed_at: float, hung_after_seconds: float) -> bool:
    """A scheduler that reported within `hung_after_seconds` is alive: its lease is renewed. A hung
    one's lease is left to run out, so someone else takes it over."""
    return now - progressed_at < hung_after_seconds


def hung_before(now: float, hung_after_seconds: float) -> float:
    """`making_progress` for thousands at once: a scheduler that last reported at or before this
    moment is not making progress."""
    return now - hung_after_seconds


def lease_expired(renewed_at: datetime | None, duration: timedelta, now: datetime) -> bool:
    """A lease never renewed, or last renewed longer than its duration ago, is free to take."""
    return renewed_at is None or renewed_at + duration < now


def fair_share(schedulers: int, live_workers: int) -> int:
    """A worker's share of the pool: every scheduler divided by the live workers, rounded up (a
    worker counts itself, so there is always at least one)."""
    return math.ceil(schedulers / max(1, live_workers))


def spread_order(scheduler_id: str) -> tuple[str, str, str]:
    """The order workers claim and keep schedulers in: by organisation, then type (`boefje-acme` is
    the boefje scheduler of `acme`). A worker holds whole organisations, so every worker runs every
    type alike; in id order the first worker kept every boefje scheduler (the busiest: catalogue
    polls, rescans, twins, backfills) and the others the idle report schedulers."""
    kind, _, organisation = scheduler_id.partition("-")
    return (organisation, kind, scheduler_id)


def surplus(running: Iterable[str], share: int) -> list[str]:
    """The schedulers a worker gives up to come down to `share`: those after the first `share` in
    `spread_order`, so the same ones go whatever order they were started in."""
    return sorted(running, key=spread_order)[share:]


def idle_round_seconds(round_seconds: float, lease_seconds: float) -> float:
    """A worker's round once shares hold still: five rounds, and at least three within a lease (its
    own row, renewed by its rounds, lasts a lease)."""
    return max(round_seconds, min(5 * round_seconds, lease_seconds / 3))


def next_round_in(round_seconds: float, next_lease_end_seconds: float | None) -> float:
    """A worker's wait before its next round: a round, or less when a peer's lease ends sooner, so a
    dead peer's share is taken just after its leases end rather than up to a round later."""
    if next_lease_end_seconds is not None and 0 < next_lease_end_seconds < round_seconds:
        return next_lease_end_seconds + LEASE_END_MARGIN_SECONDS
    return round_seconds
