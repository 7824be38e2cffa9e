"""Settling pop receipts (core/receipts.py): the tasks of a pop whose answer did not reach its
client go back to their queue as soon as the database answers.

A process keeps its receipts to settle in memory. Settling a receipt is one short transaction and
changes only tasks still `dispatched` under it, so doing it twice, or for a pop that handed out
nothing, is harmless. A pop whose outcome is unknown (its statement may still commit: the connection
broke mid-statement, or the request gave up at its deadline while the statement ran on) is settled
once more a few seconds later, in case its commit came after the first settling.

A process that dies with receipts to settle leaves their tasks to the task timeout
(BATON_TASK_TIMEOUT_SECONDS), as a client that received tasks and vanished does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from baton.core.errors import DatabaseUnavailableError
from baton.core.logging import get_logger
from baton.core.model import utcnow
from baton.core.receipts import Settlement, settlements_for

log = get_logger("baton.receipts")
RETRY_SECONDS = 1.0  # while the database is down: a look each second (one statement, failing fast)


class Settles(Protocol):
    async def settle(self, settlement: Settlement, now: Any) -> int: ...


class Settler:
    """The receipts this process has to settle, and the one task that settles them."""

    def __init__(self, executor: Settles, again_after: float, handed_back: Any | None = None) -> None:
        self.executor = executor
        self.again_after = again_after  # an unknown outcome is settled again after this long
        self.handed_back = handed_back  # a counter of the tasks put back (metrics), if any
        self.pending: list[tuple[Settlement, bool]] = []  # (settlement, settle once more afterwards)
        self._task: asyncio.Task[None] | None = None
        self._later: set[asyncio.TimerHandle] = set()
        self.closed = False

    def unknown(self, receipt: Any, popped_at: Any) -> None:
        """A pop's outcome is unknown (it failed, or its answer was given up): settle its receipt."""
        self._add(Settlement(receipt, popped_at), again=True)

    def unanswered(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Popped rows that will not reach their client: hand them back."""
        for settlement in settlements_for(list(rows)):
            self._add(settlement, again=False)

    def _add(self, settlement: Settlement, again: bool) -> None:
        if self.closed:
            return
        self.pending.append((settlement, again))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self.pending:
            batch, self.pending = self.pending, []
            failed = [entry for entry in batch if not await self._settle(*entry)]
            if failed:
                self.pending = failed + self.pending
                await asyncio.sleep(RETRY_SECONDS)

    async def _settle(self, settlement: Settlement, again: bool) -> bool:
        """True when done with (settled, or given up on); False to try again later."""
        try:
            count = await self.executor.settle(settlement, utcnow())
        except DatabaseUnavailableError:
            return False  # the outage is logged once, by the tracker
        except Exception:
            log.exception(
                "cannot settle a pop receipt; its tasks wait for the task timeout", receipt=settlement.receipt
            )
            return True
        if count:
            log.info("handed back the tasks of an unanswered pop", receipt=str(settlement.receipt), tasks=count)
            if self.handed_back is not None:
                self.handed_back.inc(count)
        if again:
            loop = asyncio.get_running_loop()
            handle = loop.call_later(self.again_after, self._again, settlement)
            self._later.add(handle)
        return True

    def _again(self, settlement: Settlement) -> None:
        now = asyncio.get_running_loop().time()
        self._later = {handle for handle in self._later if handle.when() > now}  # the ones still to come
        self._add(settlement, again=False)

    async def settled(self) -> None:
        """Until nothing is left to settle now (tests; a stopping server)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self, seconds: float = 2.0) -> None:
        """Settle what is pending, for `seconds` at most; then stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.settled(), seconds)
        self.closed = True
        for handle in self._later:
            handle.cancel()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
