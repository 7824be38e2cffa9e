"""Read models for the status page (`/ui`), and the two operator actions it offers: requeue a task and
change its priority.

Every read here costs the same whether `tasks` holds a thousand rows or ten million:

- queued and in-flight counts come from the trigger-kept counters (`QueueService.list_queues`);
- failures of the last hour are one range scan of `ix_tasks_status_modified`, stopped after
  `FAILED_CAP` rows (the page then says "at least");
- the oldest queued task of a queue is the first entry of `ix_tasks_scheduler_status` for
  (queue, 'queued'): one index probe per queue;
- task pages are keyset pages (`seq < before`, newest first, `LIMIT n + 1` to know whether there is
  more): no count of the matching rows, ever;
- pop and push rates come from this process's Prometheus counters, sampled into a ring buffer
  (`RateSampler`), not from the database at all.

The database may be newer than this code (another release adds scheduler leases or a `workers`
table): those parts are found by reflection and shown as they are, and missing ones are reported
as missing instead of failing the page.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import MetaData, Table, func, or_, select, update
from sqlalchemy.exc import IntegrityError, NoSuchTableError
from sqlalchemy.orm import Session

from baton import __version__
from baton.core.errors import ConflictError, DuplicateTaskError, NotFoundError, QueueDisabledError, QueueFullError
from baton.core.heartbeat import is_stale, live_state
from baton.core.identity import process_location
from baton.core.lifecycle import may_precede
from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType, TaskStatus, scheduler_id_for, utcnow
from baton.core.settings import Settings
from baton.service.metrics import Metrics
from baton.service.queues import QueueService, QueueView
from baton.storage.engine import Store
from baton.storage.leadership import leaders
from baton.storage.queues import queue_counts
from baton.storage.scheduler_rows import get_scheduler, list_schedulers
from baton.storage.statements import TASKS
from baton.storage.tables import IS_QUEUED, Scheduler, Task

log = get_logger("baton.status")

FAILED_WINDOW = timedelta(hours=1)
FAILED_CAP = 10_000
MAX_PAGE = 200
SCAN_WINDOW = 20_000  # SQLite: newest tasks walked by primary key before an index is used
TABLE_ROWS = 200  # rows shown of a table found by reflection (workers)
SCHEMA_SECONDS = 30.0  # how long a reflected schema is trusted
CANCELLABLE = may_precede(TaskStatus.CANCELLED)
REQUEUABLE = frozenset({TaskStatus.FAILED, TaskStatus.DISPATCHED, TaskStatus.RUNNING})
REPRIORITISABLE = frozenset({TaskStatus.QUEUED})
# Columns of `schedulers` shown in their own cells; the lease columns (owner, term, lease expiry) and
# any column a newer release adds are shown as they are, under "lease".
LEASE_COLUMNS = frozenset({"owner", "term", "lease_expires_at"})
KNOWN_SCHEDULER_COLUMNS = frozenset(column.name for column in Scheduler.__table__.columns) - LEASE_COLUMNS
# A bound parameter, not the literal: the planner then cannot pick the partial pop index (ordered by
# priority) and takes `ix_tasks_scheduler_status`, ordered by seq within (queue, status).
QUEUED_PARAM = Task.status == TaskStatus.QUEUED.value


def seconds_since(moment: datetime | None, now: datetime) -> float | None:
    return None if moment is None else max(0.0, (now - moment).total_seconds())


# -- overview --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueStatus:
    id: str
    organisation: str
    type: str
    queued: int
    in_flight: int
    failed_last_hour: int
    oldest_queued_at: datetime | None
    oldest_queued_seconds: float | None
    maxsize: int
    full: bool
    enabled: bool


@dataclass(frozen=True)
class Totals:
    """The sum over some queues (one type, one organisation, or all)."""

    name: str
    queued: int
    in_flight: int
    failed_last_hour: int
    oldest_queued_seconds: float | None
    full_queues: int
    queues: int

    @classmethod
    def of(cls, name: str, queues: Iterable[QueueStatus]) -> Totals:
        queues = list(queues)
        ages = [queue.oldest_queued_seconds for queue in queues if queue.oldest_queued_seconds is not None]
        return cls(
            name=name,
            queued=sum(queue.queued for queue in queues),
            in_flight=sum(queue.in_flight for queue in queues),
            failed_last_hour=sum(queue.failed_last_hour for queue in queues),
            oldest_queued_seconds=max(ages) if ages else None,
            full_queues=sum(queue.full for queue in queues),
            queues=len(queues),
        )


@dataclass(frozen=True)
class OrganisationStatus:
    organisation: str
    totals: Totals
    queues: list[QueueStatus]


@dataclass(frozen=True)
class RateSeries:
    type: str
    pops: list[float]
    pushes: list[float]


@dataclass(frozen=True)
class Rates:
    """Pops and pushes per second over the last `window_seconds`, oldest interval first."""

    scope: str
    interval_seconds: float
    window_seconds: float
    times: list[datetime]
    by_type: list[RateSeries]
    pops_per_second: float
    pushes_per_second: float


@dataclass(frozen=True)
class Overview:
    generated_at: datetime
    total: Totals
    by_type: list[Totals]
    organisations: list[OrganisationStatus]
    organisations_total: int
    offset: int
    limit: int
    failed_window_seconds: float
    failed_capped: bool
    rates: Rates


def failed_since(session: Session, since: datetime, cap: int = FAILED_CAP) -> tuple[dict[str, int], bool]:
    """Failed tasks per queue whose failure is newer than `since` (a range of `ix_tasks_status_modified`),
    reading at most `cap` rows; True when the cap was reached (the counts are then lower bounds)."""
    recent = (
        select(Task.scheduler_id)
        .where(Task.status == TaskStatus.FAILED.value, Task.modified_at >= since)
        .limit(cap)
        .subquery()
    )
    counts: dict[str, int] = {}
    for scheduler_id, count in session.execute(
        select(recent.c.scheduler_id, func.count()).group_by(recent.c.scheduler_id)
    ):
        counts[scheduler_id] = int(count)
    return counts, sum(counts.values()) >= cap


def oldest_queued(session: Session, queue_ids: Sequence[str]) -> dict[str, datetime]:
    """When the longest-waiting queued task of each queue was created: the first entry of
    `ix_tasks_scheduler_status` for (queue, 'queued'), one index probe per queue."""
    if not queue_ids:
        return {}
    head = (
        select(Task.created_at)
        .where(Task.scheduler_id == Scheduler.id, QUEUED_PARAM)
        .order_by(Task.seq)
        .limit(1)
        .correlate(Scheduler)
        .scalar_subquery()
    )
    rows = session.execute(select(Scheduler.id, head).where(Scheduler.id.in_(list(queue_ids))))
    return {scheduler_id: created_at for scheduler_id, created_at in rows if created_at is not None}


def queue_statuses(session: Session, views: Sequence[QueueView], now: datetime) -> tuple[list[QueueStatus], bool]:
    failed, capped = failed_since(session, now - FAILED_WINDOW)
    oldest = oldest_queued(session, [view.id for view in views if view.size > 0])
    statuses = [
        QueueStatus(
            id=view.id,
            organisation=view.organisation,
            type=view.type,
            queued=view.size,
            in_flight=view.in_flight,
            failed_last_hour=failed.get(view.id, 0),
            oldest_queued_at=oldest.get(view.id),
            oldest_queued_seconds=seconds_since(oldest.get(view.id), now),
            maxsize=view.maxsize,
            full=view.maxsize > 0 and view.size >= view.maxsize,
            enabled=view.enabled,
        )
        for view in views
    ]
    return statuses, capped


def build_overview(
    statuses: Sequence[QueueStatus], capped: bool, rates: Rates, now: datetime, offset: int, limit: int
) -> Overview:
    """Totals per type and per organisation; organisations with the most queued work first."""
    by_organisation: dict[str, list[QueueStatus]] = {}
    for status in statuses:
        by_organisation.setdefault(status.organisation, []).append(status)
    organisations = [
        OrganisationStatus(name, Totals.of(name, queues), sorted(queues, key=lambda queue: queue.type))
        for name, queues in by_organisation.items()
    ]
    organisations.sort(key=lambda org: (-org.totals.queued, -org.totals.in_flight, org.organisation))
    by_type = [Totals.of(kind.value, (s for s in statuses if s.type == kind.value)) for kind in SchedulerType]
    return Overview(
        generated_at=now,
        total=Totals.of("all", statuses),
        by_type=by_type,
        organisations=organisations[offset : offset + limit],
        organisations_total=len(organisations),
        offset=offset,
        limit=limit,
        failed_window_seconds=FAILED_WINDOW.total_seconds(),
        failed_capped=capped,
        rates=rates,
    )


# -- rates -----------------------------------------------------------------------------------------------


def _totals_by_type(counter: Any) -> dict[str, float]:
    """A labelled counter's `_total` samples summed per task type (the queue id's prefix)."""
    totals: dict[str, float] = {}
    for metric in counter.collect():
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue
            try:
                kind = SchedulerSpec.parse(sample.labels["queue"]).type.value
            except (KeyError, ValueError):
                kind = "other"
            totals[kind] = totals.get(kind, 0.0) + sample.value
    return totals


@dataclass
class RateSampler:
    """A ring buffer of this process's pop and push counters, sampled every `interval` seconds.

    Why sampled counters: they are what the hot path increments anyway (no extra write per pop, no
    read of the database per sample), and two readings give an exact rate for the interval between
    them. What that costs: the rates are this process's own; with several API replicas each page
    shows its replica's traffic (Prometheus sums `rate(baton_pops_total[1m])` over all of them), and
    tasks that schedulers create from events inside their own process are not pushes of this one.
    """

    metrics: Metrics
    interval: float = 5.0
    window: float = 900.0
    samples: deque[tuple[float, datetime, dict[str, float], dict[str, float]]] = field(init=False)

    def __post_init__(self) -> None:
        self.samples = deque(maxlen=int(self.window / self.interval) + 1)
        self._lock = threading.Lock()

    def sample(self, clock: float | None = None, now: datetime | None = None) -> None:
        reading = (
            time.monotonic() if clock is None else clock,
            now or utcnow(),
            _totals_by_type(self.metrics.pops),
            _totals_by_type(self.metrics.pushes),
        )
        with self._lock:
            self.samples.append(reading)

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def rates(self) -> Rates:
        with self._lock:
            samples = list(self.samples)
        kinds = [kind.value for kind in SchedulerType]
        for _, _, pops, pushes in samples:
            kinds += [kind for kind in (*pops, *pushes) if kind not in kinds]
        series = {kind: RateSeries(kind, [], []) for kind in kinds}
        times: list[datetime] = []
        for (clock0, _, pops0, pushes0), (clock1, at, pops1, pushes1) in itertools.pairwise(samples):
            elapsed = max(clock1 - clock0, 1e-9)
            times.append(at)
            for kind, rate in series.items():
                rate.pops.append(max(0.0, pops1.get(kind, 0.0) - pops0.get(kind, 0.0)) / elapsed)
                rate.pushes.append(max(0.0, pushes1.get(kind, 0.0) - pushes0.get(kind, 0.0)) / elapsed)
        return Rates(
            scope=f"this API process ({process_location()})",
            interval_seconds=self.interval,
            window_seconds=self.window,
            times=times,
            by_type=list(series.values()),
            pops_per_second=sum(rate.pops[-1] for rate in series.values() if rate.pops),
            pushes_per_second=sum(rate.pushes[-1] for rate in series.values() if rate.pushes),
        )


# -- schedulers ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerStatus:
    id: str
    organisation: str
    type: str
    enabled: bool
    runner: str | None
    location: str | None
    host: str | None
    pid: int | None
    pod: str | None
    reported_state: str
    state: str
    stale: bool
    last_heartbeat: datetime | None
    heartbeat_age_seconds: float | None
    restarts: int | None
    lease: dict[str, Any]

    @property
    def problem(self) -> bool:
        return self.stale or self.state == SchedulerState.FAILED.value


@dataclass(frozen=True)
class SchedulerPage:
    generated_at: datetime
    heartbeat_timeout_seconds: float
    schedulers: list[SchedulerStatus]
    total: int
    problems: int
    offset: int
    limit: int
    problems_only: bool
    lease_columns: list[str]


def split_location(location: str | None) -> tuple[str | None, int | None]:
    """`host:pid` (core.identity.process_location) into its parts."""
    if not location:
        return None, None
    host, _, pid = location.rpartition(":")
    if not host or not pid.isdigit():
        return location, None
    return host, int(pid)


def scheduler_status(row: Scheduler, now: datetime, timeout: float, lease: dict[str, Any]) -> SchedulerStatus:
    reported = SchedulerState(row.state)
    host, pid = split_location(row.location)
    return SchedulerStatus(
        id=row.id,
        organisation=row.organisation,
        type=row.type,
        enabled=row.enabled,
        runner=row.runner,
        location=row.location,
        host=host,
        pid=pid,
        # A pod's host name is the pod's name (Kubernetes' default, which the runner keeps).
        pod=host if row.runner == "kubernetes" else None,
        reported_state=reported.value,
        state=live_state(reported, row.heartbeat_at, now, timeout).value,
        stale=is_stale(reported, row.heartbeat_at, now, timeout),
        last_heartbeat=row.heartbeat_at,
        heartbeat_age_seconds=seconds_since(row.heartbeat_at, now),
        restarts=None,  # not recorded in the database by this release (the runner keeps it in memory)
        lease=lease,
    )


# -- control plane ---------------------------------------------------------------------------------------


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
class TableSnapshot:
    """Rows of a table this release does not model (found by reflection), shown as they are."""

    name: str
    columns: list[str]
    rows: list[dict[str, Any]]
    truncated: bool


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


NOT_CONFIGURED = BrokerStatus(False, False, "RabbitMQ not configured", None, [], None, False)


class SchemaProbe:
    """What the database has beyond this release's tables: extra columns of `schedulers` (scheduler
    leases: owner, term, lease ...) and a `workers` table. Reflected outside any session (SQLite
    allows one writer, and every session is one), again every SCHEMA_SECONDS."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._known_at = float("-inf")
        self._extra: list[str] = []
        self._schedulers: Table | None = None
        self._workers: Table | None = None

    def refresh(self) -> None:
        with self._lock:
            if time.monotonic() - self._known_at < SCHEMA_SECONDS:
                return
            metadata = MetaData()
            schedulers = Table("schedulers", metadata, autoload_with=self.store.engine)
            self._extra = [column.name for column in schedulers.columns if column.name not in KNOWN_SCHEDULER_COLUMNS]
            self._schedulers = schedulers if self._extra else None
            try:
                self._workers = Table("workers", metadata, autoload_with=self.store.engine)
            except NoSuchTableError:
                self._workers = None
            self._known_at = time.monotonic()

    def scheduler_extras(self) -> tuple[list[str], Table | None]:
        """The extra columns of `schedulers`, and the reflected table to read them from."""
        self.refresh()
        return list(self._extra), self._schedulers

    def workers_table(self) -> Table | None:
        self.refresh()
        return self._workers


def plain(value: Any) -> Any:
    """A reflected value as JSON can carry it."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, dict | list):
        return value
    return str(value)


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


# -- tasks -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskFilter:
    organisation: str | None = None
    type: SchedulerType | None = None
    status: TaskStatus | None = None
    q: str | None = None  # a task id, or a hash

    def query(self) -> dict[str, str]:
        given = {"organisation": self.organisation, "type": self.type, "status": self.status, "q": self.q}
        return {key: str(value) for key, value in given.items() if value}


@dataclass(frozen=True)
class TaskRow:
    seq: int
    id: uuid.UUID
    scheduler_id: str
    organisation: str
    type: str
    priority: int
    status: str
    hash: str | None
    attempts: int
    reason: str | None
    created_at: datetime
    modified_at: datetime


@dataclass(frozen=True)
class TaskPage:
    filter: TaskFilter
    tasks: list[TaskRow]
    limit: int
    before: int | None
    next_before: int | None  # the cursor of the next (older) page; None: this is the last one
    known_total: int | None  # from the counters, when they answer the filter (status queued)
    generated_at: datetime


@dataclass(frozen=True)
class TaskDetail:
    task: TaskRow
    schedule_id: str | None
    data: dict[str, Any]
    can_cancel: bool
    can_requeue: bool
    can_change_priority: bool


ROW_COLUMNS = [
    Task.seq,
    Task.id,
    Task.scheduler_id,
    Task.organisation,
    Task.type,
    Task.priority,
    Task.status,
    Task.hash,
    Task.attempts,
    Task.reason,
    Task.created_at,
    Task.modified_at,
]


def parse_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def task_conditions(wanted: TaskFilter, all_queue_ids: Sequence[str], indexed: bool = True) -> list[Any]:
    """The filter as SQL. `indexed=False` writes status and type so that no index can serve them
    (`status || ''`): SQLite then walks the primary key, which is what a common status needs."""

    def equal(column: Any, value: str) -> Any:
        return (column if indexed else column.concat("")) == value

    conditions: list[Any] = []
    queues: list[str] | None = None
    if wanted.organisation is not None:
        kinds = [wanted.type] if wanted.type is not None else list(SchedulerType)
        queues = [scheduler_id_for(kind, wanted.organisation) for kind in kinds]
        conditions.append(Task.scheduler_id == queues[0] if len(queues) == 1 else Task.scheduler_id.in_(queues))
    elif wanted.type is not None:
        conditions.append(equal(Task.type, wanted.type.value))
    if wanted.status is not None:
        conditions.append(equal(Task.status, wanted.status.value))
    if wanted.q:
        hashed = Task.scheduler_id.in_(queues if queues is not None else list(all_queue_ids)) & (Task.hash == wanted.q)
        task_id = parse_uuid(wanted.q)
        conditions.append(or_(Task.id == task_id, hashed) if task_id is not None else hashed)
    return conditions


def newest_keys(session: Session, conditions: Sequence[Any], limit: int) -> list[int]:
    query = select(Task.seq).where(*conditions).order_by(Task.seq.desc()).limit(limit)
    return list(session.scalars(query))


def task_page(
    session: Session, wanted: TaskFilter, all_queue_ids: Sequence[str], before: int | None, limit: int
) -> list[TaskRow]:
    """`limit` + 1 tasks matching `wanted`, newest first (keyset on `seq`): the extra row only says
    that there is more. Keys first, rows after: a sort, where the plan needs one, runs over index
    entries, and only the page's rows are read. A queue (organisation, type) walks
    `ix_tasks_scheduler_status`, a hash `ix_tasks_scheduler_hash`, an id the unique index on `id`.

    SQLite keeps no statistics, so for a status or type alone it would take the status index and sort
    every task of that status (a million queued tasks: most of a second). There the newest
    `SCAN_WINDOW` tasks are walked by primary key first (a common status fills the page there); only
    a status too rare to do so needs the index beyond that window, and sorts its few tasks.
    """
    window = (
        session.get_bind().dialect.name == "sqlite"
        and wanted.organisation is None
        and not wanted.q
        and (wanted.status is not None or wanted.type is not None)
    )
    if not window:
        below = [Task.seq < before] if before is not None else []
        keys = newest_keys(session, [*task_conditions(wanted, all_queue_ids), *below], limit + 1)
    else:
        top = before if before is not None else (session.scalar(select(func.max(Task.seq))) or 0) + 1
        floor = top - SCAN_WINDOW
        recent = [Task.seq < top, Task.seq >= floor]
        keys = newest_keys(session, [*task_conditions(wanted, all_queue_ids, indexed=False), *recent], limit + 1)
        if len(keys) <= limit:
            older = [*task_conditions(wanted, all_queue_ids), Task.seq < floor]
            keys += newest_keys(session, older, limit + 1 - len(keys))
    if not keys:
        return []
    rows = session.execute(select(*ROW_COLUMNS).where(Task.seq.in_(keys)).order_by(Task.seq.desc()))
    return [TaskRow(**row._mapping) for row in rows]


def get_task_detail(session: Session, task_id: uuid.UUID) -> TaskDetail:
    task = session.scalars(select(Task).where(Task.id == task_id)).one_or_none()
    if task is None:
        raise NotFoundError(f"task '{task_id}' not found")
    status = TaskStatus(task.status)
    return TaskDetail(
        task=TaskRow(**{column.key: getattr(task, column.key) for column in ROW_COLUMNS}),
        schedule_id=task.schedule_id,
        data=task.data,
        can_cancel=status in CANCELLABLE,
        can_requeue=status in REQUEUABLE,
        can_change_priority=status in REPRIORITISABLE,
    )


# -- operator actions ------------------------------------------------------------------------------------


def requeue(session: Session, task_id: uuid.UUID, now: datetime, actor: str) -> None:
    """Put a failed task, or a dispatched or running one that looks stuck, back in its queue.

    The queue's rules hold as for a push: a disabled queue refuses it (409), a full one too (429),
    and a task whose hash is queued already is not doubled (409: that twin runs instead). The task
    keeps its id, attempts and fair-queuing tag; `reason` says who requeued it and from which status.
    """
    current = session.execute(
        select(Task.status, Task.scheduler_id, Task.hash).where(Task.id == task_id).with_for_update()
    ).first()
    if current is None:
        raise NotFoundError(f"task '{task_id}' not found")
    status, queue_id, task_hash = current
    if TaskStatus(status) not in REQUEUABLE:
        raise ConflictError(
            f"task '{task_id}' is '{status}': only a failed, dispatched or running task can be requeued"
        )
    queue = get_scheduler(session, queue_id)
    if not queue.enabled:
        raise QueueDisabledError(f"queue '{queue_id}' is disabled")
    twin = f"a task with hash '{task_hash}' is already queued in '{queue_id}'"
    if task_hash is not None and session.scalar(
        select(Task.id).where(Task.scheduler_id == queue_id, Task.hash == task_hash, IS_QUEUED).limit(1)
    ):
        raise DuplicateTaskError(twin)
    queued, _ = queue_counts(session, queue_id).get(queue_id, (0, 0))
    if queue.maxsize > 0 and queued >= queue.maxsize:
        raise QueueFullError(f"queue '{queue_id}' is full (maxsize {queue.maxsize})")
    try:
        session.execute(
            update(TASKS)
            .where(Task.id == task_id, Task.status == status)
            .values(status=TaskStatus.QUEUED.value, modified_at=now, reason=f"requeued by {actor} from {status}")
        )
    except IntegrityError as exc:
        # A twin was queued in between and the unique index caught it; the caller's transaction is
        # rolled back as the error unwinds it.
        raise DuplicateTaskError(twin) from exc


def change_priority(session: Session, task_id: uuid.UUID, priority: int, now: datetime) -> None:
    """A queued task's new priority (lower pops first); any other status: 409."""
    changed = session.execute(
        update(TASKS).where(Task.id == task_id, IS_QUEUED).values(priority=priority, modified_at=now).returning(Task.id)
    ).first()
    if changed is not None:
        return
    status = session.scalar(select(Task.status).where(Task.id == task_id))
    if status is None:
        raise NotFoundError(f"task '{task_id}' not found")
    raise ConflictError(f"task '{task_id}' is '{status}': only a queued task's priority can change")


# -- the service the page talks to -----------------------------------------------------------------------


class StatusService:
    """Everything the status page shows or does, for one app (one store, one process's metrics)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        queues: QueueService,
        metrics: Metrics,
        broker: BrokerProbe | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.queues = queues
        self.rates = RateSampler(metrics)
        self.schema = SchemaProbe(store)
        self.broker = broker

    def overview(self, offset: int = 0, limit: int = 50) -> Overview:
        now = utcnow()
        with self.store.session() as session:
            statuses, capped = queue_statuses(session, self.queues.list_queues(session), now)
        return build_overview(statuses, capped, self.rates.rates(), now, offset, min(limit, MAX_PAGE))

    def schedulers(self, offset: int = 0, limit: int = 50, problems_only: bool = False) -> SchedulerPage:
        now = utcnow()
        timeout = self.settings.timing.heartbeat_timeout_seconds
        extras, table = self.schema.scheduler_extras()
        with self.store.session() as session:
            rows = list_schedulers(session)
            leases = self._lease_columns(session, table, extras)
        statuses = [scheduler_status(row, now, timeout, leases.get(row.id, {})) for row in rows]
        problems = [status for status in statuses if status.problem]
        shown = problems if problems_only else sorted(statuses, key=lambda s: (not s.problem, s.id))
        limit = min(limit, MAX_PAGE)
        return SchedulerPage(
            generated_at=now,
            heartbeat_timeout_seconds=timeout,
            schedulers=shown[offset : offset + limit],
            total=len(shown),
            problems=len(problems),
            offset=offset,
            limit=limit,
            problems_only=problems_only,
            lease_columns=extras,
        )

    @staticmethod
    def _lease_columns(session: Session, table: Table | None, extras: Sequence[str]) -> dict[str, dict[str, Any]]:
        if table is None:
            return {}
        rows = session.execute(select(table.c.id, *(table.c[name] for name in extras)))
        return {row.id: {name: plain(getattr(row, name)) for name in extras} for row in rows}

    def control_plane(self, broker_queues: Callable[[Sequence[str]], tuple[str, list[str]]] | None) -> ControlPlane:
        """`broker_queues(organisations)`: the dead-letter queue and the queues to look at (their names
        belong to the ingest layer, which passes them in)."""
        now = utcnow()
        # The leading director rewrites its row every reconcile round: a row older than two rounds
        # (and than the lease time) means that director stopped leading or stopped working.
        stale_after = max(self.settings.leases.lease_seconds, 2 * self.settings.timing.reconcile_interval_seconds)
        extras, schedulers_table = self.schema.scheduler_extras()
        workers_table = self.schema.workers_table()
        with self.store.session() as session:
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
                for row in leaders(session)
            ]
            organisations = sorted({row.organisation for row in list_schedulers(session)})
            workers = self._snapshot(session, workers_table) if workers_table is not None else None
            owners = (
                self._lease_owners(session, schedulers_table)
                if schedulers_table is not None and "owner" in extras
                else None
            )
        if self.broker is None or broker_queues is None:
            broker = NOT_CONFIGURED
        else:
            dead_letter, names = broker_queues(organisations)
            broker = self.broker.read(dead_letter, names)
        return ControlPlane(
            generated_at=now,
            process=ProcessInfo(
                version=__version__,
                location=process_location(),
                database=self.store.dialect,
                auth_required=self.settings.auth_required,
                amqp_enabled=self.settings.amqp.enabled,
                heartbeat_timeout_seconds=self.settings.timing.heartbeat_timeout_seconds,
                leader_stale_seconds=stale_after,
            ),
            leaders=leader_rows,
            followers="not recorded: only the leading director writes to the database (table leaders)",
            workers=workers,
            workers_note=(
                "table workers"
                if workers is not None
                else "no workers table in this database (this release has no baton worker)"
            ),
            lease_owners=owners,
            broker=broker,
        )

    @staticmethod
    def _snapshot(session: Session, table: Table) -> TableSnapshot:
        primary = list(table.primary_key.columns) or list(table.columns)[:1]
        rows = session.execute(select(table).order_by(*primary).limit(TABLE_ROWS + 1)).all()
        columns = [column.name for column in table.columns]
        return TableSnapshot(
            name=table.name,
            columns=columns,
            rows=[{name: plain(value) for name, value in zip(columns, row, strict=True)} for row in rows[:TABLE_ROWS]],
            truncated=len(rows) > TABLE_ROWS,
        )

    @staticmethod
    def _lease_owners(session: Session, table: Table) -> list[LeaseOwner]:
        owner = table.c["owner"]
        rows = session.execute(select(owner, func.count()).group_by(owner))
        owners = [LeaseOwner(None if value is None else str(value), int(count)) for value, count in rows]
        return sorted(owners, key=lambda row: (row.owner is not None, row.owner or ""))

    def tasks(self, wanted: TaskFilter, before: int | None = None, limit: int = 50) -> TaskPage:
        limit = min(limit, MAX_PAGE)
        with self.store.session() as session:
            queue_ids = [view.id for view in self.queues.list_queues(session)] if wanted.q else []
            rows = task_page(session, wanted, queue_ids, before, limit)
            known_total = None
            if wanted.status is TaskStatus.QUEUED and not wanted.q:
                known_total = sum(
                    view.size
                    for view in self.queues.list_queues(session)
                    if (wanted.organisation in (None, view.organisation))
                    and (wanted.type is None or view.type == wanted.type.value)
                )
        return TaskPage(
            filter=wanted,
            tasks=rows[:limit],
            limit=limit,
            before=before,
            next_before=rows[limit - 1].seq if len(rows) > limit else None,
            known_total=known_total,
            generated_at=utcnow(),
        )

    def task(self, task_id: uuid.UUID) -> TaskDetail:
        with self.store.session() as session:
            return get_task_detail(session, task_id)

    def requeue(self, task_id: uuid.UUID, actor: str) -> TaskDetail:
        with self.store.session() as session:
            requeue(session, task_id, utcnow(), actor)
            detail = get_task_detail(session, task_id)
        log.info("task requeued", task=str(task_id), by=actor)
        return detail

    def change_priority(self, task_id: uuid.UUID, priority: int, actor: str) -> TaskDetail:
        with self.store.session() as session:
            change_priority(session, task_id, priority, utcnow())
            detail = get_task_detail(session, task_id)
        log.info("task priority changed", task=str(task_id), priority=priority, by=actor)
        return detail
