"""The services one API app serves with: the API and the status page reach the database only through
these. `baton/runtime.py` builds them from the settings and a store (`app_services`); the app takes them
as they are (`create_app(services)`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from baton.core.errors import DatabaseUnavailableError
from baton.core.outside_services import OutsideServiceStatus
from baton.core.settings import Settings
from baton.service.events import Events
from baton.service.metrics import Metrics
from baton.service.organisations import Organisations
from baton.service.plugins import Plugins
from baton.service.queues import QueueService
from baton.service.schedulers import Schedulers
from baton.service.schedules import Schedules
from baton.service.status import BrokerProbe, StatusService
from baton.service.status.control_plane import BrokerQueues
from baton.service.tasks import Tasks
from baton.service.token_cache import TokenCache


class Database(Protocol):
    """What readiness asks of the database (a storage `Store` is one)."""

    @property
    def dialect(self) -> str: ...

    def migrations_current(self) -> bool: ...


@dataclass(frozen=True)
class Readiness:
    problem: str | None  # why the app cannot serve (None: it can)
    outside: list[OutsideServiceStatus] = field(default_factory=list)  # KATalogus, Octopoes, Bytes

    @property
    def degraded(self) -> list[OutsideServiceStatus]:
        """The outside services failing now: Baton serves, but without what they give."""
        return [status for status in self.outside if status.state == "down"]


@dataclass
class AppServices:
    """`queue_service` and `status_service` make the services bound to the server's event loop (a queue
    door's pool, the wake-ups' listener): the app calls them in its lifespan."""

    settings: Settings
    database: Database
    metrics: Metrics
    tokens: TokenCache
    organisations: Organisations
    plugins: Plugins
    schedules: Schedules
    schedulers: Schedulers
    events: Events
    tasks: Tasks
    queue_service: Callable[[], QueueService]
    status_service: Callable[[QueueService, BrokerProbe | None], StatusService]
    # The status page's RabbitMQ probe, and the names of the queues it looks at (the ingest layer's).
    broker: Callable[[], BrokerProbe | None] = lambda: None
    broker_queues: BrokerQueues | None = None

    @property
    def dialect(self) -> str:
        return self.database.dialect

    def find_token(self, token: str) -> tuple[str, list[str]] | None:
        """The token's (name, scopes), from the cache or the database (this blocks)."""
        return self.tokens.lookup(token)

    def unready(self) -> str | None:
        """Why the app cannot serve yet (the database is unreachable, or its schema is not current);
        None: ready."""
        try:
            current = self.database.migrations_current()
        except DatabaseUnavailableError:
            return "database unreachable"
        return None if current else "migrations not applied"

    def readiness(self) -> Readiness:
        """`unready`, and when ready the state of the outside services (a failing one degrades Baton, it
        does not stop it)."""
        problem = self.unready()
        if problem is not None:
            return Readiness(problem)
        try:
            return Readiness(None, self.metrics.outside.statuses())
        except DatabaseUnavailableError:
            return Readiness("database unreachable")
