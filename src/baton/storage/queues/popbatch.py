"""Group pop: concurrent pops of one target share one statement (as a database groups commits).

While a pop of a target (a queue, or a type in fair or strict order) is on its way to PostgreSQL,
further pops of that target wait; when it returns, one statement claims tasks for all of them at
once (`LIMIT` = the sum of their limits) and hands each waiter its own share, in hand-out order.
A lone pop never waits: it goes out at once, as before.

Under load this turns eight round trips (and eight plannings and lockings of the queue's first index
page) into one, which is most of what a pop costs the API and the database. Every guarantee is the
statement's: a task is claimed by one statement and handed to exactly one waiter, and the batch
sees what eight statements in a row would (with SKIP LOCKED, what concurrent ones would).

A waiter that gave up before its statement went out takes no tasks. A request that reaches its
deadline does not give its waiter up: the waiter takes its share when the statement returns, and
the queue service hands those tasks back (their receipt: core/receipts.py). A batch's statement is
stamped with its last waiter's receipt, which the rows carry; when it fails, every waiter has its
own receipt settled, the last one's among them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

Rows = list[dict[str, Any]]
# One statement claims at most this many tasks: a thousand waiting long-polls asking for a hundred
# each wait their turn rather than make one statement of a hundred thousand rows.
MAX_BATCH_TASKS = 1000
#: Sends the pop statement for `limit` tasks and returns the rows in hand-out order.
PopStatement = Callable[[int], Awaitable[Rows]]


@dataclass
class Waiter:
    limit: int
    statement: PopStatement
    answer: asyncio.Future[Rows]


@dataclass
class Target:
    """A target with a statement out (only those are kept): who waits for the next one."""

    waiting: list[Waiter] = field(default_factory=list)


class PopBatcher:
    def __init__(self) -> None:
        self._targets: dict[Hashable, Target] = {}
        self._batches: set[asyncio.Task[None]] = set()
        self.statements_sent = 0  # pops served over statements sent: what batching saved

    async def pop(self, key: Hashable, limit: int, statement: PopStatement) -> Rows:
        """Up to `limit` rows for one pop of the target `key`; `statement(n)` claims up to n tasks."""
        target = self._targets.get(key)
        if target is not None:
            answer: asyncio.Future[Rows] = asyncio.get_running_loop().create_future()
            target.waiting.append(Waiter(limit, statement, answer))
            return await answer
        target = self._targets[key] = Target()
        try:
            self.statements_sent += 1
            return await statement(limit)
        finally:
            self._next_batch(key, target)

    def _next_batch(self, key: Hashable, target: Target) -> None:
        """Send the statement for everyone waiting, or forget the target when nobody waits."""
        waiters, target.waiting = take_batch([waiter for waiter in target.waiting if not waiter.answer.done()])
        if not waiters:
            del self._targets[key]  # an idle target costs nothing: queues come and go
            return
        batch = asyncio.get_running_loop().create_task(self._run_batch(key, target, waiters))
        self._batches.add(batch)  # the loop holds tasks weakly
        batch.add_done_callback(self._batches.discard)

    async def _run_batch(self, key: Hashable, target: Target, waiters: list[Waiter]) -> None:
        # The last waiter's statement: all are the same but for `now`, and its `now` is the latest.
        statement = waiters[-1].statement
        try:
            self.statements_sent += 1
            rows = await statement(sum(waiter.limit for waiter in waiters))
        except asyncio.CancelledError:  # the loop is closing: nothing more goes out
            for waiter in [*waiters, *target.waiting]:
                waiter.answer.cancel()
            del self._targets[key]
            raise
        except Exception as exc:
            for waiter in waiters:
                if not waiter.answer.done():
                    waiter.answer.set_exception(exc)
        else:
            hand_out(rows, waiters)
        self._next_batch(key, target)


def take_batch(waiters: list[Waiter]) -> tuple[list[Waiter], list[Waiter]]:
    """The first waiters whose limits add up to at most MAX_BATCH_TASKS (always at least one), and
    the rest, who wait for the statement after."""
    total = 0
    for index, waiter in enumerate(waiters):
        total += waiter.limit
        if total > MAX_BATCH_TASKS and index > 0:
            return waiters[:index], waiters[index:]
    return waiters, []


def hand_out(rows: Rows, waiters: list[Waiter]) -> None:
    """Each waiter still waiting gets the next rows up to its limit, in order."""
    start = 0
    for waiter in waiters:
        if waiter.answer.done():
            continue
        share = rows[start : start + waiter.limit]
        start += len(share)
        waiter.answer.set_result(share)
