"""The leases of the schedulers one process runs (a director's thread runner, a worker, a child
process or pod running one scheduler): claimed in one statement, renewed together every retry
period (which is also their heartbeat), released on a graceful stop.

A scheduler whose claim is lost (someone else's term now, its organisation gone) is told at once;
one that cannot be renewed within the renew deadline (database unreachable, process frozen) is
told to stop too, before its lease can expire and someone else takes over. Fencing (every write
checked against the claim, storage/scheduler_leases.py) covers whatever slips between the two.
When the database comes back from an outage the leases are renewed at once, not at the next round.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from baton.core.errors import DatabaseUnavailableError
from baton.core.leases import making_progress, past_renew_deadline
from baton.core.logging import get_logger
from baton.core.settings import LeaseSettings
from baton.storage import scheduler_leases
from baton.storage.engine import Store
from baton.storage.errors import DATABASE
from baton.storage.pool_changes import announce_pool_change
from baton.storage.scheduler_leases import Claim

log = get_logger("baton.ownership")
# New states are written soon, not at once: when a thousand schedulers start together, one write
# carries a burst of them instead of one statement per scheduler competing with their start-up.
STATE_WRITE_GATHER_SECONDS = 0.2


def new_owner_id() -> str:
    """`host:pid#random`: where the claims' holder runs, unique even when a container's pid repeats."""
    return f"{owner_prefix(os.getpid())}{secrets.token_hex(3)}"


def owner_prefix(pid: int) -> str:
    """What every owner id of the process `pid` on this host starts with."""
    return f"{os.uname().nodename}:{pid}#"


class Lessee(Protocol):
    """What a scheduler offers its ownership: told when its lease is lost or its queue toggled."""

    def lease_lost(self, reason: str) -> None: ...

    def set_enabled(self, enabled: bool) -> None: ...


@dataclass
class _Held:
    claim: Claim
    lessee: Lessee
    state: str | None = None
    progressed_at: float = field(default_factory=time.monotonic)


class Ownership:
    """Claims, renews and releases scheduler leases for one process."""

    def __init__(
        self,
        store: Store,
        settings: LeaseSettings,
        owner: str | None = None,
        hung_after_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.settings = settings
        self.owner = owner or new_owner_id()
        self.hung_after_seconds = hung_after_seconds
        self.leader_term: int | None = None  # set by a director: claims only while its term holds
        self._clock = clock
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._renewed_at = clock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._changed: set[str] = set()  # schedulers whose new state is not written yet
        self._renew_now = False  # the database is back from an outage: renew at once, not at the next round
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # -- claims ------------------------------------------------------------------------------------

    def claim(self, scheduler_ids: Iterable[str], runner: str | None = None) -> dict[str, Claim]:
        """Claim what nobody holds, in one statement; the ones we got."""
        wanted = list(scheduler_ids)
        with self.store.control_session() as session:
            claims = scheduler_leases.claim_schedulers(
                session, wanted, self.owner, self.settings.lease_seconds, self.leader_term, runner=runner
            )
        if len(claims) < len(wanted):
            self._end_lapsed_lockers()
        return {claim.scheduler_id: claim for claim in claims}

    def claim_unowned(self, limit: int, runner: str | None = None, running_here: Iterable[str] = ()) -> list[Claim]:
        with self.store.control_session() as session:
            claims = scheduler_leases.claim_unowned(
                session, self.owner, limit, self.settings.lease_seconds, runner=runner, running_here=running_here
            )
        if len(claims) < limit:
            self._end_lapsed_lockers()
        return claims

    def _end_lapsed_lockers(self) -> None:
        """Rows we could not claim may be locked by a frozen process past its lease: end its
        transaction, so the next round claims them (storage/scheduler_leases.py explains when that happens)."""
        with self.store.control_session() as session:
            ended = scheduler_leases.end_lapsed_lockers(session)
        if ended:
            log.warning("ended database sessions that held lapsed scheduler rows locked", sessions=ended)

    def hold(self, claim: Claim, lessee: Lessee) -> None:
        """Renew `claim` from now on, on behalf of `lessee`."""
        with self._lock:
            self._held[claim.scheduler_id] = _Held(claim, lessee)

    def report(self, scheduler_id: str, state: str) -> None:
        """The state to write with the next renewal; also proof that the scheduler's loop is alive."""
        with self._lock:
            held = self._held.get(scheduler_id)
            if held is not None:
                changed = held.state != state
                held.state = state
                held.progressed_at = self._clock()
            else:
                changed = False
        if changed:
            with self._lock:
                self._changed.add(scheduler_id)
            self._wake.set()  # a new state is written now, not at the next round

    def release(self, claim: Claim, state: str) -> None:
        """Stop renewing and give the row up with its final state (only if it is still ours). A row
        given up already (release_many, release_all) costs no statement."""
        with self._lock:
            held = self._held.get(claim.scheduler_id)
            if held is None or held.claim != claim:
                return
            del self._held[claim.scheduler_id]
        with self.store.control_session() as session:
            scheduler_leases.release_claims(session, [claim], state)

    def release_many(self, scheduler_ids: Iterable[str], state: str, announce: bool = False) -> int:
        """Give these rows up in one statement (a worker above its share): peers may claim them at
        once; the schedulers still running here are stopped by their owner and fenced meanwhile."""
        with self._lock:
            claims = [held.claim for held in (self._held.pop(sid, None) for sid in scheduler_ids) if held is not None]
        return self._release(claims, state, announce)

    def _release(self, claims: list[Claim], state: str, announce: bool) -> int:
        """`announce`: wake the workers, who claim what was given up in their next round."""
        if not claims:
            return 0
        with self.store.control_session() as session:
            released = scheduler_leases.release_claims(session, claims, state)
            if announce:
                announce_pool_change(session)
            return released

    def release_all(self, state: str, announce: bool = False) -> int:
        """Give every held row up in one statement (a worker leaving): peers can claim them at once,
        and any write the schedulers still attempt is fenced."""
        with self._lock:
            claims = [held.claim for held in self._held.values()]
            self._held.clear()
        return self._release(claims, state, announce)

    def forget(self, scheduler_id: str) -> None:
        with self._lock:
            self._held.pop(scheduler_id, None)

    def held(self) -> list[Claim]:
        with self._lock:
            return [held.claim for held in self._held.values()]

    # -- renewal -----------------------------------------------------------------------------------

    def renew(self) -> None:
        """One round: renew every lease whose scheduler still makes progress, in one statement per
        state; tell the lessees of lost claims. Raises when the database cannot be reached."""
        now = self._clock()
        with self._lock:
            live = [
                held
                for held in self._held.values()
                if making_progress(now, held.progressed_at, self.hung_after_seconds)
            ]
            self._changed.clear()
        self._renew(live)
        self._renewed_at = self._clock()

    def write_changed_states(self) -> None:
        """Between rounds: only the schedulers whose state changed (their leases renewed with it)."""
        with self._lock:
            changed = [self._held[sid] for sid in self._changed if sid in self._held]
            self._changed.clear()
        self._renew(changed)

    def _renew(self, live: list[_Held]) -> None:
        with self._lock:
            states = {held.claim.scheduler_id: held.state for held in live if held.state is not None}
        if live:
            with self.store.control_session() as session:
                renewed = scheduler_leases.renew_claims(
                    session, [held.claim for held in live], self.settings.lease_seconds, states
                )
        else:
            renewed = {}
        for held in live:
            answer = renewed.get(held.claim.scheduler_id)
            if answer is None:
                self._lose(held, "its row is held under another term now (taken over, or organisation deleted)")
            else:
                held.lessee.set_enabled(answer.enabled)

    def _lose(self, held: _Held, reason: str) -> None:
        with self._lock:
            if self._held.get(held.claim.scheduler_id) is not held:
                return
            del self._held[held.claim.scheduler_id]
        held.lessee.lease_lost(reason)

    def past_renew_deadline(self) -> bool:
        return past_renew_deadline(self._clock(), self._renewed_at, self.settings.renew_deadline_seconds)

    def give_up_everything(self, reason: str) -> None:
        with self._lock:
            everything = list(self._held.values())
        for held in everything:
            self._lose(held, reason)

    def run(self) -> None:
        next_round = self._clock() + self.settings.retry_period_seconds
        while not self._stop.is_set():
            self._wake.wait(max(0.0, next_round - self._clock()))
            if self._renew_now:
                self._renew_now, next_round = False, self._clock()
            elif self._clock() < next_round:  # woken by a new state: gather the rest of the burst
                self._stop.wait(STATE_WRITE_GATHER_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if self._clock() >= next_round:
                    next_round = self._clock() + self.settings.retry_period_seconds
                    self.renew()
                else:
                    self.write_changed_states()
            except DatabaseUnavailableError:  # keep trying until the renew deadline (logged as an outage)
                pass
            except Exception as exc:
                log.warning("could not renew scheduler leases", owner=self.owner, error=str(exc).splitlines()[0])
            if self.past_renew_deadline():
                self.give_up_everything(
                    f"leases not renewed for {self.settings.renew_deadline_seconds:g} s (renew deadline)"
                )

    def _database_back(self) -> None:
        self._renew_now = True
        self._wake.set()

    def start_in_background(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._renewed_at = self._clock()
            self._unsubscribe = DATABASE.on_recovery(self._database_back)
            self._thread = threading.Thread(target=self.run, name="ownership", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
