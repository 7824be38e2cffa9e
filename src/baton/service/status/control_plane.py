"""The status page's control plane: who leads and since when, workers and scheduler leases where the
database has them (found by reflection, `storage/schema_probe.py`), RabbitMQ's queues where it
is configured (`BrokerProbe`, given a way to connect by the layer that knows the broker), and OpenKAT's
services (KATalogus, Octopoes, Bytes) as Baton's callers last found them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from baton import __version__
from baton.core.identity import process_location
from baton.core.logging import get_logger
from baton.core.model import utcnow
from baton.core.outside_services import OutsideServiceStatus
from baton.core.settings import Settings
from baton.core.views import ControlPlaneReading, TableSnapshot
from baton.service.outside_services import OutsideServices
from baton.service.status.overview import seconds_since

log = get_logger("baton.status")

TABLE_ROWS = 200  # rows shown of a table found by reflection (workers)
# Organisations whose RabbitMQ queues are looked at: with the organisations' queue and three each,
# one more than fits the probe's 100, so that it says when there are more.
BROKER_ORGANISATIONS = 34
# `broker_queues(organisations)`: the dead-letter queue and the queues to look at.
BrokerQueues = Callable[[Sequence[str]], tuple[str, list[str]]]


@dataclass(frozen=True)
class ProcessInfo:
    version: str
    location: str
    database: str
    auth_required: bool
    amqp_enabled: bool
    heartbeat_timeout_seconds: float
    leader_stale_seconds: float


@dataclass(frozen=True)
class LeaderStatus:
    role: str
    holder: str
    acquired_at: datetime
    renewed_at: datetime
    leading_seconds: float
    renewal_age_seconds: float
    stale: bool


@dataclass(frozen=True)
class LeaseOwner:
    owner: str | None
    schedulers: int


@dataclass(frozen=True)
class BrokerQueue:
    name: str
    declared: bool
    messages: int | None
    consumers: int | None


@dataclass(frozen=True)
class BrokerStatus:
    configured: bool
    reachable: bool
    error: str | None
    dead_letters: int | None
    queues: list[BrokerQueue]
    checked_at: datetime | None
    truncated: bool


@dataclass(frozen=True)
class ControlPlane:
    generated_at: datetime
    process: ProcessInfo
    leaders: list[LeaderStatus]
    followers: str
    workers: TableSnapshot | None
    workers_note: str
    lease_owners: list[LeaseOwner] | None
    broker: BrokerStatus
    outside_services: list[OutsideServiceStatus]


class ControlPlaneRecords(Protocol):
    """The control plane as the database records it (storage/ports/status.py)."""

    @property
    def dialect(self) -> str: ...

    def control_plane(self, organisations: int, table_rows: int) -> ControlPlaneReading: ...


NOT_CONFIGURED = BrokerStatus(False, False, "RabbitMQ not configured", None, [], None, False)


class BrokerProbe:
    """Message and consumer counts of RabbitMQ queues by passive declares, remembered for `ttl`
    seconds so that a page refreshing every two seconds opens a connection at most every `ttl`."""

    def __init__(self, connect: Callable[[], Any], ttl: float = 10.0, max_queues: int = 100) -> None:
        self.connect = connect
        self.ttl = ttl
        self.max_queues = max_queues
        self._lock = threading.Lock()
        self._cached: tuple[float, tuple[str, ...], BrokerStatus] | None = None

    def read(self, dead_letter_queue: str, queue_names: Sequence[str]) -> BrokerStatus:
        names = (dead_letter_queue, *queue_names[: self.max_queues])
        with self._lock:
            if self._cached and self._cached[1] == names and time.monotonic() - self._cached[0] < self.ttl:
                return self._cached[2]
            status = self._probe(names, truncated=len(queue_names) > self.max_queues)
            self._cached = (time.monotonic(), names, status)
            return status

    def _probe(self, names: Sequence[str], truncated: bool) -> BrokerStatus:
        connection = None
        try:
            connection = self.connect()
            channel = connection.channel()
            queues = []
            for name in names:
                try:
                    frame = channel.queue_declare(queue=name, passive=True)
                except Exception as exc:
                    if getattr(exc, "reply_code", None) != 404:
                        raise
                    queues.append(BrokerQueue(name, False, None, None))
                    channel = connection.channel()  # the broker closed the channel on the 404
                    continue
                queues.append(BrokerQueue(name, True, frame.method.message_count, frame.method.consumer_count))
        except Exception as exc:  # any failure to reach or read the broker is shown, not raised
            reason = str(exc) or type(exc).__name__
            return BrokerStatus(True, False, reason[:300], None, [], utcnow(), truncated)
        finally:
            if connection is not None:
                try:
                    connection.close()
                except Exception:  # already closed or broken: nothing to release
                    log.debug("closing the broker probe's connection failed")
        dead = queues[0]
        return BrokerStatus(True, True, None, dead.messages if dead.declared else 0, queues[1:], utcnow(), truncated)


def read_control_plane(
    records: ControlPlaneRecords,
    settings: Settings,
    broker: BrokerProbe | None,
    broker_queues: BrokerQueues | None,
    outside: OutsideServices | None = None,
) -> ControlPlane:
    """`broker_queues`: their names belong to the ingest layer, which passes them in."""
    now = utcnow()
    # The leading director rewrites its row every reconcile round: a row older than two rounds
    # (and than the lease time) means that director stopped leading or stopped working.
    stale_after = max(settings.leases.lease_seconds, 2 * settings.timing.reconcile_interval_seconds)
    reading = records.control_plane(BROKER_ORGANISATIONS - 1, TABLE_ROWS)
    leader_rows = [
        LeaderStatus(
            role=row.role,
            holder=row.holder,
            acquired_at=row.acquired_at,
            renewed_at=row.renewed_at,
            leading_seconds=seconds_since(row.acquired_at, now) or 0.0,
            renewal_age_seconds=seconds_since(row.renewed_at, now) or 0.0,
            stale=now - row.renewed_at > timedelta(seconds=stale_after),
        )
        for row in reading.leaders
    ]
    workers = reading.workers
    outside_services = [] if outside is None else outside.statuses()
    if broker is None or broker_queues is None:
        broker_status = NOT_CONFIGURED
    else:
        dead_letter, names = broker_queues(reading.organisations)
        broker_status = broker.read(dead_letter, names)
    return ControlPlane(
        generated_at=now,
        process=ProcessInfo(
            version=__version__,
            location=process_location(),
            database=records.dialect,
            auth_required=settings.auth_required,
            amqp_enabled=settings.amqp.enabled,
            heartbeat_timeout_seconds=settings.timing.heartbeat_timeout_seconds,
            leader_stale_seconds=stale_after,
        ),
        leaders=leader_rows,
        followers="not recorded: only the leading director writes to the database (table leaders)",
        workers=workers,
        workers_note=(
            "table workers" if workers is not None else "no workers table in this database (it predates baton worker)"
        ),
        lease_owners=lease_owners(reading.lease_owners),
        broker=broker_status,
        outside_services=outside_services,
    )


def lease_owners(owners: Sequence[tuple[str | None, int]]) -> list[LeaseOwner]:
    """Schedulers per lease owner; the unowned first."""
    rows = [LeaseOwner(owner, count) for owner, count in owners]
    return sorted(rows, key=lambda row: (row.owner is not None, row.owner or ""))
