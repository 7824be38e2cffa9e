"""Twins: a boefje task made for one organisation is made, with the same `deduplication_key`, for the
other organisations that KATalogus reports with identical settings of the boefje and that Octopoes says
hold the object (mula's is_boefje_in_other_orgs). OpenKAT's runner then scans once for all of them.

The maker of boefje tasks (boefje_tasks.py) notes each task it creates, in the database and in the
transaction that makes it (storage/queues/twin_checks.py), so a restart before the task is looked at loses
nothing; `step` takes the organisation's oldest notes and asks the outside services, outside any
transaction:
- KATalogus `GET /v1/configs?organisation_id&boefje_id&enabled=true&with_duplicates=true`: the other
  organisations sharing the settings, read once per boefje per poll (BATON_KATALOGUS_POLL_SECONDS) and
  kept, not once per task;
- Octopoes `GET /object-clients?reference&clients&valid_time`, only when there are such organisations:
  which of them hold the object, at what scan level; one object per call, so several calls at a time.
Then, in one fenced transaction, the same maker makes each twin (core/deduplication.py's rules): claimed
for its organisation's grace period and pushed into its organisation's queue with the original's priority;
the original, if still queued, gets its own id as key; the notes looked at are removed. A twin whose
queue is missing, disabled or full is left out.

Best effort: a failing KATalogus or Octopoes (logged once per outage by its client, tried once per poll
while it fails) leaves the original task as it was, without twins; so does Bytes, where it is configured
and asked about the twins' runs in their organisations (last_runs.py). Without KATalogus or Octopoes
configured, or BATON_DEDUPLICATE off, nothing is noted and the planner is not made at all.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from baton.core.deduplication import KEY, twin_document, twin_organisations
from baton.core.errors import NotFoundError, OutsideServiceError, QueueDisabledError, QueueFullError
from baton.core.model import SchedulerType, scheduler_id_for
from baton.core.queueing import PushRequest
from baton.ingest.outside_links import OutsideLinks
from baton.ingest.planners.boefje_tasks import BoefjeTaskMaker
from baton.ingest.planners.last_runs import with_last_runs
from baton.ingest.planning import Planning
from baton.storage.engine import Session
from baton.storage.queues.twin_checks import PendingTwinCheck, drop_twin_checks, pending_twin_checks
from baton.storage.queues.twins import mark_key

if TYPE_CHECKING:
    from baton.openkat.http import ServiceClient

T = TypeVar("T")
PER_TURN = 500  # noted tasks looked at per turn: a backfill's hundred thousand a turn at a time
CONCURRENT_CHECKS = 8  # Octopoes questions in flight at once, from one scheduler's turn
SKIPPED = (NotFoundError, QueueDisabledError, QueueFullError)


class TwinPlanner:
    def __init__(self, planning: Planning, links: OutsideLinks, tasks: BoefjeTaskMaker) -> None:
        self.planning = planning
        self.links = links
        self.tasks = tasks
        self._duplicates: dict[str, tuple[datetime, list[str]]] = {}  # boefje -> (read at, organisations)

    def step(self, now: datetime) -> int:
        """Look at up to PER_TURN noted tasks, make their twins and remove the notes; the notes looked at."""
        with self.planning.read() as session:
            batch = pending_twin_checks(session, self.planning.organisation, PER_TURN)
        if not batch:
            return 0
        eligible = [made for made in batch if made.data is not None]
        plans = [
            (made, twins) for made, twins in zip(eligible, self._all_twins_of(eligible, now), strict=True) if twins
        ]
        looked_at = [made.task_id for made in batch]
        try:
            self._ask_bytes(plans, now)
            with_last_runs(self.tasks.last_runs, now, lambda: self._write_all(plans, looked_at, now))
        except OutsideServiceError:  # Bytes did not answer: no twins this time, as with KATalogus or Octopoes
            with self.planning.transaction() as session:
                drop_twin_checks(session, looked_at)
        return len(batch)

    def _write_all(
        self, plans: Sequence[tuple[PendingTwinCheck, list[str]]], looked_at: list[uuid.UUID], now: datetime
    ) -> None:
        with self.planning.transaction() as session:
            for made, twins in plans:
                self._write(session, made, twins, now)
            drop_twin_checks(session, looked_at)

    def _ask_bytes(self, plans: Sequence[tuple[PendingTwinCheck, list[str]]], now: datetime) -> None:
        """With Bytes configured, what it says of the twins' runs in their organisations, asked before the
        transaction that claims them (one question per organisation's pairs, not one retry per twin)."""
        last_runs = self.tasks.last_runs
        if last_runs is None or not plans:
            return
        wanted: dict[str, list[tuple[str, str]]] = {}
        for made, twins in plans:
            for organisation in twins:
                wanted.setdefault(organisation, []).append((made.boefje_id, made.input_ooi))
        with self.planning.read() as session:
            unknowns = [
                last_runs.unknown(session, org, pairs, now, self.planning.grace) for org, pairs in wanted.items()
            ]
        for unknown in unknowns:
            if unknown is not None:
                last_runs.learn(unknown, now)

    def _all_twins_of(self, batch: Sequence[PendingTwinCheck], now: datetime) -> list[list[str]]:
        """Each noted task's twin organisations, in order. KATalogus is asked once per boefje first; then
        Octopoes, which answers one object per call, up to CONCURRENT_CHECKS calls at a time (one after
        another, a rescan round of a boefje every organisation shares waited out a round trip per task)."""
        others = {boefje_id: self._others(boefje_id, now) for boefje_id in {made.boefje_id for made in batch}}
        if len(batch) <= 1:
            return [self._twins_of(made, others[made.boefje_id], now) for made in batch]
        with ThreadPoolExecutor(min(CONCURRENT_CHECKS, len(batch)), thread_name_prefix="twin-check") as pool:
            return list(pool.map(lambda made: self._twins_of(made, others[made.boefje_id], now), batch))

    def _twins_of(self, made: PendingTwinCheck, others: list[str], now: datetime) -> list[str]:
        octopoes = self.links.octopoes
        if not others or octopoes is None:
            return []
        holders = self._answer(octopoes.http, now, lambda: octopoes.object_clients(made.input_ooi, others))
        if not holders:
            return []
        levels = {org: None if ooi.scan_profile is None else ooi.scan_profile.level for org, ooi in holders.items()}
        return twin_organisations(self.planning.organisation, others, levels, made.scan_level)

    def _others(self, boefje_id: str, now: datetime) -> list[str]:
        """The other organisations with this organisation's settings of the boefje (KATalogus), read at
        most once per poll."""
        known = self._duplicates.get(boefje_id)
        if known is not None and now - known[0] < timedelta(seconds=self.links.poll_seconds):
            return known[1]
        katalogus = self.links.katalogus
        organisation = self.planning.organisation
        configs = self._answer(katalogus.http, now, lambda: katalogus.boefje_configs(organisation, boefje_id))
        if configs is None:
            return []
        others = sorted({duplicate.organisation_id for config in configs for duplicate in config.duplicates})
        self._duplicates[boefje_id] = (now, others)
        return others

    def _answer(self, client: ServiceClient, now: datetime, request: Callable[[], T]) -> T | None:
        """The call's answer, or None when the service fails (or is failing: tried once per poll)."""
        try:
            return self.links.call(client, now, request)
        except OutsideServiceError:  # logged once per outage by the client
            return None

    def _write(self, session: Session, made: PendingTwinCheck, twins: Sequence[str], now: datetime) -> int:
        assert made.data is not None and made.priority is not None  # only checks whose task is there
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
        self, session: Session, organisation: str, made: PendingTwinCheck, request: PushRequest, key: str, now: datetime
    ) -> int:
        """1 when the twin was queued (or a queued twin there joined the group), 0 when the (boefje, object)
        ran there within the grace period."""
        result = self.tasks.make_twin(session, organisation, made.boefje_id, made.input_ooi, request, now)
        if result is None:
            return 0
        if result.created:
            return 1
        # A twin of the same work was queued there already (a manual run, say): it joins the group.
        return int(not result.task["data"].get(KEY) and mark_key(session, result.task["id"], result.task["data"], key))


def deduplicates(planning: Planning) -> bool:
    """Whether the scheduler makes twins: KATalogus and Octopoes configured and BATON_DEDUPLICATE on."""
    links = planning.links
    return links is not None and links.octopoes is not None and planning.settings.openkat.deduplicate
