"""The group pop: who waits, what each statement asks for, and who gets which rows."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from baton.storage.queues.popbatch import MAX_BATCH_TASKS, PopBatcher, Rows


class FakeQueue:
    """Rows numbered in hand-out order; each statement is held until the test releases it, so the
    test decides which pops arrive while one is on its way."""

    def __init__(self, rows: int) -> None:
        self.rows = list(range(rows))
        self.limits: list[int] = []
        self.release = asyncio.Event()
        self.failing_calls: set[int] = set()  # which statements (1 = the first) fail

    async def claim(self, limit: int) -> list[dict[str, Any]]:
        self.limits.append(limit)
        await self.release.wait()
        if len(self.limits) in self.failing_calls:
            raise ConnectionError("database went away")
        taken, self.rows = self.rows[:limit], self.rows[limit:]
        return [{"n": n} for n in taken]


def numbers(rows: list[dict[str, Any]]) -> list[int]:
    return [row["n"] for row in rows]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def held_pop_and_waiters(
    batcher: PopBatcher, queue: FakeQueue, limits: list[int]
) -> tuple[asyncio.Task[Rows], list[asyncio.Task[Rows]]]:
    """A pop of limit 1 whose statement the queue holds, then pops of `limits` arriving meanwhile."""
    first = asyncio.create_task(batcher.pop("q", 1, queue.claim))
    await settle()
    waiting = [asyncio.create_task(batcher.pop("q", limit, queue.claim)) for limit in limits]
    await settle()
    return first, waiting


def test_a_lone_pop_goes_out_at_once_with_its_own_limit() -> None:
    async def scenario() -> None:
        queue, batcher = FakeQueue(5), PopBatcher()
        queue.release.set()
        assert numbers(await batcher.pop("q", 2, queue.claim)) == [0, 1]
        assert numbers(await batcher.pop("q", 1, queue.claim)) == [2]
        assert queue.limits == [2, 1]
        assert batcher.statements_sent == 2

    asyncio.run(scenario())


def test_pops_arriving_during_a_statement_share_the_next_one_in_order() -> None:
    async def scenario() -> None:
        queue, batcher = FakeQueue(20), PopBatcher()
        first, waiting = await held_pop_and_waiters(batcher, queue, [1, 3, 1])
        assert queue.limits == [1], "pops that arrive while a statement is out wait for it"
        queue.release.set()
        assert numbers(await first) == [0]
        assert [numbers(await task) for task in waiting] == [[1], [2, 3, 4], [5]]
        assert queue.limits == [1, 5], "the waiters' limits add up into one statement"

    asyncio.run(scenario())


def test_a_short_batch_serves_the_earliest_waiters_and_answers_the_rest_empty() -> None:
    async def scenario() -> None:
        queue, batcher = FakeQueue(3), PopBatcher()
        first, waiting = await held_pop_and_waiters(batcher, queue, [1] * 4)
        queue.release.set()
        await first
        assert [numbers(await task) for task in waiting] == [[1], [2], [], []]

    asyncio.run(scenario())


def test_targets_do_not_wait_for_each_other() -> None:
    async def scenario() -> None:
        one, other, batcher = FakeQueue(2), FakeQueue(2), PopBatcher()
        held = asyncio.create_task(batcher.pop("one", 1, one.claim))
        await settle()
        other.release.set()
        assert numbers(await batcher.pop("other", 1, other.claim)) == [0]
        one.release.set()
        assert numbers(await held) == [0]

    asyncio.run(scenario())


def test_a_failed_batch_statement_reaches_every_waiter_and_the_next_pop_starts_afresh() -> None:
    async def scenario() -> None:
        queue, batcher = FakeQueue(10), PopBatcher()
        queue.failing_calls = {2}
        first, waiting = await held_pop_and_waiters(batcher, queue, [1] * 3)
        queue.release.set()
        assert numbers(await first) == [0]
        results = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(result, ConnectionError) for result in results)
        assert numbers(await batcher.pop("q", 1, queue.claim)) == [1], "nothing was taken by the failed batch"

    asyncio.run(scenario())


def test_a_waiter_that_gave_up_before_its_statement_takes_nothing() -> None:
    async def scenario() -> None:
        queue, batcher = FakeQueue(10), PopBatcher()
        first, (gone, stays) = await held_pop_and_waiters(batcher, queue, [4, 1])
        gone.cancel()
        queue.release.set()
        await first
        assert numbers(await stays) == [1]
        assert queue.limits == [1, 1], "the cancelled pop's limit was not asked for"
        with pytest.raises(asyncio.CancelledError):
            await gone

    asyncio.run(scenario())


def test_a_batch_claims_at_most_max_batch_tasks_and_the_rest_wait_for_the_next() -> None:
    async def scenario() -> None:
        queue, batcher = FakeQueue(3 * MAX_BATCH_TASKS), PopBatcher()
        big = MAX_BATCH_TASKS // 2 + 1
        first, waiting = await held_pop_and_waiters(batcher, queue, [big] * 3)
        queue.release.set()
        await first
        shares = [len(await task) for task in waiting]
        assert shares == [big, big, big]
        assert queue.limits == [1, big, big, big], "two waiters together would exceed MAX_BATCH_TASKS"

    asyncio.run(scenario())
