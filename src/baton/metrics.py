"""Prometheus metrics. Each app gets its own registry so several apps can live in one process."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from baton.queue import queue_sizes
from baton.store import Store


class QueueDepthCollector(Collector):
    """Reads queue depths from the database at scrape time: right on every replica."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("baton_queue_depth", "Queued tasks per queue.", labels=["queue"])
        with self._store.session() as session:
            for queue_id, size in sorted(queue_sizes(session).items()):
                gauge.add_metric([queue_id], size)
        yield gauge


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
        self.registry.register(QueueDepthCollector(store))
