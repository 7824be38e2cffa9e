"""Prometheus metrics. Each app gets its own registry so several apps can live in one process."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from baton.models import LeaderRecord, Task, utcnow
from baton.queue import queue_sizes
from baton.store import Store


class StoreCollector(Collector):
    """Reads shared state from the database at scrape time, so every replica reports the same."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        depth = GaugeMetricFamily("baton_queue_depth", "Queued tasks per queue.", labels=["queue"])
        recovered = CounterMetricFamily(
            "baton_tasks_recovered", "Times a stuck task was re-queued or failed by recovery (all replicas)."
        )
        leader = GaugeMetricFamily("baton_leader", "1 for the process that leads, by role.", labels=["role", "holder"])
        renewal_age = GaugeMetricFamily(
            "baton_leader_renewal_age_seconds", "Seconds since the leader last renewed.", labels=["role"]
        )
        with self._store.session() as session:
            for queue_id, size in sorted(queue_sizes(session).items()):
                depth.add_metric([queue_id], size)
            recovered.add_metric(
                [], session.scalar(select(func.coalesce(func.sum(Task.attempts), 0)).where(Task.attempts > 0)) or 0
            )
            now = utcnow()
            for row in session.scalars(select(LeaderRecord)):
                leader.add_metric([row.role, row.holder], 1)
                renewal_age.add_metric([row.role], (now - row.renewed_at).total_seconds())
        yield from (depth, recovered, leader, renewal_age)


class Metrics:
    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry()
        self.pushes = Counter(
            "baton_pushes",
            "Tasks pushed, by queue and outcome.",
            ["queue", "outcome"],
            registry=self.registry,
        )
        self.pops = Counter("baton_pops", "Tasks handed out, by queue.", ["queue"], registry=self.registry)
        self.pop_latency = Histogram(
            "baton_pop_latency_seconds",
            "Time to pop from the database.",
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.registry.register(StoreCollector(store))
