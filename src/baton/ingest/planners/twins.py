"""Twins: a boefje task made for one organisation is made, with the same `deduplication_key`, for the
other organisations that KATalogus reports with identical settings of the boefje and that Octopoes says
hold the object (mula's is_boefje_in_other_orgs). OpenKAT's runner then scans once for all of them.

The boefje planner notes each task it creates (`note`); after the transaction that made them commits,
`step` asks the outside services, outside any transaction:
- KATalogus `GET /v1/configs?organisation_id&boefje_id&enabled=true&with_duplicates=true`: the other
  organisations sharing the settings, read once per boefje per poll (BATON_KATALOGUS_POLL_SECONDS) and
  kept, not once per task as mula does;
- Octopoes `GET /object-clients?reference&clients&valid_time`, only when there are such organisations:
  which of them hold the object, at what scan level.
Then, in one fenced transaction, each twin (core/deduplication.py's rules) is claimed for its organisation's
grace period and pushed into its organisation's queue with the original's priority, and the original, if
still queued, gets its own id as key. A twin whose queue is missing, disabled or full is left out.

Best effort, as in mula: a failing KATalogus or Octopoes (logged once per outage by its client, tried
once per poll while it fails) leaves the original task as it was, without twins; so does a restart
between the commit and the step. Without KATalogus or Octopoes configured, or BATON_DEDUPLICATE off,
the planner is not made at all.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from baton.core.deduplication import KEY, twin_document, twin_organisations
from baton.core.errors import NotFoundError, OutsideServiceError, QueueDisabledError, QueueFullError
from baton.core.model import SchedulerType, scheduler_id_for
from baton.core.queueing import PushRequest
from baton.ingest.scheduler import Scheduler
from baton.storage import queues
from baton.storage.boefje_runs import claim_boefje_runs
from baton.storage.deduplication import mark_key, task_exists
from baton.storage.engine import Session

if TYPE_CHECKING:
    from baton.ingest.katalogus import KatalogusLink
    from baton.openkat.http import ServiceClient

# Tasks looked at per turn, and noted at most (beyond it, new tasks get no twins): a backfill of a
# hundred thousand objects is looked at a turn at a time, without holding them all.
PER_TURN = 500
MAX_PENDING = 20_000
SKIPPED = (NotFoundError, QueueDisabledError, QueueFullError)


@dataclass(frozen=True)
class Made:
    """A task the boefje planner created, as the twins need it."""

    task_id: uuid.UUID
    boefje_id: str
    scan_level: int
    input_ooi: str
    priority: int
    data: Mapping[str, Any]


class TwinPlanner:
    def __init__(self, scheduler: Scheduler, link: KatalogusLink) -> None:
        self.scheduler = scheduler
        self.link = link
        self.organisation = scheduler.spec.organisation
        self.pending: deque[Made] = deque()
        self._duplicates: dict[str, tuple[datetime, list[str]]] = {}  # boefje -> (read at, organisations)

    def note(self, created: Sequence[Mapping[str, Any]], scan_levels: Mapping[str, int]) -> None:
        """Tasks just created (in a transaction not yet committed); `scan_levels`: boefje id -> its level."""
        for task in created:
            data = task["data"]
            input_ooi, boefje = data.get("input_ooi"), data.get("boefje", {}).get("id")
            if not input_ooi or boefje not in scan_levels or len(self.pending) >= MAX_PENDING:
                continue
            self.pending.append(Made(task["id"], boefje, scan_levels[boefje], input_ooi, task["priority"], data))

    def step(self, now: datetime) -> int:
        """Look at up to PER_TURN noted tasks; the twins made."""
        batch = [self.pending.popleft() for _ in range(min(PER_TURN, len(self.pending)))]
        plans = [(made, twins) for made in batch if (twins := self._twins_of(made, now))]
        if not plans:
            return 0
        with self.scheduler.transaction() as session:
            return sum(self._write(session, made, twins, now) for made, twins in plans)

    def _twins_of(self, made: Made, now: datetime) -> list[str]:
        others = self._others(made.boefje_id, now)
        octopoes = self.link.octopoes
        if not others or octopoes is None:
            return []
        holders = self._call(octopoes.http, now, lambda: octopoes.object_clients(made.input_ooi, others))
        if not holders:
            return []
        levels = {org: None if ooi.scan_profile is None else ooi.scan_profile.level for org, ooi in holders.items()}
        return twin_organisations(self.organisation, others, levels, made.scan_level)

    def _others(self, boefje_id: str, now: datetime) -> list[str]:
        """The other organisations with this organisation's settings of the boefje (KATalogus), read at
        most once per poll."""
        known = self._duplicates.get(boefje_id)
        if known is not None and now - known[0] < timedelta(seconds=self.link.poll_seconds):
            return known[1]
        katalogus = self.link.katalogus
        configs = self._call(katalogus.http, now, lambda: katalogus.boefje_configs(self.organisation, boefje_id))
        if configs is None:
            return []
        others = sorted({duplicate.organisation_id for config in configs for duplicate in config.duplicates})
        self._duplicates[boefje_id] = (now, others)
        return others

    def _call(self, client: ServiceClient, now: datetime, call: Any) -> Any:
        """The call's answer, or None when the service fails (or is failing: tried once per poll)."""
        if not self.link.may_call(client, now):
            return None
        try:
            return call()
        except OutsideServiceError:  # logged once per outage by the client
            self.link.failed(client, now)
            return None
        finally:
            self.link.observed(client)

    def _write(self, session: Session, made: Made, twins: Sequence[str], now: datetime) -> int:
        if not task_exists(session, made.task_id):  # its transaction was rolled back
            return 0
        key = str(made.task_id)
        written = 0
        for organisation in twins:
            data, task_hash = twin_document(made.data, organisation, uuid.uuid4())
            request = PushRequest(
                queue=scheduler_id_for(SchedulerType.BOEFJE, organisation),
                priority=made.priority,
                data=data,
                hash=task_hash,
                task_id=uuid.UUID(data["id"]),
            )
            try:
                with session.begin_nested():
                    written += self._push(session, organisation, made, request, key, now)
            except SKIPPED:
                continue
        if written:
            mark_key(session, made.task_id, made.data, key)
        return written

    def _push(
        self, session: Session, organisation: str, made: Made, request: PushRequest, key: str, now: datetime
    ) -> int:
        """1 when the twin was queued (or a queued twin there joined the group), 0 when the (boefje, object)
        ran there within the grace period."""
        grace = timedelta(seconds=self.scheduler.settings.grace_period_seconds)
        [claim] = claim_boefje_runs(session, organisation, [(made.boefje_id, made.input_ooi)], now, grace)
        if not claim.claimed:
            return 0
        result = queues.push(session, request, now)
        if result.created:
            return 1
        # A twin of the same work was queued there already (a manual run, say): it joins the group.
        return int(not result.task["data"].get(KEY) and mark_key(session, result.task["id"], result.task["data"], key))


def twin_planner(scheduler: Scheduler, link: KatalogusLink | None) -> TwinPlanner | None:
    """The scheduler's twin planner: only with KATalogus and Octopoes configured and BATON_DEDUPLICATE on."""
    if link is None or link.octopoes is None or not scheduler.settings.openkat.deduplicate:
        return None
    return TwinPlanner(scheduler, link)
