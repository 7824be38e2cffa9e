"""The status page's estate snapshot is shared only when the estate is large, and only for a while
(`baton.service.status.snapshot`)."""

from __future__ import annotations

from collections.abc import Callable

from baton.core.model import utcnow
from baton.service.status.snapshot import MIN_AGE, EstateSnapshot, SnapshotCache
from baton.storage.queues.listings import EstateCounts


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def taker(schedulers: int, cost: float) -> tuple[list[EstateSnapshot], Callable[[], EstateSnapshot]]:
    taken: list[EstateSnapshot] = []
    estate = EstateCounts(schedulers // 3, schedulers, 0, {"stopped": schedulers}, 0, 0, 0)

    def take() -> EstateSnapshot:
        snapshot = EstateSnapshot(utcnow(), estate, [], {}, False, cost)
        taken.append(snapshot)
        return snapshot

    return taken, take


def test_a_small_estate_is_counted_afresh_for_every_request() -> None:
    taken, take = taker(30, cost=0.001)
    cache = SnapshotCache(take, large_from=3_000, clock=Clock())
    cache.current()
    cache.current()
    assert len(taken) == 2


def test_a_large_estate_is_shared_for_ten_times_its_cost_and_at_least_min_age() -> None:
    clock = Clock()
    taken, take = taker(30_000, cost=0.5)  # ten times: 5 s
    cache = SnapshotCache(take, large_from=3_000, clock=clock)
    first = cache.current()
    clock.now += 4.9
    assert cache.current() is first and len(taken) == 1
    clock.now += 0.2
    assert cache.current() is not first and len(taken) == 2

    quick_taken, quick = taker(30_000, cost=0.01)  # ten times is 0.1 s: MIN_AGE holds it instead
    cache = SnapshotCache(quick, large_from=3_000, clock=clock)
    cache.current()
    clock.now += MIN_AGE - 0.1
    cache.current()
    assert len(quick_taken) == 1
    clock.now += 0.2
    cache.current()
    assert len(quick_taken) == 2
