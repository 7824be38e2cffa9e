"""What a planner is given by its scheduler, and all it is given: the organisation and queue it plans
for, the settings, the catalogue, the clock, the one way to write (the scheduler's fenced transaction),
a way to ask for a pause after the turn, the process's links to outside services and a logger.

Planners never hold their scheduler: the scheduler reads the clock once per turn and hands the same
`now` to each planner's step, so one turn's tasks, claims and schedules agree on the time.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from structlog.typing import FilteringBoundLogger

from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec
from baton.core.settings import Settings
from baton.ingest.catalogue.lookups import PluginCatalogue
from baton.storage.engine import Session, Store

if TYPE_CHECKING:  # only a process with KATalogus configured loads the HTTP clients
    from baton.ingest.outside_links import OutsideLinks

SCHEDULERS_LOG = get_logger("baton.schedulers")


def scheduler_log(scheduler_id: str, runner: str) -> FilteringBoundLogger:
    """Bound when something is logged: tens of thousands of idle schedulers keep no logger each."""
    return SCHEDULERS_LOG.bind(scheduler=scheduler_id, runner=runner)


@dataclass(frozen=True, slots=True)
class Planning:
    spec: SchedulerSpec
    settings: Settings
    store: Store
    catalogue: PluginCatalogue
    clock: Callable[[], datetime]
    transaction: Callable[[], AbstractContextManager[Session]]  # fenced: nothing commits once the claim is lost
    pause: Callable[[float], None]  # the least pause before the scheduler's next turn
    runner: str
    links: OutsideLinks | None = None  # KATalogus, Octopoes, Bytes; None: Baton's own catalogue, no outside call

    @property
    def organisation(self) -> str:
        return self.spec.organisation

    @property
    def queue(self) -> str:
        return self.spec.id

    @property
    def grace(self) -> timedelta:
        """BATON_GRACE_PERIOD_SECONDS: how long after a (boefje, object) was queued it is not queued again."""
        return timedelta(seconds=self.settings.grace_period_seconds)

    @property
    def log(self) -> FilteringBoundLogger:
        return scheduler_log(self.spec.id, self.runner)

    def read(self) -> AbstractContextManager[Session]:
        """A transaction that only reads (no fencing check: it writes nothing)."""
        return self.store.session()
