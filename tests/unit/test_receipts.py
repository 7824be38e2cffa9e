"""The pure rules of pop receipts (core/receipts.py) and of the request's one deadline
(core/deadline.py)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from baton.core import deadline
from baton.core.errors import DatabaseUnavailableError
from baton.core.queueing import PopTarget
from baton.core.receipts import KEY_MAX_LENGTH, Settlement, key_expires_at, key_problem, key_scope, settlements_for


@pytest.mark.parametrize("key", ["a", "x" * KEY_MAX_LENGTH, "5f0c7a6e-1b9e-4c1d-9a53-0e0b8a1e2f11", "with space ~!"])
def test_keys_of_printable_ascii_up_to_the_limit_are_keys(key: str) -> None:
    assert key_problem(key) is None


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "must not be empty"),
        ("x" * (KEY_MAX_LENGTH + 1), f"at most {KEY_MAX_LENGTH} characters (got {KEY_MAX_LENGTH + 1})"),
        ("tab\there", "printable ASCII characters only"),
        ("naïve", "printable ASCII characters only"),
        ("nul\x00", "printable ASCII characters only"),
    ],
)
def test_anything_else_is_refused_saying_why(key: str, problem: str) -> None:
    assert key_problem(key) == problem


def test_a_key_applies_to_one_queue_or_one_type() -> None:
    assert key_scope(PopTarget(queue="boefje-acme")) == "queue:boefje-acme"
    assert key_scope(PopTarget(type="boefje")) == key_scope(PopTarget(type="boefje", fair=False)) == "type:boefje"
    assert key_scope(PopTarget(queue="boefje")) != key_scope(PopTarget(type="boefje"))


def test_a_key_holds_for_its_seconds() -> None:
    now = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
    assert key_expires_at(now, 300) == now + timedelta(minutes=5)


def test_popped_rows_are_settled_per_pop_naming_their_tasks() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    at = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
    later = at + timedelta(microseconds=1)
    tasks = [uuid.uuid4() for _ in range(3)]
    rows: list[dict[str, Any]] = [
        {"id": tasks[0], "receipt": first, "modified_at": at},
        {"id": tasks[1], "receipt": second, "modified_at": later},
        {"id": tasks[2], "receipt": first, "modified_at": at},
    ]
    assert settlements_for(rows) == [
        Settlement(first, at, (tasks[0], tasks[2])),
        Settlement(second, later, (tasks[1],)),
    ]
    assert settlements_for([]) == []


def test_work_within_the_deadline_answers_as_it_is() -> None:
    async def quick() -> str:
        await asyncio.sleep(0)
        return "rows"

    assert asyncio.run(deadline.within(quick(), 1.0)) == "rows"


def test_work_past_the_deadline_is_a_503_and_hands_its_outcome_on() -> None:
    outcomes: list[tuple[Any, BaseException | None]] = []

    async def scenario() -> None:
        release = asyncio.Event()

        async def slow() -> str:
            await release.wait()
            return "committed late"

        with deadline.starting(0.01), pytest.raises(deadline.TooLateError) as raised:
            await deadline.within(slow(), 0.01, lambda result, error: outcomes.append((result, error)))
        assert isinstance(raised.value, DatabaseUnavailableError)  # answered 503, with Retry-After
        assert outcomes == []  # abandoned, not cancelled: it runs on
        release.set()
        for _ in range(3):
            await asyncio.sleep(0)

    asyncio.run(scenario())
    assert outcomes == [("committed late", None)]


def test_one_deadline_is_shared_by_everything_the_request_tries() -> None:
    async def scenario() -> float:
        deadline.begin(10.0)
        await asyncio.sleep(0.05)
        return deadline.remaining(99.0)

    left = asyncio.run(scenario())
    assert 9.0 < left <= 9.95  # what is left of the request's 10 s, not a fresh default of 99 s


def test_outside_a_request_each_call_gets_the_default() -> None:
    async def scenario() -> float:
        return deadline.remaining(3.0)

    assert 2.5 < asyncio.run(scenario()) <= 3.0


def test_work_that_waits_several_times_keeps_one_deadline() -> None:
    outcomes: list[tuple[Any, BaseException | None]] = []

    async def scenario() -> None:
        release = asyncio.Event()

        async def two_steps() -> str:
            await asyncio.sleep(0.001)  # a wait that ends in time
            await release.wait()  # and one that does not
            return "second"

        started = asyncio.get_running_loop().time()
        with pytest.raises(deadline.TooLateError):
            await deadline.within(two_steps(), 0.05, lambda result, error: outcomes.append((result, error)))
        assert asyncio.get_running_loop().time() - started < 5  # not stuck on the second wait
        release.set()
        await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert outcomes == [("second", None)]


def test_work_that_fails_raises_its_own_error() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise DatabaseUnavailableError("database connection lost; retry later")

    with pytest.raises(DatabaseUnavailableError, match="connection lost"):
        asyncio.run(deadline.within(failing(), 1.0))


def test_a_cancellation_reaches_the_work_as_from_a_plain_await() -> None:
    """asyncio.timeout inside the work cancels the current task, the caller's: the work must get
    that cancellation (and turn it into its TimeoutError), not the caller."""
    seen: list[str] = []

    async def scenario() -> str:
        async def with_its_own_timeout() -> str:
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.Event().wait()
            except TimeoutError:
                seen.append("its own timeout")
            await asyncio.sleep(0)
            return "went on"

        return await deadline.within(with_its_own_timeout(), 5.0)

    assert asyncio.run(scenario()) == "went on"
    assert seen == ["its own timeout"]

    async def cancelled_caller() -> None:
        stopped: list[str] = []

        async def slow() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                stopped.append("work cancelled")
                raise

        caller = asyncio.ensure_future(deadline.within(slow(), 5.0))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert stopped == ["work cancelled"]

    asyncio.run(cancelled_caller())
