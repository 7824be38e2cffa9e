"""The services one API app serves with, built from its settings and its store: the API and the page
reach the database only through these.

The store is the app's one handle on the database; routes that need it pass it on to a service
function, so its type is named here for their annotations (`Store`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from baton.core.errors import DatabaseUnavailableError
from baton.core.outside_services import OutsideServiceStatus
from baton.core.settings import Settings
from baton.service.metrics import Metrics
from baton.service.queues import QueueService
from baton.service.status import BrokerProbe, StatusService
from baton.service.tokens import TokenCache
from baton.storage.engine import Store as Store
from baton.storage.queues.door import QueueDoor


@dataclass(frozen=True)
class Readiness:
    problem: str | None  # why the app cannot serve (None: it can)
    outside: list[OutsideServiceStatus] = field(default_factory=list)  # KATalogus, Octopoes, Bytes

    @property
    def degraded(self) -> list[OutsideServiceStatus]:
        """The outside services failing now: Baton serves, but without what they give."""
        return [status for status in self.outside if status.state == "down"]


class AppServices:
    def __init__(self, settings: Settings, store: Store | None = None) -> None:
        self.settings = settings
        self.store = store or Store(settings.database_url)
        self.metrics = Metrics(self.store, settings.openkat)
        self.tokens = TokenCache()

    def queue_service(self) -> QueueService:
        """A queue service of its own: its door's pool and wake-ups' listener belong to the event loop
        that makes it (the server's), and are closed with it (`QueueService.close`)."""
        settings = self.settings
        door = QueueDoor(
            self.store,
            deduplicate=settings.openkat.deduplicate,
            group_pops=settings.group_pops,
            receipt_seconds=settings.pop_receipt_seconds,
        )
        return QueueService(self.store, settings, door, self.metrics)

    def status_service(self, queues: QueueService, broker: BrokerProbe | None) -> StatusService:
        return StatusService(self.store, self.settings, queues, self.metrics, broker)

    def find_token(self, token: str) -> tuple[str, list[str]] | None:
        """The token's (name, scopes), from the cache or the database (this blocks)."""
        with self.store.session() as session:
            return self.tokens.lookup(session, token)

    def unready(self) -> str | None:
        """Why the app cannot serve yet (the database is unreachable, or its schema is not current);
        None: ready."""
        try:
            current = self.store.migrations_current()
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
