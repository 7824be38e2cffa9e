"""Prometheus metrics. Each app gets its own registry so several apps can live in one process.

Counts of queued and in-flight tasks, recoveries and leadership are read from the database at scrape
time, so every replica reports the same; pops, pushes and latencies are this process's own, and so
is its view of the database (up, outages begun): a scrape during an outage answers with those (and
without the counts it cannot read), so the outage shows. KATalogus', Octopoes' and Bytes' state comes
from the database too (service/outside_services.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from baton.core.errors import DatabaseUnavailableError
from baton.core.model import SchedulerSpec, utcnow
from baton.core.outages import OutageTracker
from baton.core.views import StoreCounts
from baton.service.outside_services import OutsideServiceCollector, OutsideServices

# Dwell time: from push to hand-out. Quiet organisations should stay at the low end even while a
# noisy one has a backlog (fair pop).
DWELL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400)


class MetricRecords(Protocol):
    """The counts read at scrape time (storage/ports/metrics.py)."""

    def counts(self) -> StoreCounts: ...


class StoreCollector(Collector):
    def __init__(self, records: MetricRecords) -> None:
        self._records = records

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        depth = GaugeMetricFamily("baton_queue_depth", "Queued tasks per queue.", labels=["queue"])
        in_flight = GaugeMetricFamily(
            "baton_in_flight",
            "Tasks dispatched or running, per organisation and type.",
            labels=["organisation", "type"],
        )
        recovered = CounterMetricFamily(
            "baton_tasks_recovered", "Times a stuck task was re-queued or failed by recovery (all replicas)."
        )
        leader = GaugeMetricFamily("baton_leader", "1 for the process that leads, by role.", labels=["role", "holder"])
        renewal_age = GaugeMetricFamily(
            "baton_leader_renewal_age_seconds", "Seconds since the leader last renewed.", labels=["role"]
        )
        try:
            counts = self._records.counts()
        except DatabaseUnavailableError:
            return  # the outage's own metrics (OutageCollector) still answer
        for queue_id, (queued, flying) in sorted(counts.queues.items()):
            depth.add_metric([queue_id], queued)
            try:
                spec = SchedulerSpec.parse(queue_id)
            except ValueError:
                continue
            in_flight.add_metric([spec.organisation, spec.type.value], flying)
        recovered.add_metric([], counts.recovered)
        now = utcnow()
        for row in counts.leaders:
            leader.add_metric([row.role, row.holder], 1)
            renewal_age.add_metric([row.role], (now - row.renewed_at).total_seconds())
        yield from (depth, in_flight, recovered, leader, renewal_age)


class OutageCollector(Collector):
    """This process's view of the database, from its outage tracker (core/outages.py)."""

    def __init__(self, tracker: OutageTracker) -> None:
        self._tracker = tracker

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        up = GaugeMetricFamily(
            "baton_database_up", "1 while this process reaches the database, 0 during an outage it met."
        )
        up.add_metric([], 1 if self._tracker.available else 0)
        outages = CounterMetricFamily(
            "baton_database_outages", "Database outages this process met (each logged once when it began)."
        )
        outages.add_metric([], self._tracker.outages)
        down_for = GaugeMetricFamily(
            "baton_database_unavailable_seconds", "Seconds since the current outage began; 0 while up."
        )
        down_for.add_metric([], self._tracker.unavailable_for())
        yield from (up, outages, down_for)


class Metrics:
    """`records`: the database's counts; `outside`: KATalogus', Octopoes' and Bytes' states; `database`:
    this process's outage tracker of the database (storage's)."""

    def __init__(self, records: MetricRecords, outside: OutsideServices, database: OutageTracker) -> None:
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
        self.dwell = Histogram(
            "baton_dwell_seconds",
            "Time from push to hand-out of the tasks this replica popped, per organisation and type.",
            ["organisation", "type"],
            registry=self.registry,
            buckets=DWELL_BUCKETS,
        )
        self.handed_back = Counter(
            "baton_pops_handed_back",
            "Tasks of pops whose answer did not reach the client, put back in their queue by this process.",
            registry=self.registry,
        )
        self.pop_waiters = Gauge(
            "baton_pop_waiters", "Pops waiting for a task (`?wait=`) in this process.", registry=self.registry
        )
        self.registry.register(StoreCollector(records))
        self.registry.register(OutageCollector(database))
        self.outside = outside
        self.registry.register(OutsideServiceCollector(self.outside))
        self._queues: dict[str, tuple[Any, Any]] = {}

    def per_queue(self, queue: str, organisation: str, task_type: str) -> tuple[Any, Any]:
        """The queue's pop counter and dwell histogram, looked up once (labels() takes a lock)."""
        found = self._queues.get(queue)
        if found is None:
            found = (self.pops.labels(queue), self.dwell.labels(organisation, task_type))
            self._queues[queue] = found
        return found
