"""Settling pop receipts (core/receipts.py): the tasks of a pop whose answer did not reach its client
go back to their queue as soon as the database answers.

Settling a receipt is one short transaction and changes only tasks still `dispatched` under it, so
doing it twice, or for a pop that handed out nothing, is harmless. A pop whose outcome is unknown (its
statement may still commit: the connection broke mid-statement, or the request gave up at its deadline
while the statement ran on) is settled at once and once more a little later, in case its commit came
after the first settling. That second settling is remembered in the database in the same transaction as
the first (`pending_settlements`), so if this process dies before it, any housekeeper does it
(control/housekeeping.py): nothing is left for the task timeout to find.

What only this process's memory holds is a receipt it could not settle at all yet: the database did
not answer (an outage), so nothing could be written either; it is tried every second until it can.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from baton.core.errors import DatabaseUnavailableError
from baton.core.logging import get_logger
from baton.core.model import utcnow
from baton.core.receipts import Settlement, settlements_for

log = get_logger("baton.receipts")
RETRY_SECONDS = 1.0  # while the database is down: a look each second (one statement, failing fast)
# How long a pop whose outcome is unknown waits, at most, for its first settling to be written before
# its client is answered (the error path only): a process killed right after still leaves it remembered.
RECORD_SECONDS = 1.0


class Settles(Protocol):
    async def settle(self, settlement: Settlement, now: datetime) -> int: ...

    async def settle_and_remember(self, settlement: Settlement, now: datetime, again_at: datetime) -> int: ...

    async def settle_remembered(self, receipt: Any, now: datetime) -> int: ...


class Settler:
    """The receipts this process has to settle, and the one task that settles them."""

    def __init__(self, door: Settles, again_after: float, handed_back: Any | None = None) -> None:
        self.door = door
        self.again_after = again_after  # an unknown outcome is settled again after this long
        self.handed_back = handed_back  # a counter of the tasks put back (metrics), if any
        self.pending: list[tuple[Settlement, bool]] = []  # (settlement, settle once more afterwards)
        self._task: asyncio.Task[None] | None = None
        self._later: set[asyncio.TimerHandle] = set()
        self._later_tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    async def unknown(self, receipt: Any, popped_at: datetime) -> None:
        """A pop's outcome is unknown (it failed, or its answer was given up): settle its receipt now and
        once more later. Returns once the first settling is written (within RECORD_SECONDS; else it is
        left to the settling task, which tries until the database answers)."""
        settlement = Settlement(receipt, popped_at)
        if self.closed:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(RECORD_SECONDS):
                if await self._settle(settlement, again=True):
                    return
        self._add(settlement, again=True)

    def unknown_soon(self, receipt: Any, popped_at: datetime) -> None:
        """`unknown`, without waiting for the first settling (from a callback, or a cancelled request)."""
        self._add(Settlement(receipt, popped_at), again=True)

    def unanswered(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Popped rows that will not reach their client: hand them back."""
        for settlement in settlements_for(rows):
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
        now = utcnow()
        try:
            if again:
                count = await self.door.settle_and_remember(settlement, now, now + timedelta(seconds=self.again_after))
            else:
                count = await self.door.settle(settlement, now)
        except DatabaseUnavailableError:
            return False  # the outage is logged once, by the tracker
        except Exception:
            log.exception(
                "cannot settle a pop receipt; its tasks wait for the task timeout", receipt=settlement.receipt
            )
            return True
        self._handed_back(settlement, count)
        if again:
            handle = asyncio.get_running_loop().call_later(self.again_after, self._again, settlement)
            self._later.add(handle)
        return True

    def _handed_back(self, settlement: Settlement, count: int) -> None:
        if count:
            log.info("handed back the tasks of an unanswered pop", receipt=str(settlement.receipt), tasks=count)
            if self.handed_back is not None:
                self.handed_back.inc(count)

    def _again(self, settlement: Settlement) -> None:
        now = asyncio.get_running_loop().time()
        self._later = {handle for handle in self._later if handle.when() > now}  # the ones still to come
        if not self.closed:
            task = asyncio.get_running_loop().create_task(self._settle_remembered(settlement))
            self._later_tasks.add(task)
            task.add_done_callback(self._later_tasks.discard)

    async def _settle_remembered(self, settlement: Settlement) -> None:
        """The second settling of a remembered receipt (should it fail, a housekeeper does it)."""
        try:
            count = await self.door.settle_remembered(settlement.receipt, utcnow())
        except Exception:  # an outage or worse: the remembered row waits for a housekeeper
            return
        self._handed_back(settlement, count)

    async def settled(self) -> None:
        """Until nothing is left to settle now (tests; a stopping server)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self, seconds: float = 2.0) -> None:
        """Settle what is pending, for `seconds` at most; then stop. A receipt remembered for a second
        settling that has not come yet stays remembered in the database, for a housekeeper."""
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
