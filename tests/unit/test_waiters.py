"""Who a wake-up wakes among the pops waiting in one process (service/queues.py `Waiters`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import ExitStack

from baton.service.queues import Waiter, Waiters, queued_keys


class Gauge:
    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = value


def woken(waiters: list[Waiter]) -> list[bool]:
    return [waiter.woken.is_set() for waiter in waiters]


def run(test: Callable[[], None]) -> None:
    """Waiters' events belong to an event loop: run the test's body inside one."""

    async def body() -> None:
        test()

    asyncio.run(body())


def test_a_queued_task_names_its_queue_and_its_type() -> None:
    assert queued_keys("boefje-acme") == ("queue:boefje-acme", "type:boefje")
    assert queued_keys("odd") == ("queue:odd",)


def test_one_push_wakes_the_longest_waiting_of_a_queue_and_one_of_its_type() -> None:
    def body() -> None:
        waiters = Waiters(limit=10, gauge=Gauge())
        with ExitStack() as stack:
            by_queue = [stack.enter_context(waiters.waiting("queue:boefje-acme")) for _ in range(3)]
            by_type = [stack.enter_context(waiters.waiting("type:boefje")) for _ in range(2)]
            other = stack.enter_context(waiters.waiting("queue:normalizer-acme"))
            waiters.wake("boefje-acme")
            assert woken(by_queue) == [True, False, False]
            assert woken(by_type) == [True, False]
            assert not other.woken.is_set()
            waiters.wake("boefje-acme")  # the first is still to look: it will see both tasks' queue
            assert woken(by_queue) == [True, False, False]
        assert waiters.count == 0

    run(body)


def test_a_waiter_that_got_a_task_passes_the_wake_up_on_one_that_found_nothing_does_not() -> None:
    def body() -> None:
        waiters = Waiters(limit=10, gauge=Gauge())
        with waiters.waiting("queue:q") as next_in_line:
            with waiters.waiting("queue:q") as empty_handed:
                empty_handed.passes_on = False  # it looked and found nothing
            assert not next_in_line.woken.is_set()
            with waiters.waiting("queue:q") as taker:
                taker.passes_on = True  # it popped a task: more may be queued
            assert next_in_line.woken.is_set()

    run(body)


def test_a_wake_up_left_unused_goes_to_the_next_waiter() -> None:
    def body() -> None:
        waiters = Waiters(limit=10, gauge=Gauge())
        with waiters.waiting("queue:q") as stays:
            with waiters.waiting("queue:q") as leaves:
                stays.woken.set()
                stays.woken.clear()
                leaves.woken.set()  # woken, then its client hung up before it looked
            assert stays.woken.is_set()

    run(body)


def test_waiters_with_a_filter_are_always_woken() -> None:
    def body() -> None:
        waiters = Waiters(limit=10, gauge=Gauge())
        with (
            waiters.waiting("queue:q") as plain,
            waiters.waiting("queue:q", filtered=True) as picky,
            waiters.waiting("queue:q") as later,
        ):
            waiters.wake("q")
            assert woken([plain, picky, later]) == [True, True, False]

    run(body)


def test_closing_wakes_everyone_and_the_gauge_counts_waiters() -> None:
    def body() -> None:
        gauge = Gauge()
        waiters = Waiters(limit=2, gauge=gauge)
        with waiters.waiting("queue:a") as one, waiters.waiting("type:boefje") as two:
            assert gauge.value == 2 and waiters.full
            waiters.close()
            assert woken([one, two]) == [True, True] and waiters.closed
        assert gauge.value == 0 and not waiters.full

    run(body)


def test_wake_all_wakes_one_per_queue_and_type() -> None:
    def body() -> None:
        waiters = Waiters(limit=10, gauge=Gauge())
        with waiters.waiting("queue:a") as a1, waiters.waiting("queue:a") as a2, waiters.waiting("type:x") as x:
            waiters.wake_all()
            assert woken([a1, a2, x]) == [True, False, True]

    run(body)


def test_when_announcements_stop_every_waiter_looks_for_itself() -> None:
    def body() -> None:
        waiters = Waiters(limit=10, gauge=Gauge())
        with waiters.waiting("queue:a") as a1, waiters.waiting("queue:a") as a2, waiters.waiting("type:x") as x:
            waiters.wake_everyone()
            assert woken([a1, a2, x]) == [True, True, True] and not waiters.closed

    run(body)
