"""Schedulers: one per (organisation, type). They ingest events and rank work into their queue.

The same classes run in a thread, in a child process or in a Kubernetes pod: a scheduler only needs
a `SchedulerContext` (store, settings, where it runs, where its events come from).
"""

from __future__ import annotations

import random
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ClassVar

from pydantic import ValidationError
from sqlalchemy import event as orm_events
from sqlalchemy import select, text, tuple_
from sqlalchemy.orm import ORMExecuteState, Session

from baton.core.cron import next_cron_run
from baton.core.errors import (
    DatabaseUnavailableError,
    FencedError,
    NotFoundError,
    QueueDisabledError,
    QueueFullError,
    UnprocessableError,
)
from baton.core.jobs import (
    JOB_MODELS,
    Job,
    Normalizer,
    NormalizerJob,
    ReportJob,
    boefje_job,
    carries_its_task_id,
    job_document,
    job_hash,
)
from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType, TaskStatus, utcnow
from baton.core.settings import Settings
from baton.ingest.catalogue import BatchCatalogue, DatabaseCatalogue, PluginCatalogue
from baton.ingest.events import (
    EVENT_KIND,
    AnyEvent,
    DatabaseInbox,
    Delivery,
    EventSource,
    KatRawDataReceived,
    KatScanProfileMutation,
    RawFileReceived,
    ScanProfileMutation,
    event_organisation,
    object_scan_level,
    parse_event,
    raw_data_of,
)
from baton.ingest.ownership import Ownership
from baton.storage import queues
from baton.storage.engine import Store, insert_for, on_postgresql
from baton.storage.queues import PushRequest
from baton.storage.scheduler_leases import Claim, fence
from baton.storage.schedules import claim_due
from baton.storage.tables import BoefjeRun, Plugin, Task
from baton.storage.tables import Schedule as ScheduleRow

log = get_logger("baton.schedulers")


def default_source(spec: SchedulerSpec) -> EventSource | None:
    return None if spec.type is SchedulerType.REPORT else DatabaseInbox(spec.id)


@dataclass
class SchedulerContext:
    store: Store
    settings: Settings
    runner: str
    location: str
    source_factory: Callable[[SchedulerSpec], EventSource | None] = default_source
    catalogue: PluginCatalogue = field(default_factory=DatabaseCatalogue)
    clock: Callable[[], datetime] = utcnow
    ownership: Ownership | None = None  # shared by the schedulers of one process; made on first use

    def leases(self) -> Ownership:
        if self.ownership is None:
            self.ownership = Ownership(
                self.store, self.settings.leases, hung_after_seconds=self.settings.timing.heartbeat_timeout_seconds
            )
        return self.ownership


class Scheduler(ABC):
    """Lifecycle: `run()` claims the scheduler's row, loops until `stop()` (or until the claim is
    lost) and gives the row up. Its state and heartbeat ride on the process's lease renewals."""

    type: ClassVar[SchedulerType]
    batch_size: ClassVar[int] = 100

    def __init__(self, spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> None:
        self.spec = spec
        self.context = context
        self.store = context.store
        self.settings = context.settings
        self.claim = claim
        self._stop = threading.Event()
        self._lost: str | None = None
        self.enabled = True
        self.state = SchedulerState.STOPPED
        self._final = SchedulerState.STOPPED  # the state its row is given up with
        self._pause = 0.0
        self.log = log.bind(scheduler=spec.id, runner=context.runner)

    @property
    def id(self) -> str:
        return self.spec.id

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- ownership (Lessee) -------------------------------------------------------------------------

    def lease_lost(self, reason: str) -> None:
        """Someone else runs this scheduler now (or may soon): stop at once, write nothing more."""
        if self._lost is None:
            self._lost = reason
            self.log.warning("scheduler lost its lease; stopping without writing", reason=reason)
        self._stop.set()

    def set_enabled(self, enabled: bool) -> None:
        self.enabled = enabled

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """The one way a scheduler writes: one transaction in which its first write is preceded by
        the fencing check of its claim (storage/scheduler_leases.py), so nothing commits once another term
        holds the row. A round that only reads (an empty inbox) costs no check."""
        if self._lost is not None:
            raise FencedError(self._lost)
        claim = self.try_claim()  # run() claims first; a tick driven directly claims here
        if claim is None:
            raise FencedError(f"scheduler '{self.id}' is held by another owner (or its organisation is gone)")
        with self.store.session() as session, fenced_before_first_write(session, claim):
            yield session

    def _report(self, state: SchedulerState) -> None:
        self.state = state
        self.context.leases().report(self.id, state.value)

    def try_claim(self) -> Claim | None:
        """The scheduler's claim: the one it has, or one attempt at its row (None: held elsewhere)."""
        if self.claim is None:
            self.claim = self.context.leases().claim([self.id], runner=self.context.runner).get(self.id)
        return self.claim

    def _wait_for_claim(self) -> Claim | None:
        """A previous instance that died without giving the row up holds it until its lease ends:
        wait for that (or for a stop) rather than fail and be restarted in a loop."""
        said = False
        while not self._stop.is_set():
            claim = self.try_claim()
            if claim is not None:
                return claim
            if not said:
                self.log.info("waiting for the scheduler's lease to be free (held elsewhere, or organisation gone)")
                said = True
            self._stop.wait(self.settings.leases.retry_period_seconds)
        return None

    def run(self) -> None:
        """A scheduler with a thread (or a process) of its own: claim, loop until stopped, give up.
        The thread runner's schedulers take turns on a few threads instead (control/tickpool.py),
        through the same `try_claim`, `take`, `begin`, `step` and `end`."""
        self.context.leases().start_in_background()
        claim = self._wait_for_claim()
        if claim is None:
            return
        self.take(claim)
        try:
            self.begin()
            self._stop.wait(self.first_tick_delay())
            while not self._stop.is_set():
                self._stop.wait(self.step())
        except Exception:
            self.failed()
            raise
        finally:
            self.end()

    def take(self, claim: Claim) -> None:
        """Renew `claim` from now on on this scheduler's behalf (a claimed row is never left unheld)."""
        self.claim = claim
        self.context.leases().hold(claim, self)

    def begin(self) -> None:
        if self.claim is not None:
            self.log.info("scheduler starting", term=self.claim.term, owner=self.claim.owner)
        self._report(SchedulerState.STARTING)
        self.setup()
        self._report(SchedulerState.RUNNING)

    def step(self) -> float:
        """One turn: tick (unless the queue is disabled); the seconds to pause before the next turn.
        Raises what a tick raises, but for the fencing refusal (the scheduler stops) and an
        unreachable database (it backs off)."""
        self._report(SchedulerState.RUNNING)
        idle = self.settings.timing.poll_interval_seconds
        if not self.enabled:
            return idle
        try:
            done = self.tick()
        except FencedError as exc:
            self.lease_lost(str(exc))
            return 0.0
        except DatabaseUnavailableError as exc:  # also: every pooled connection busy (many schedulers)
            self.log.warning("database unavailable; backing off", error=exc.reason)
            return self._back_off_seconds()
        requested, self._pause = self._pause, 0.0
        return max(requested, 0.0 if done else idle)

    def pause(self, seconds: float) -> None:
        """Ask for a pause after this tick (a tick never sleeps: it may share its thread)."""
        self._pause = max(self._pause, seconds)

    def _back_off_seconds(self) -> float:
        return min(5.0, self.settings.timing.poll_interval_seconds * 5)

    def failed(self) -> None:
        """The loop raised: log it; the row is given up as failed."""
        self.log.exception("scheduler failed")
        self._final = SchedulerState.FAILED

    def end(self) -> None:
        try:
            self.teardown()
        finally:
            if self.claim is not None:
                self._give_up(self.claim, self._final)

    def first_tick_delay(self) -> float:
        """Schedulers often start by the thousand (a worker taking over a peer's share, a director's
        first round): their first ticks are spread over one poll interval, so the ones started first
        do not hold the interpreter and the pool while the rest are still being started."""
        return random.uniform(0, self.settings.timing.poll_interval_seconds)

    def _give_up(self, claim: Claim, state: SchedulerState) -> None:
        self.state = state
        if self._lost is not None:
            self.context.leases().forget(self.id)
            return
        try:
            self.context.leases().release(claim, state.value)
        except Exception:  # the database may be the reason we are stopping; the lease then expires
            self.log.warning("could not release the scheduler's lease", state=state.value)
        self.log.info("scheduler stopped", state=state.value)

    def setup(self) -> None:
        """Hook run once before the loop (open connections, etc.)."""
        return None

    def teardown(self) -> None:
        """Hook run once after the loop."""
        return None

    @abstractmethod
    def tick(self) -> int:
        """Do one round of work; return how much was done (0 lets the loop sleep)."""


# What makes one event of a batch unhandleable now: the batch is then handled one event at a time.
EVENT_FAILURES = (QueueFullError, UnprocessableError, NotFoundError, QueueDisabledError)


@dataclass
class Settlement:
    """What became of a batch's deliveries: handled (or rejected) ones are acked after the commit,
    deferred ones (the queue is full) are given back."""

    handled: list[Delivery] = field(default_factory=list)
    deferred: list[Delivery] = field(default_factory=list)


class EventDrivenScheduler(Scheduler):
    """Turns events from its source into tasks; ack only after the commit that handled them.

    A batch of events is handled in one transaction: parsed, planned together (one catalogue lookup
    per distinct question, one query for what exists already) and pushed in one statement. Only when
    one of its events cannot be handled (queue full, unprocessable) is the batch redone one event at
    a time, each in a savepoint, to find which: those are rejected or deferred, the rest handled.
    """

    def __init__(self, spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> None:
        super().__init__(spec, context, claim)
        self.source: EventSource | None = None
        self.events_handled = 0

    def setup(self) -> None:
        self.source = self.context.source_factory(self.spec)

    def teardown(self) -> None:
        if self.source is not None:
            self.source.close()

    def tick(self) -> int:
        if self.source is None:
            return 0
        received: Sequence[Delivery] = []
        try:
            with self.transaction() as session:
                received = self.source.receive(session, self.batch_size)
                settlement = self._handle_deliveries(session, received)
        except Exception:
            for delivery in received:
                delivery.nack()
            raise
        for delivery in settlement.handled:
            delivery.ack()
        self.events_handled += len(settlement.handled)
        for delivery in settlement.deferred:
            delivery.nack()
        if settlement.deferred:  # queue full: give job runners time to drain it
            self.pause(self.settings.timing.poll_interval_seconds)
        return len(settlement.handled)

    def _handle_deliveries(self, session: Session, deliveries: Sequence[Delivery]) -> Settlement:
        settlement = Settlement()
        parsed: list[tuple[Delivery, AnyEvent]] = []
        for delivery in deliveries:
            try:
                parsed.append((delivery, parse_event(delivery.payload)))
            except ValidationError as exc:
                self._reject(session, delivery, f"malformed event: {exc.errors(include_url=False)}")
                settlement.handled.append(delivery)
        if not parsed:
            return settlement
        try:
            with session.begin_nested():
                self.handle_batch(session, [event for _, event in parsed])
        except EVENT_FAILURES:
            self._handle_one_by_one(session, parsed, settlement)
            return settlement
        for delivery, _ in parsed:
            delivery.settle(session)
            settlement.handled.append(delivery)
        return settlement

    def _handle_one_by_one(
        self, session: Session, parsed: Sequence[tuple[Delivery, AnyEvent]], settlement: Settlement
    ) -> None:
        for index, (delivery, event) in enumerate(parsed):
            if not self._handle_event(session, delivery, event):
                settlement.deferred.extend(delivery for delivery, _ in parsed[index:])
                return
            settlement.handled.append(delivery)

    def _handle_event(self, session: Session, delivery: Delivery, event: AnyEvent) -> bool:
        """Handle one event in a savepoint. False: the queue is full, stop this batch."""
        try:
            with session.begin_nested():
                self.handle(session, event)
        except QueueFullError:
            self.log.warning("queue full; event deferred")
            return False
        except (UnprocessableError, NotFoundError, QueueDisabledError) as exc:
            self._reject(session, delivery, f"unprocessable event: {exc}")
            return True
        delivery.settle(session)
        return True

    def _reject(self, session: Session, delivery: Delivery, reason: str) -> None:
        self.log.warning("event rejected", reason=reason)
        delivery.reject(reason)
        delivery.settle(session)
        row = getattr(delivery, "row", None)
        if row is not None:
            row.error = reason

    def handle(self, session: Session, event: AnyEvent) -> list[dict[str, object]]:
        """Create the tasks one event calls for."""
        return self.handle_batch(session, [event])

    @abstractmethod
    def handle_batch(self, session: Session, events: Sequence[AnyEvent]) -> list[dict[str, object]]:
        """Create the tasks these events call for, exactly as handling them one after another would;
        raise as `handle` would for the first event that cannot be handled."""

    def check_organisation(self, event: AnyEvent) -> None:
        named = event_organisation(event)
        if named is not None and named != self.spec.organisation:
            raise UnprocessableError(
                f"event for organisation '{named}' reached the scheduler of '{self.spec.organisation}'"
            )


@contextmanager
def fenced_before_first_write(session: Session, claim: Claim) -> Iterator[None]:
    """Run the fencing check just before the session's first write: an INSERT/UPDATE/DELETE it
    executes, or a flush of changed objects. Its FOR SHARE lock then lasts until the commit."""
    checked = False

    def check() -> None:
        nonlocal checked
        if not checked:
            checked = True
            with session.no_autoflush:
                fence(session, claim)

    def on_execute(state: ORMExecuteState) -> None:
        if state.is_insert or state.is_update or state.is_delete:
            check()

    def on_flush(flushing: Session, _context: object, _instances: object) -> None:
        if flushing.new or flushing.dirty or flushing.deleted:
            check()

    orm_events.listen(session, "do_orm_execute", on_execute)
    orm_events.listen(session, "before_flush", on_flush)
    try:
        yield
        session.flush()  # pending changes are written (and so fenced) inside the transaction
    finally:
        orm_events.remove(session, "do_orm_execute", on_execute)
        orm_events.remove(session, "before_flush", on_flush)


def rank_boefje_task(previous_run: datetime | None, now: datetime) -> int:
    """Never-run pairs first (1); then the longer since the last run, the sooner (2..169)."""
    if previous_run is None:
        return 1
    hours_since = int((now - previous_run).total_seconds() // 3600)
    return 2 + max(0, 167 - hours_since)


def fire_due_schedules(scheduler: Scheduler, session: Session, now: datetime) -> int:
    """Turn the scheduler's due schedules into tasks. A cron schedule's next deadline is counted from
    `now`, not from the missed slot: however many runs were missed, one task catches up."""
    due = claim_due(session, scheduler.type.value, scheduler.spec.organisation, now, scheduler.batch_size)
    for schedule in due:
        task_id = uuid.uuid4()
        job = scheduled_job(scheduler.type, schedule, task_id)
        request = PushRequest(
            queue=scheduler.id,
            priority=1,
            data=job_document(job),
            hash=job_hash(job),
            schedule_id=str(schedule.id),
            task_id=task_id,
        )
        queues.push(session, request, utcnow())
        schedule.last_run_at = now
        schedule.deadline_at = next_cron_run(schedule.schedule, now) if schedule.schedule else None
    return len(due)


def scheduled_job(kind: SchedulerType, schedule: ScheduleRow, task_id: uuid.UUID) -> Job:
    data = dict(schedule.data)
    if kind is SchedulerType.REPORT:
        data.setdefault("report_recipe_id", str(schedule.id))
        data["organisation_id"] = schedule.organisation
        return ReportJob.model_validate(data)
    model = JOB_MODELS[kind]
    job = model.model_validate(data)
    if carries_its_task_id(kind):
        job.id = task_id  # type: ignore[attr-defined]
    return job


class BoefjeScheduler(EventDrivenScheduler):
    """Scan-profile events (and due boefje schedules) become boefje jobs, one per enabled boefje that
    may scan the object, unless that (boefje, object) ran within the grace period."""

    type = SchedulerType.BOEFJE

    def tick(self) -> int:
        handled = super().tick()
        with self.transaction() as session:
            return handled + fire_due_schedules(self, session, self.context.clock())

    def handle_batch(self, session: Session, events: Sequence[AnyEvent]) -> list[dict[str, object]]:
        catalogue = BatchCatalogue(self.context.catalogue)
        now = self.context.clock()
        organisation = self.spec.organisation
        wanted = [pair for event in events for pair in self._wanted(session, event, catalogue)]
        claims = claim_boefje_runs(session, organisation, [(boefje.id, key) for boefje, key in wanted], now, self.grace)
        requests: list[PushRequest] = []
        for (boefje, object_key), claim in zip(wanted, claims, strict=True):
            if not claim.claimed:
                continue
            task_id = uuid.uuid4()
            job = boefje_job(
                task_id, boefje.id, boefje.name, boefje.version, boefje.oci_image, object_key, organisation
            )
            requests.append(
                PushRequest(
                    queue=self.id,
                    priority=rank_boefje_task(claim.previous_run, now),
                    data=job_document(job),
                    hash=job_hash(job),
                    task_id=task_id,
                )
            )
        return [result.task for result in queues.push_many(session, requests, utcnow())]

    def _wanted(self, session: Session, event: AnyEvent, catalogue: PluginCatalogue) -> list[tuple[Plugin, str]]:
        """(boefje, object) for every enabled boefje that may scan the event's object."""
        if not isinstance(event, ScanProfileMutation | KatScanProfileMutation):
            raise UnprocessableError(f"boefje scheduler cannot handle '{EVENT_KIND[type(event)]}' events")
        self.check_organisation(event)
        change = object_scan_level(event)
        if change.operation == "delete" or change.object_type is None or change.scan_level is None:
            return []
        boefjes = catalogue.boefjes_for(session, self.spec.organisation, change.object_type, change.scan_level)
        return [(boefje, change.primary_key) for boefje in boefjes]

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.settings.grace_period_seconds)


@dataclass(frozen=True)
class RunClaim:
    """The answer to claiming one (boefje, object) run: whether it is ours now, and its previous run."""

    claimed: bool
    previous_run: datetime | None


def claim_boefje_runs(
    session: Session, organisation: str, pairs: Sequence[tuple[str, str]], now: datetime, grace: timedelta
) -> list[RunClaim]:
    """Atomically record that each (boefje, object) is queued now, unless it was within the grace
    period; one answer per pair, in order, as if claimed one after another (a pair that comes again
    was queued `now` by its first claim). One upsert, so two schedulers handling the same event at
    once cannot both claim a pair."""
    if not pairs:
        return []
    distinct = list(dict.fromkeys(pairs))
    key = tuple_(BoefjeRun.boefje_id, BoefjeRun.object_key)
    previous: dict[tuple[str, str], datetime] = {
        (boefje_id, object_key): queued_at
        for boefje_id, object_key, queued_at in session.execute(
            select(BoefjeRun.boefje_id, BoefjeRun.object_key, BoefjeRun.queued_at).where(
                BoefjeRun.organisation == organisation, key.in_(distinct)
            )
        )
    }
    stmt = (
        insert_for(session)(BoefjeRun)
        .values(
            [
                {"organisation": organisation, "boefje_id": boefje_id, "object_key": object_key, "queued_at": now}
                for boefje_id, object_key in distinct
            ]
        )
        .on_conflict_do_update(
            index_elements=[BoefjeRun.organisation, BoefjeRun.boefje_id, BoefjeRun.object_key],
            set_={"queued_at": now},
            where=BoefjeRun.queued_at <= now - grace,
        )
        .returning(BoefjeRun.boefje_id, BoefjeRun.object_key)
    )
    won = {(boefje_id, object_key) for boefje_id, object_key in session.execute(stmt)}
    first: dict[tuple[str, str], RunClaim] = {}
    claims: list[RunClaim] = []
    for pair in pairs:
        if pair not in first:
            first[pair] = RunClaim(pair in won, previous.get(pair))
            claims.append(first[pair])
        elif first[pair].claimed:  # queued a moment ago by its first claim
            claims.append(RunClaim(grace <= timedelta(0), now))
        else:
            claims.append(first[pair])
    return claims


class NormalizerScheduler(EventDrivenScheduler):
    """Raw-file events become normalizer jobs, one per enabled normalizer that reads one of the file's
    mime types; the job carries the whole raw file with the boefje job that produced it."""

    type = SchedulerType.NORMALIZER

    def handle_batch(self, session: Session, events: Sequence[AnyEvent]) -> list[dict[str, object]]:
        catalogue = BatchCatalogue(self.context.catalogue)
        planned = [job for event in events for job in self._plan(session, event, catalogue)]
        requests = self._not_handled_yet(session, planned)
        return [result.task for result in queues.push_many(session, requests, utcnow())]

    def _plan(self, session: Session, event: AnyEvent, catalogue: PluginCatalogue) -> list[PlannedJob]:
        if not isinstance(event, RawFileReceived | KatRawDataReceived):
            raise UnprocessableError(f"normalizer scheduler cannot handle '{EVENT_KIND[type(event)]}' events")
        self.check_organisation(event)
        raw = raw_data_of(event, self.spec.organisation, self.context.clock())
        mime_types = [mime["value"] for mime in raw.mime_types if mime.get("value")]
        if any(mime.startswith("error/") for mime in mime_types):
            return []  # the boefje failed: nothing to normalise (as OpenKAT does)
        planned: list[PlannedJob] = []
        for plugin in catalogue.normalizers_for(session, self.spec.organisation, mime_types):
            task_id = uuid.uuid4()
            job = NormalizerJob(
                id=task_id,
                normalizer=Normalizer(id=plugin.id, name=plugin.name, version=plugin.version),
                raw_data=raw,
            )
            digest = job_hash(job)
            request = PushRequest(queue=self.id, priority=1, data=job_document(job), hash=digest, task_id=task_id)
            planned.append(PlannedJob(request, str(raw.id)))
        return planned

    def _not_handled_yet(self, session: Session, planned: Sequence[PlannedJob]) -> list[PushRequest]:
        """Leave out a job whose task exists (a redelivered event), or that an earlier event of the
        batch asked for already (its task exists by the time this one's turn comes)."""
        done = handled_raw_files(session, self.id, {job.request.hash for job in planned if job.request.hash})
        requests: list[PushRequest] = []
        for job in planned:
            key = (job.request.hash, job.raw_id)
            if key not in done:
                done.add(key)
                requests.append(job.request)
        return requests


@dataclass(frozen=True)
class PlannedJob:
    request: PushRequest
    raw_id: str


def handled_raw_files(session: Session, scheduler_id: str, digests: set[str]) -> set[tuple[str | None, str]]:
    """(hash, raw file id) of the tasks with one of these hashes that are not failed or cancelled:
    a normalizer (in the hash) has a live task for that raw file."""
    if not digests:
        return set()
    if on_postgresql(session):
        rows = session.execute(LIVE_RAW_FILES, {"scheduler_id": scheduler_id, "digests": sorted(digests)})
    else:
        rows = session.execute(
            select(Task.hash, Task.data[("raw_data", "id")].as_string()).where(
                Task.scheduler_id == scheduler_id,
                Task.hash.in_(digests),
                Task.status.not_in([TaskStatus.FAILED.value, TaskStatus.CANCELLED.value]),
            )
        )
    return {(digest, found) for digest, found in rows if found is not None}


# One index probe per hash, whatever the statistics say: `hash = ANY(...)` may be planned as a scan
# of all the queue's tasks when the planner believes the queue is small (a new one, stale stats).
# OFFSET 0 keeps the lateral subquery from being flattened into a join that could be planned so.
LIVE_RAW_FILES = text("""
SELECT d.hash, t.raw_id
FROM unnest(CAST(:digests AS text[])) AS d(hash)
CROSS JOIN LATERAL (
  SELECT data #>> '{raw_data,id}' AS raw_id FROM tasks
  WHERE scheduler_id = :scheduler_id AND hash = d.hash AND status NOT IN ('failed', 'cancelled')
  OFFSET 0
) t
""")


class ReportScheduler(Scheduler):
    """Due report schedules become OpenKAT report jobs."""

    type = SchedulerType.REPORT

    def tick(self) -> int:
        with self.transaction() as session:
            return fire_due_schedules(self, session, self.context.clock())


SCHEDULER_CLASSES: dict[SchedulerType, type[Scheduler]] = {
    SchedulerType.BOEFJE: BoefjeScheduler,
    SchedulerType.NORMALIZER: NormalizerScheduler,
    SchedulerType.REPORT: ReportScheduler,
}


def build_scheduler(spec: SchedulerSpec, context: SchedulerContext, claim: Claim | None = None) -> Scheduler:
    return SCHEDULER_CLASSES[spec.type](spec, context, claim)
