"""KATalogus, Octopoes and Bytes as Baton's callers recorded them (storage/scheduling/service_states.py, written by
ingest/outside_links.py), for `/ready`, `/metrics` and the status page. Every API replica reads the
same table, so each says the same; the rule that turns a record into up, down or unknown is in
core/outside_services.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from baton.core.errors import DatabaseUnavailableError
from baton.core.model import utcnow
from baton.core.outside_services import OutsideServiceStatus, Recorded, outside_statuses, stale_after_seconds
from baton.core.settings import OpenKatSettings


def configured_services(settings: OpenKatSettings) -> set[str]:
    urls = {"katalogus": settings.katalogus_url, "octopoes": settings.octopoes_url, "bytes": settings.bytes_url}
    return {service for service, url in urls.items() if url}


class ServiceStateRecords(Protocol):
    """The recorded states (storage/ports/metrics.py): every service a caller recorded, by name."""

    def recorded(self) -> dict[str, Recorded]: ...


class OutsideServices:
    def __init__(self, records: ServiceStateRecords, settings: OpenKatSettings) -> None:
        self.records = records
        self.configured = configured_services(settings)
        self.stale_after = stale_after_seconds(settings.katalogus_poll_seconds)

    def statuses(self) -> list[OutsideServiceStatus]:
        """One per service configured here or recorded by a caller."""
        return outside_statuses(self.configured, self.records.recorded(), utcnow(), self.stale_after)


class OutsideServiceCollector(Collector):
    """Gauges per service, from the table at scrape time (every replica reports the same: take max, never
    sum). A service whose state is unknown (configured but not called yet, or not called for a while) has
    no sample."""

    def __init__(self, services: OutsideServices) -> None:
        self._services = services

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "baton_outside_service_up",
            "1 while KATalogus, Octopoes or Bytes answers Baton's calls, 0 while they fail (as Baton's callers "
            "last recorded; no sample while unknown).",
            labels=["service"],
        )
        down_for = GaugeMetricFamily(
            "baton_outside_service_down_seconds",
            "Seconds since the outside service's current outage began; 0 while it answers.",
            labels=["service"],
        )
        checked = GaugeMetricFamily(
            "baton_outside_service_checked_age_seconds",
            "Seconds since a caller last recorded the outside service's state.",
            labels=["service"],
        )
        try:
            statuses = self._services.statuses()
        except DatabaseUnavailableError:
            statuses = []  # the database's own metrics say why
        for status in statuses:
            if status.checked_seconds_ago is not None:
                checked.add_metric([status.service], status.checked_seconds_ago)
            if status.state == "unknown":
                continue
            up.add_metric([status.service], 1 if status.state == "up" else 0)
            down_for.add_metric([status.service], status.down_seconds or 0.0)
        yield from (up, down_for, checked)
