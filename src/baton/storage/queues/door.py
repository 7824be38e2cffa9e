"""The queue door: every pop, push, status change and read of one task the API makes goes through here,
and this is where each becomes its statement.

A pop is planned by `core.queueing.plan_pop` (which pop runs: plain or together, filtered, keyed,
batched) and sent here in one of three ways: a statement compiled once (`PopStatement`, on PostgreSQL
psycopg's async pool), the same shared by the target's concurrent pops (`popbatch.py`), or a
transaction of its own (filters compiled for the pop; an idempotency key remembered: receipts.py).
Every pop stamps what it hands out with its receipt (core/receipts.py).

The statements are typed choices (`pops.PopStatement`, `PushStatement`, `StatusStatement`,
`TaskStatement`, `QueueExists`, `AnyCaps`, `PluginTimings`): each builds its SQLAlchemy statement per
dialect, and a link (`links.py`) compiles or builds it once. All return plain dicts (the statements' RETURNING columns),
`data` as JSON text, and raise Baton's errors.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import orjson
import psycopg

from baton.core import deadline
from baton.core.admission import OnDuplicate
from baton.core.model import TaskStatus
from baton.core.queueing import PopPlan, PopRequest, PushRequest, PushResult, TaskRow, plan_pop
from baton.core.receipts import KeyedPop, Settlement, key_expires_at, key_scope
from baton.storage.engine import Store
from baton.storage.filters import compile_tree
from baton.storage.queues import operations as queues
from baton.storage.queues import push_statements, receipts, statements
from baton.storage.queues.links import CONNECTION_WAIT_SECONDS, Link, Rows, link_for
from baton.storage.queues.popbatch import PopBatcher
from baton.storage.queues.pops import PopStatement, build_pop
from baton.storage.queues.push import id_conflict, push_params, push_result


@dataclass(frozen=True)
class PushStatement:
    """PostgreSQL's one-statement push, with a boefje task's schedule or without (SQLite's is a short
    transaction: push.py)."""

    on_duplicate: OnDuplicate
    scheduled: bool

    def build(self, dialect: statements.Dialect) -> Any:
        return push_statements.push_postgresql(self.on_duplicate, raw_data=True, scheduled=self.scheduled)


@dataclass(frozen=True)
class StatusStatement:
    requested: TaskStatus

    def build(self, dialect: statements.Dialect) -> Any:
        return statements.change_status(self.requested, raw_data=True)


@dataclass(frozen=True)
class TaskStatement:
    def build(self, dialect: statements.Dialect) -> Any:
        return statements.task_by_id(raw_data=True)


@dataclass(frozen=True)
class QueueExists:
    def build(self, dialect: statements.Dialect) -> Any:
        return statements.queue_exists()


@dataclass(frozen=True)
class AnyCaps:
    def build(self, dialect: statements.Dialect) -> Any:
        return statements.any_caps()


@dataclass(frozen=True)
class PluginTimings:
    def build(self, dialect: statements.Dialect) -> Any:
        return statements.plugin_timings()


class QueueDoor:
    """The API's way to its queues (one per event loop: its link's pool belongs to that loop)."""

    def __init__(
        self,
        store: Store,
        *,
        deduplicate: bool = True,
        group_pops: bool = True,
        receipt_seconds: float = 300.0,
        link: Link | None = None,
    ) -> None:
        self.store = store
        self.link = link or link_for(store)
        self.deduplicate = deduplicate
        self.receipt_seconds = receipt_seconds
        # Batching pays where a statement is a round trip another pop could share: PostgreSQL's pool.
        self.batcher = PopBatcher() if group_pops and self.link.dialect == "postgresql" else None

    # -- pop ---------------------------------------------------------------------------------------------

    async def pop(
        self, request: PopRequest, *, now: datetime, receipt: uuid.UUID | None = None, caps: bool = False
    ) -> list[TaskRow]:
        """Up to `request.limit` tasks, each to this caller only, in hand-out order, stamped with `receipt`
        (a fresh one if None). `caps`: some organisation has a `max_in_flight` (the service knows)."""
        receipt = receipt or uuid.uuid4()
        plan = plan_pop(request, caps=caps, deduplicate=self.deduplicate, batching=self.batcher is not None)
        target, limit = request.target, request.limit
        params = {"queue_": target.queue, "type_": target.type, "limit_": limit, "now_": now, "receipt_": receipt}
        if plan.precompiled:
            statement = PopStatement(plan.shape)
            if plan.batched and self.batcher is not None:
                # The statement a batch sends is its last waiter's: its receipt (the rows say which), its
                # `now` and its deadline, the latest of the batch's.
                until = deadline.current(CONNECTION_WAIT_SECONDS)

                async def claim(count: int) -> Rows:
                    # In hand-out order before the batch shares the rows out among its waiters.
                    rows = await self.link.fetch(statement, {**params, "limit_": count}, until)
                    return queues.sort_popped(rows, target)

                rows = await self.batcher.pop(target, limit, claim)
            else:
                rows = await self.link.fetch(statement, params)
        else:
            rows = await self.link.transaction(lambda conn: self._pop_in(conn, request, plan, now, receipt))
        return cast(list[TaskRow], queues.sort_popped(rows, target))

    def _pop_in(self, conn: Any, request: PopRequest, plan: PopPlan, now: datetime, receipt: uuid.UUID) -> Rows:
        """A pop compiled for itself (filters), or remembered under its idempotency key, in `conn`'s transaction."""
        condition = None if plan.filters is None else compile_tree(plan.filters, self.link.dialect)
        if plan.keyed:
            assert request.key is not None
            keyed = KeyedPop(key_scope(request.target), request.key, key_expires_at(now, self.receipt_seconds))
            return receipts.keyed_pop(
                conn,
                request.target,
                keyed,
                receipt=receipt,
                limit=request.limit,
                now=now,
                condition=condition,
                caps=plan.shape.caps,
            )
        statement = build_pop(plan.shape, self.link.dialect, condition, raw_data=True)
        return queues.run_pop(conn, statement, request.target, limit=request.limit, now=now, receipt=receipt)

    async def settle(self, settlement: Settlement, now: datetime) -> int:
        return await self.link.transaction(lambda conn: receipts.settle(conn, settlement, now))

    async def settle_and_remember(self, settlement: Settlement, now: datetime, again_at: datetime) -> int:
        return await self.link.transaction(lambda conn: receipts.settle_and_remember(conn, settlement, now, again_at))

    async def settle_remembered(self, receipt: uuid.UUID, now: datetime) -> int:
        return await self.link.transaction(lambda conn: receipts.settle_remembered(conn, now, only=receipt))

    async def queue_exists(self, queue_id: str) -> bool:
        return bool(await self.link.fetch(QueueExists(), {"queue_": queue_id}))

    async def any_caps(self) -> bool:
        rows = await self.link.fetch(AnyCaps(), {})
        return bool(rows and next(iter(rows[0].values())))

    async def plugin_timings(self) -> dict[str, tuple[str | None, int | None]]:
        """The catalogue's plugins with a cron or an interval: id -> (cron, interval)."""
        rows = await self.link.fetch(PluginTimings(), {})
        return {row["id"]: (row["cron"], row["interval"]) for row in rows}

    # -- push, status, one task ---------------------------------------------------------------------------

    async def push(self, request: PushRequest, now: datetime) -> PushResult:
        if self.link.dialect != "postgresql":
            return await self.link.transaction(lambda conn: queues.push(conn, request, now, raw_data=True))
        params = push_params(request, now, encode=_json_text)
        try:
            rows = await self.link.fetch(PushStatement(request.on_duplicate, request.schedule is not None), params)
        except psycopg.errors.UniqueViolation as exc:
            raise id_conflict(request) from exc
        return push_result(rows[0] if rows else None, request)

    async def change_status(self, task_id: uuid.UUID, requested: TaskStatus, now: datetime) -> dict[str, Any]:
        if self.link.dialect != "postgresql":
            return await self.link.transaction(
                lambda conn: queues.change_status(conn, task_id, requested, now, raw_data=True)
            )
        try:
            rows = await self.link.fetch(StatusStatement(requested), {"id_": task_id, "now_": now})
        except psycopg.errors.UniqueViolation as exc:
            raise queues.cannot_requeue(task_id) from exc
        if rows:
            return rows[0]
        # Refused, or no such task: the transaction says which (404 or 409).
        return await self.link.transaction(
            lambda conn: queues.change_status(conn, task_id, requested, now, raw_data=True)
        )

    async def task(self, task_id: uuid.UUID) -> dict[str, Any]:
        """One task's record (`data` as JSON text); NotFoundError when there is none."""
        rows = await self.link.fetch(TaskStatement(), {"id_": task_id})
        if not rows:
            raise queues.unknown_task(task_id)
        return rows[0]

    async def close(self) -> None:
        await self.link.close()


def _json_text(document: Any) -> str:
    return orjson.dumps(document).decode()
