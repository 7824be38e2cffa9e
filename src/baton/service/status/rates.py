"""Pop and push rates for the status page, from this process's Prometheus counters sampled into a
ring buffer (`RateSampler`), not from the database at all."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from baton.core.identity import process_location
from baton.core.model import SchedulerSpec, SchedulerType, utcnow
from baton.service.metrics import Metrics


@dataclass(frozen=True)
class RateSeries:
    type: str
    pops: list[float]
    pushes: list[float]


@dataclass(frozen=True)
class Rates:
    """Pops and pushes per second over the last `window_seconds`, oldest interval first."""

    scope: str
    interval_seconds: float
    window_seconds: float
    times: list[datetime]
    by_type: list[RateSeries]
    pops_per_second: float
    pushes_per_second: float


def _totals_by_type(counter: Any) -> dict[str, float]:
    """A labelled counter's `_total` samples summed per task type (the queue id's prefix)."""
    totals: dict[str, float] = {}
    for metric in counter.collect():
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue
            try:
                kind = SchedulerSpec.parse(sample.labels["queue"]).type.value
            except (KeyError, ValueError):
                kind = "other"
            totals[kind] = totals.get(kind, 0.0) + sample.value
    return totals


@dataclass
class RateSampler:
    """A ring buffer of this process's pop and push counters, sampled every `interval` seconds.

    Why sampled counters: they are what the hot path increments anyway (no extra write per pop, no
    read of the database per sample), and two readings give an exact rate for the interval between
    them. What that costs: the rates are this process's own; with several API replicas each page
    shows its replica's traffic (Prometheus sums `rate(baton_pops_total[1m])` over all of them), and
    tasks that schedulers create from events inside their own process are not pushes of this one.
    """

    metrics: Metrics
    interval: float = 5.0
    window: float = 900.0
    samples: deque[tuple[float, datetime, dict[str, float], dict[str, float]]] = field(init=False)

    def __post_init__(self) -> None:
        self.samples = deque(maxlen=int(self.window / self.interval) + 1)
        self._lock = threading.Lock()

    def sample(self, clock: float | None = None, now: datetime | None = None) -> None:
        reading = (
            time.monotonic() if clock is None else clock,
            now or utcnow(),
            _totals_by_type(self.metrics.pops),
            _totals_by_type(self.metrics.pushes),
        )
        with self._lock:
            self.samples.append(reading)

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def rates(self) -> Rates:
        with self._lock:
            samples = list(self.samples)
        kinds = [kind.value for kind in SchedulerType]
        for _, _, pops, pushes in samples:
            kinds += [kind for kind in (*pops, *pushes) if kind not in kinds]
        series = {kind: RateSeries(kind, [], []) for kind in kinds}
        times: list[datetime] = []
        for (clock0, _, pops0, pushes0), (clock1, at, pops1, pushes1) in itertools.pairwise(samples):
            elapsed = max(clock1 - clock0, 1e-9)
            times.append(at)
            for kind, rate in series.items():
                rate.pops.append(max(0.0, pops1.get(kind, 0.0) - pops0.get(kind, 0.0)) / elapsed)
                rate.pushes.append(max(0.0, pushes1.get(kind, 0.0) - pushes0.get(kind, 0.0)) / elapsed)
        return Rates(
            scope=f"this API process ({process_location()})",
            interval_seconds=self.interval,
            window_seconds=self.window,
            times=times,
            by_type=list(series.values()),
            pops_per_second=sum(rate.pops[-1] for rate in series.values() if rate.pops),
            pushes_per_second=sum(rate.pushes[-1] for rate in series.values() if rate.pushes),
        )
