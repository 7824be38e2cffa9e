"""The queue service: push, pop and status changes, for both HTTP dialects and the status page.

Each HTTP dialect only translates paths and bodies; the rules live here or below: the size limit
on `data`, where a pop looks (one queue, or every queue of a type in fair or strict order), the
caps of organisations with `max_in_flight`, the metrics every pop and push feeds, and long-poll.

Long-poll (a pop with `wait`): a pop that finds nothing may wait for a task. It registers as a
waiter, makes sure queued tasks are announced from then on, and pops again, so a task queued in
between is not missed; then it sleeps until a wake-up names its queue (or its type), and pops
again: the same pop statement, so no task is handed out twice. Wake-ups come from the database
(storage/queues/wakeups.py) and, for this process's own pushes and hand-backs, from here; each wakes one
waiter of the queue and one of its type, which pass it on while they find tasks (see `Waiters`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

import orjson

from baton.core import deadline
from baton.core.errors import BatonError, DatabaseUnavailableError, NotFoundError, PayloadTooLargeError
from baton.core.jobs import BoefjeJob, Job, job_document, job_hash, recognised_job
from baton.core.listing import Page, PageRequest
from baton.core.model import SchedulerType, TaskStatus, queue_type, utcnow
from baton.core.queueing import PopRequest, PopTarget, PushRequest, PushResult, TaskRow
from baton.core.rescans import pushed_schedule
from baton.core.settings import Settings
from baton.core.views import QueueView as QueueView
from baton.service.metrics import Metrics
from baton.service.receipts import Settler, Settles

CAPS_REFRESH_SECONDS = 2.0
PLUGIN_TIMINGS_SECONDS = 5.0
SCHEDULER_TYPES = frozenset(kind.value for kind in SchedulerType)


class QueueDoor(Settles, Protocol):
    """The queue door (storage/queues/door.py): each call becomes its statement, sent over the backend's
    link. Called directly on the hot path: this Protocol is only its type."""

    async def pop(
        self, request: PopRequest, *, now: datetime, receipt: uuid.UUID | None = None, caps: bool = False
    ) -> list[TaskRow]: ...

    async def queue_exists(self, queue_id: str) -> bool: ...

    async def any_caps(self) -> bool: ...

    async def plugin_timings(self) -> dict[str, tuple[str | None, int | None]]: ...

    async def push(self, request: PushRequest, now: datetime) -> PushResult: ...

    async def change_status(self, task_id: uuid.UUID, requested: TaskStatus, now: datetime) -> dict[str, Any]: ...

    async def task(self, task_id: uuid.UUID) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class QueueRecords(Protocol):
    """The queues as listed, and the organisations a push names (storage/ports/queues.py)."""

    @property
    def is_postgresql(self) -> bool: ...

    def adopt_organisation(self, organisation: str, *, auto: bool, maxsize: int) -> bool: ...

    def queues_page(self, request: PageRequest) -> Page[QueueView]: ...

    def queue(self, queue_id: str) -> QueueView: ...


OnQueued = Callable[[str], None]
OnAnything = Callable[[], None]
OnLost = Callable[[], None]
HasWaiters = Callable[[], bool]


class Wakeups(Protocol):
    """Word that a queue may have a queued task now (storage/queues/wakeups.py: PostgreSQL's LISTEN,
    SQLite's change counter)."""

    @property
    def live(self) -> bool:
        """True while every newly queued task is announced; else waiters must look for themselves."""
        ...

    def start(self, on_queued: OnQueued, on_anything: OnAnything, on_lost: OnLost, has_waiters: HasWaiters) -> None: ...

    async def watch(self) -> None:
        """Called by a waiter before each pop: returns when tasks queued after it will be announced
        (or when they cannot be, and `live` is False)."""
        ...

    async def close(self) -> None: ...


def check_data_size(data: object, limit: int) -> None:
    size = len(orjson.dumps(data))
    if size > limit:
        raise PayloadTooLargeError(f"data: {size} bytes exceeds the limit of {limit} bytes")


class TooManyWaitersError(BatonError):
    """The process holds as many waiting pops as it may (BATON_POP_MAX_WAITERS): answered 429."""


def waiter_key(target: PopTarget) -> str:
    return f"queue:{target.queue}" if target.queue is not None else f"type:{target.type}"


def queued_keys(queue_id: str) -> tuple[str, ...]:
    """The waiters a task queued in `queue_id` may satisfy: that queue's and its type's."""
    task_type = queue_id.partition("-")[0]
    return (f"queue:{queue_id}", f"type:{task_type}") if task_type in SCHEDULER_TYPES else (f"queue:{queue_id}",)


class Waiter:
    def __init__(self, filtered: bool) -> None:
        self.woken = asyncio.Event()
        self.filtered = filtered  # it may not want what others would take: always woken
        self.passes_on = False  # leaving, it wakes the next waiter: more may be queued


class Waiters:
    """The pops waiting in this process, by what they wait for; a bounded number.

    A wake-up wakes one waiter per queue and type (the longest waiting), not all of them: a push of
    one task to a queue with 500 idle runners costs two pops, not 500. The woken waiter passes the
    wake-up on when it got a task (more may be queued), when it failed or left without looking, but
    not when it found nothing. Waiters with a filter are always woken: they may not take what others
    would."""

    def __init__(self, limit: int, gauge: Any) -> None:
        self.limit = limit
        self._gauge = gauge
        self._by_key: dict[str, dict[Waiter, None]] = {}  # insertion order: the longest waiting first
        self.count = 0
        self.closed = False  # the server is stopping: nobody waits any more

    @property
    def full(self) -> bool:
        return self.count >= self.limit

    @contextlib.contextmanager
    def waiting(self, key: str, filtered: bool = False) -> Iterator[Waiter]:
        waiter = Waiter(filtered)
        self._by_key.setdefault(key, {})[waiter] = None
        self._counted(+1)
        try:
            yield waiter
        finally:
            self._counted(-1)
            others = self._by_key.get(key)
            if others is not None:
                others.pop(waiter, None)
                if not others:
                    del self._by_key[key]
            if waiter.passes_on or waiter.woken.is_set():  # a wake-up it did not use goes to another
                self._wake_one(key)

    def _counted(self, change: int) -> None:
        self.count += change
        self._gauge.set(self.count)

    def _wake_one(self, key: str) -> None:
        woke = False
        for waiter in self._by_key.get(key, ()):
            if waiter.filtered:
                waiter.woken.set()
            elif not woke:
                woke = True
                if not waiter.woken.is_set():
                    waiter.woken.set()

    def wake(self, queue_id: str) -> None:
        for key in queued_keys(queue_id):
            self._wake_one(key)

    def wake_all(self) -> None:
        """Something may be queued, nobody knows where: one waiter of each queue and type looks."""
        for key in list(self._by_key):
            self._wake_one(key)

    def wake_everyone(self) -> None:
        """Every waiter looks (and decides afresh how long to sleep)."""
        for waiters in self._by_key.values():
            for waiter in waiters:
                waiter.woken.set()

    def close(self) -> None:
        self.closed = True
        self.wake_everyone()


async def sleep_until(woken: asyncio.Event, gone: asyncio.Event | None, timeout: float) -> None:
    """Until a wake-up, the client leaving, or `timeout` seconds."""
    waits = [asyncio.ensure_future(woken.wait())]
    if gone is not None:
        waits.append(asyncio.ensure_future(gone.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


class QueueService:
    def __init__(
        self, records: QueueRecords, settings: Settings, door: QueueDoor, metrics: Metrics, wakeups: Wakeups
    ) -> None:
        self.records = records
        self.settings = settings
        self.door = door
        self.metrics = metrics
        self._caps_known_at = float("-inf")
        self._caps = False
        self._timings_read_at = float("-inf")
        self._timings: dict[str, tuple[str | None, int | None]] = {}
        self.waiters = Waiters(settings.pop_max_waiters, metrics.pop_waiters)
        self.wakeups = wakeups
        self.settler = Settler(door, settings.db_wait_seconds, metrics.handed_back)

    def start(self) -> None:
        """Start listening for queued tasks (on the server's event loop)."""
        self.wakeups.start(
            self.waiters.wake, self.waiters.wake_all, self.waiters.wake_everyone, lambda: self.waiters.count > 0
        )

    def stop_waiting(self) -> None:
        """The server is stopping: waiting pops answer now (empty), new ones do not wait."""
        self.waiters.close()

    # -- the hot path ------------------------------------------------------------------------------
    def target(self, queue: str | None = None, task_type: str | None = None) -> PopTarget:
        if task_type is not None:
            return PopTarget(type=task_type, fair=self.settings.fairness)
        return PopTarget(queue=queue)

    async def _caps_in_use(self) -> bool:
        """Whether any organisation has a `max_in_flight` (checked every few seconds, not per pop;
        through the queue door: a blocking query here would stall every request on the event loop)."""
        if time.monotonic() - self._caps_known_at > CAPS_REFRESH_SECONDS:
            self._caps_known_at = time.monotonic()  # first: concurrent pops do not all ask at once
            self._caps = await self.door.any_caps()
        return self._caps

    async def pop(self, request: PopRequest, gone: asyncio.Event | None = None) -> list[TaskRow]:
        """Hand out up to `request.limit` tasks (each to this caller only); [] when there are none. With
        `request.wait`, a pop that finds nothing waits up to that many seconds for a task (long-poll): []
        when none came, the client left (`gone`) or the server is stopping. With an idempotency key, a
        pop that used the same key on the same target within BATON_POP_RECEIPT_SECONDS answers again the
        tasks it took, not new ones (core/receipts.py).

        An unknown queue raises NotFoundError (an empty one answers []). Each attempt answers within the
        request's deadline (BATON_DB_WAIT_SECONDS), or DatabaseUnavailableError. TooManyWaitersError when
        it would wait and the process holds its limit of waiters."""
        tasks = await self._attempt(request)
        if tasks or request.wait <= 0 or self.waiters.closed:
            return tasks
        if self.waiters.full:
            raise TooManyWaitersError(
                f"wait: this server already holds {self.waiters.limit} waiting pops (BATON_POP_MAX_WAITERS); "
                "pop again later, or without `wait`"
            )
        loop = asyncio.get_running_loop()
        ends = loop.time() + request.wait
        with self.waiters.waiting(waiter_key(request.target), filtered=request.filters is not None) as waiter:
            while True:
                await self.wakeups.watch()  # from here on a queued task is announced (or `live` is False)
                waiter.woken.clear()  # before the pop: a wake-up during the pop makes it look again
                waiter.passes_on = True  # should the pop fail, another waiter looks instead
                with deadline.starting(self._wait):  # each attempt after a wait has a deadline of its own
                    tasks = await self._attempt(request)
                if tasks and gone is not None and gone.is_set():
                    self.hand_back(tasks)  # the client hung up meanwhile: nobody would receive them
                    tasks = []
                waiter.passes_on = bool(tasks)
                remaining = ends - loop.time()
                if tasks or remaining <= 0 or self.waiters.closed:
                    return tasks
                if not self.wakeups.live or (request.target.type is not None and self._caps):
                    # No wake-up announces a finished task freeing an organisation's max_in_flight.
                    remaining = min(remaining, self.settings.pop_recheck_seconds)
                await sleep_until(waiter.woken, gone, remaining)
                if gone is not None and gone.is_set():
                    return []  # before popping: nobody would receive the task

    async def _attempt(self, request: PopRequest) -> list[TaskRow]:
        """One pop through the door, within the deadline in force. A pop that failed or was given up
        leaves its receipt to settle: its tasks, if it committed, go back to their queue."""
        receipt, now = uuid.uuid4(), utcnow()

        def late(rows: Any, error: BaseException | None) -> None:
            if error is None:
                self.settler.unanswered(rows)
            elif not isinstance(error, NotFoundError):
                self.settler.unknown_soon(receipt, now)

        try:
            return await deadline.within(self._pop(request, receipt, now), self._wait, late)
        except NotFoundError:
            raise
        except DatabaseUnavailableError:
            # It may have committed (an acknowledgement lost on the way), or may yet (given up at the
            # deadline: `late` also settles what it does when it ends): settled, and remembered in the
            # database for a second settling, before the client hears of it.
            await self.settler.unknown(receipt, now)
            raise
        except BaseException:
            self.settler.unknown_soon(receipt, now)
            raise

    async def _pop(self, request: PopRequest, receipt: uuid.UUID, now: datetime) -> list[TaskRow]:
        started = time.perf_counter()
        target = request.target
        caps = target.type is not None and await self._caps_in_use()
        tasks = await self.door.pop(request, now=now, receipt=receipt, caps=caps)
        self.metrics.pop_latency.observe(time.perf_counter() - started)
        if not tasks and target.queue is not None and not await self.door.queue_exists(target.queue):
            raise NotFoundError(f"queue '{target.queue}' not found")
        self._count_pops(tasks, now)
        return tasks

    @property
    def _wait(self) -> float:
        return self.settings.db_wait_seconds

    def hand_back(self, tasks: Sequence[TaskRow]) -> None:
        """Popped tasks that will not reach their client (it left, the answer failed): back to their queue."""
        if tasks:
            self.settler.unanswered(tasks)

    def _count_pops(self, tasks: Sequence[TaskRow], now: datetime) -> None:
        for task in tasks:
            pops, dwell = self.metrics.per_queue(task["scheduler_id"], task["organisation"], task["type"])
            pops.inc()
            dwell.observe(max(0.0, (now - task["created_at"]).total_seconds()))

    async def push(self, request: PushRequest) -> PushResult:
        """A push in Baton's dialect. `data` that is the queue type's OpenKAT job is stored as OpenKAT's
        runners read it (carrying the task's id where they expect it; OpenKAT's hash unless one is given),
        and a boefje job gets its rescan schedule, as in OpenKAT's dialect (`push_job`)."""
        kind = queue_type(request.queue)
        job = None if kind is None or request.task_id is None else recognised_job(kind, request.data, request.task_id)
        if job is not None:
            request = replace(request, data=job_document(job), hash=request.hash or job_hash(job))
        return await self.push_job(request, job)

    async def push_job(self, request: PushRequest, job: Job | None) -> PushResult:
        """Queue a task, `job` being its `data` read as OpenKAT's job (None: not one). A boefje job's task
        is written with its rescan schedule, in the same statement: created or refreshed for its hash,
        due at its plugin's cron or interval, else after the grace period (mula's post_push)."""
        check_data_size(request.data, self.settings.max_data_bytes)
        if isinstance(job, BoefjeJob) and request.schedule is None:
            cron, interval = (await self._plugin_timings()).get(job.boefje.id, (None, None))
            schedule = pushed_schedule(self.settings, job, request.data, utcnow(), cron, interval)
            request = replace(request, schedule=schedule)
        result = await deadline.within(self.door.push(request, utcnow()), self._wait)
        self.metrics.pushes.labels(request.queue, "created" if result.created else "deduplicated").inc()
        if result.created and self.waiters.count:
            self._queued_here(request.queue)
        return result

    async def _plugin_timings(self) -> dict[str, tuple[str | None, int | None]]:
        """The plugins' crons and intervals, read every few seconds, not per push (a plugin's new timing
        reaches the schedules of pushes within PLUGIN_TIMINGS_SECONDS)."""
        if time.monotonic() - self._timings_read_at > PLUGIN_TIMINGS_SECONDS:
            self._timings_read_at = time.monotonic()  # first: concurrent pushes do not all ask at once
            self._timings = await deadline.within(self.door.plugin_timings(), self._wait)
        return self._timings

    async def change_status(self, task_id: uuid.UUID, status: TaskStatus) -> dict[str, Any]:
        task = await deadline.within(self.door.change_status(task_id, status, utcnow()), self._wait)
        if status is TaskStatus.QUEUED and self.waiters.count:
            self._queued_here(task["scheduler_id"])
        return task

    async def task(self, task_id: uuid.UUID) -> dict[str, Any]:
        """One task as a record (`data` as JSON text), read as a PATCH writes it: one statement on the
        queue door, no thread hop (OpenKAT's runners read every task they pop); NotFoundError (404)."""
        return await deadline.within(self.door.task(task_id), self._wait)

    def _queued_here(self, queue_id: str) -> None:
        """A task this process queued wakes its waiters at once when no notification will (SQLite);
        PostgreSQL's notification comes for every writer alike."""
        if not self.records.is_postgresql:
            self.waiters.wake(queue_id)

    async def adopt_organisation(self, organisation: str) -> bool:
        """An organisation a push names: created if missing and BATON_AUTO_ORGANISATIONS is on
        (`storage.organisations.adopt_organisation`); True when it exists afterwards."""

        def work() -> bool:
            settings = self.settings
            return self.records.adopt_organisation(
                organisation, auto=settings.auto_organisations, maxsize=settings.queue_maxsize
            )

        return await deadline.within(asyncio.to_thread(work), self._wait)

    async def held(self, task_id: uuid.UUID) -> dict[str, Any] | None:
        """One task as a record, or None when there is none."""
        try:
            return await self.task(task_id)
        except NotFoundError:
            return None

    # -- reading queues ----------------------------------------------------------------------------
    def queues_page(self, request: PageRequest) -> Page[QueueView]:
        """A keyset page of queues by (organisation, id) (`core.listing`), counts from the counters."""
        return self.records.queues_page(request)

    def get_queue(self, queue_id: str) -> QueueView:
        return self.records.queue(queue_id)

    async def close(self) -> None:
        self.waiters.close()
        await self.settler.close()
        await self.wakeups.close()
        await self.door.close()
