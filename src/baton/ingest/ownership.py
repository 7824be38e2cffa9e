"""The leases of the schedulers one process runs (a director's thread runner, a worker, a child
process or pod running one scheduler): claimed in one statement, renewed together every retry
period by one write of the process's lease-holder row (which is also their heartbeat), however many
they are, released on a graceful stop.

A scheduler whose claim is lost (someone else's term now, its organisation gone) is told at once:
each renewal reads how many rows the process owns and the sum of their terms, and only when those
disagree with what it holds, which rows. Rows it owns but holds no scheduler for (claims never
taken up, or everything given up in an outage) are released then. A scheduler whose turn has run
longer than the heartbeat timeout is hung: its row is released as failed, so another process takes
it over (one overdue between turns only when no turn of the process ended meanwhile either: after a
burst of events thousands wait for a few threads, and waiting is not hanging). When the holder
cannot be renewed within the renew deadline (database unreachable, process frozen) every scheduler
is told to stop, before the lease can expire and someone else takes over. Fencing (every write
checked against the claim, storage/control/scheduler_leases.py) covers whatever slips between the two.
When the database comes back from an outage the leases are renewed at once, not at the next round.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from baton.core.errors import DatabaseUnavailableError
from baton.core.leases import hung_before, past_renew_deadline
from baton.core.logging import get_logger
from baton.core.settings import LeaseSettings
from baton.storage.control import scheduler_leases
from baton.storage.control.pool_changes import announce_pool_change
from baton.storage.control.scheduler_leases import Claim
from baton.storage.engine import Store
from baton.storage.errors import DATABASE

log = get_logger("baton.ownership")
# A claim no scheduler took up within this many leases was forgotten by its claimant (runners give up
# the claims they do not use: `abandon`): its row is released. Starting 30,000 schedulers on a
# loaded machine may take longer than one lease.
ABANDONED_AFTER_LEASES = 10
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


class _Holdings(dict[str, "_Held"]):
    """The held claims by scheduler id, with the sum of their terms kept as they come and go: a
    renewal compares it with the database's without adding up thousands each time."""

    def __init__(self) -> None:
        super().__init__()
        self.term_sum = 0

    def __setitem__(self, scheduler_id: str, held: _Held) -> None:
        previous = super().get(scheduler_id)
        if previous is not None:
            self.term_sum -= previous.claim.term
        super().__setitem__(scheduler_id, held)
        self.term_sum += held.claim.term

    def __delitem__(self, scheduler_id: str) -> None:
        self.term_sum -= self[scheduler_id].claim.term
        super().__delitem__(scheduler_id)

    def pop_held(self, scheduler_id: str) -> _Held | None:
        held = super().pop(scheduler_id, None)
        if held is not None:
            self.term_sum -= held.claim.term
        return held

    def clear(self) -> None:
        super().clear()
        self.term_sum = 0


@dataclass(slots=True)
class _Held:
    claim: Claim
    lessee: Lessee
    # When the scheduler last reported (a turn began), or, while it waits for its next turn, when
    # that turn is due: waiting is not hanging, however long the pause. On the ownership's clock.
    progressed_at: float
    state: str | None = None
    # Between turns (its last turn ended, the next has not begun): past its due time it may only be
    # waiting for one of the process's threads, behind thousands of others after a burst of events.
    between_turns: bool = False


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
        self._held = _Holdings()
        self._pending: dict[str, tuple[Claim, float]] = {}  # claimed here, no scheduler holds it yet
        self._disabled: frozenset[str] = frozenset()
        self._compare_rows = False  # at the next renewal, whatever the count says (everything given up)
        self._renewals = 0
        self._lock = threading.Lock()
        # Claims, releases and renewals one at a time: what the database says the process owns and
        # what it holds are compared with nothing changing either in between.
        self._owning = threading.RLock()
        self._renewed_at = clock()
        self._turn_ended_at = float("-inf")  # when a turn of any of its schedulers last ended
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._changed: set[str] = set()  # schedulers whose new state is not written yet
        self._renew_now = False  # the database is back from an outage: renew at once, not at the next round
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # -- claims ------------------------------------------------------------------------------------

    def claim(self, scheduler_ids: Iterable[str], runner: str | None = None) -> dict[str, Claim]:
        """Claim what nobody holds, in one statement; the ones we got (to `hold` soon)."""
        wanted = list(scheduler_ids)
        with self._owning:
            with self.store.control_session() as session:
                claims = scheduler_leases.claim_schedulers(
                    session, wanted, self.owner, self.settings.lease_seconds, self.leader_term, runner=runner
                )
            self._pend(claims)
        if len(claims) < len(wanted):
            self._end_lapsed_lockers()
        return {claim.scheduler_id: claim for claim in claims}

    def claim_unowned(self, limit: int, runner: str | None = None, running_here: Iterable[str] = ()) -> list[Claim]:
        if limit <= 0:
            return []
        with self._owning:
            with self.store.control_session() as session:
                claims = scheduler_leases.claim_unowned(
                    session, self.owner, limit, self.settings.lease_seconds, runner=runner, running_here=running_here
                )
            self._pend(claims)
        if len(claims) < limit:
            self._end_lapsed_lockers()
        return claims

    def abandon(self, claims: Iterable[Claim]) -> None:
        """Claims no scheduler will take up (one of that id runs here already): give them up."""
        with self._owning:
            with self._lock:
                gone = [claim for claim in claims if self._pending.get(claim.scheduler_id, (None,))[0] == claim]
                for claim in gone:
                    del self._pending[claim.scheduler_id]
            self._release(gone, "stopped", announce=False)

    def _pend(self, claims: list[Claim]) -> None:
        now = self._clock()
        with self._lock:
            for claim in claims:
                self._pending[claim.scheduler_id] = (claim, now)

    def _end_lapsed_lockers(self) -> None:
        """Rows we could not claim may be locked by a frozen process past its lease: end its
        transaction, so the next round claims them (storage/control/scheduler_leases.py explains when that happens)."""
        with self.store.control_session() as session:
            ended = scheduler_leases.end_lapsed_lockers(session)
        if ended:
            log.warning("ended database sessions that held lapsed scheduler rows locked", sessions=ended)

    def hold(self, claim: Claim, lessee: Lessee) -> None:
        """Renew `claim` from now on, on behalf of `lessee`."""
        with self._lock:
            pending = self._pending.get(claim.scheduler_id)
            if pending is not None and pending[0] == claim:
                del self._pending[claim.scheduler_id]
            self._held[claim.scheduler_id] = _Held(claim, lessee, progressed_at=self._clock())
            disabled = claim.scheduler_id in self._disabled
        if disabled:
            lessee.set_enabled(False)

    def expect(self, scheduler_id: str, pause: float) -> None:
        """The scheduler's turn ended; its next is due in `pause` seconds: it is not hung until then."""
        with self._lock:
            held = self._held.get(scheduler_id)
            if held is not None:
                now = self._clock()
                held.progressed_at = now + pause
                held.between_turns = True
                self._turn_ended_at = now

    def report(self, scheduler_id: str, state: str) -> None:
        """The state to write with the next renewal; also proof that the scheduler's loop is alive."""
        with self._lock:
            held = self._held.get(scheduler_id)
            if held is not None:
                changed = held.state != state
                held.state = state
                held.progressed_at = self._clock()
                held.between_turns = False
            else:
                changed = False
        if changed:
            with self._lock:
                self._changed.add(scheduler_id)
            self._wake.set()  # a new state is written now, not at the next round

    def release(self, claim: Claim, state: str) -> None:
        """Stop renewing and give the row up with its final state (only if it is still ours). A row
        given up already (release_many, release_all) costs no statement."""
        with self._owning:
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
        with self._owning:
            with self._lock:
                claims = [h.claim for h in (self._held.pop_held(sid) for sid in scheduler_ids) if h is not None]
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
        """Give every held (and claimed, not yet held) row up in one statement (a worker leaving):
        peers can claim them at once, and any write the schedulers still attempt is fenced."""
        with self._owning:
            with self._lock:
                claims = [held.claim for held in self._held.values()] + [c for c, _ in self._pending.values()]
                self._held.clear()
                self._pending.clear()
            return self._release(claims, state, announce)

    def forget(self, scheduler_id: str) -> None:
        with self._lock:
            self._held.pop_held(scheduler_id)

    def held(self) -> list[Claim]:
        with self._lock:
            return [held.claim for held in self._held.values()]

    # -- renewal -----------------------------------------------------------------------------------

    def renew(self) -> None:
        """One round: renew the process's holder row (every row it owns with it) and write the states
        that changed; release the rows of hung schedulers and the rows it owns but holds nothing for;
        tell the lessees of lost claims and of queues enabled or disabled. Raises when the database
        cannot be reached."""
        told: list[tuple[_Held, str]] = []
        with self._owning:
            now = self._clock()
            with self._lock:
                cutoff = hung_before(now, self.hung_after_seconds)
                # A scheduler overdue between turns is waiting for a thread while other turns end; it
                # is hung only when no turn of the process ended either (its threads are stuck).
                turns_end = self._turn_ended_at > cutoff
                hung = [
                    held
                    for held in self._held.values()
                    if held.progressed_at <= cutoff and not (held.between_turns and turns_end)
                ]
                for held in hung:
                    del self._held[held.claim.scheduler_id]
                abandoned_after = ABANDONED_AFTER_LEASES * self.settings.lease_seconds
                stale = [claim for claim, at in self._pending.values() if now - at > abandoned_after]
                for claim in stale:
                    del self._pending[claim.scheduler_id]
                owns_nothing = not (self._held or self._pending or hung or stale or self._compare_rows)
            if owns_nothing:  # nothing to renew: no statement (and no holder row kept alive)
                self._renewed_at = self._clock()
                return
            self.write_changed_states()
            with self.store.control_session() as session:
                scheduler_leases.release_claims(session, [held.claim for held in hung], "failed")
                scheduler_leases.release_claims(session, stale, "stopped")
                self._renewals += 1
                holding = scheduler_leases.renew_holder(
                    session, self.owner, self.settings.lease_seconds, forget_gone=self._renewals % 100 == 1
                )
                with self._lock:
                    count, term_sum = self._expected()
                orphans: list[Claim] = []
                if holding.count != count or holding.term_sum != term_sum or self._compare_rows:
                    with self._lock:
                        expected = self._expected_claims()
                    owned = scheduler_leases.owned_terms(session, self.owner)
                    told += self._lost(expected, owned)
                    orphans = [Claim(sid, self.owner, term) for sid, term in owned.items() if sid not in expected]
                    self._compare_rows = False
                scheduler_leases.release_claims(session, orphans, "stopped")
            self._renewed_at = self._clock()
        for held in hung:
            log.warning("scheduler hung; its row is given up", scheduler=held.claim.scheduler_id)
            told.append((held, f"its turn ran longer than {self.hung_after_seconds:g} s (hung); row given up"))
        for held, reason in told:
            held.lessee.lease_lost(reason)
        self._tell_enabled(holding.disabled)

    def _expected(self) -> tuple[int, int]:
        """Under the lock: how many rows the database should say we own, and the sum of their terms."""
        count, term_sum = len(self._held), self._held.term_sum
        for scheduler_id, (claim, _) in self._pending.items():
            held = self._held.get(scheduler_id)  # a newer claim of a row whose older one is held
            if held is not None:
                count -= 1
                term_sum -= held.claim.term
            count += 1
            term_sum += claim.term
        return count, term_sum

    def _expected_claims(self) -> dict[str, Claim]:
        """Under the lock: the claims the database should have."""
        expected = {scheduler_id: held.claim for scheduler_id, held in self._held.items()}
        expected.update({scheduler_id: claim for scheduler_id, (claim, _) in self._pending.items()})
        return expected

    def _lost(self, expected: dict[str, Claim], owned: dict[str, int]) -> list[tuple[_Held, str]]:
        """Forget the claims the database no longer has under our owner and term; their lessees."""
        lost: list[tuple[_Held, str]] = []
        with self._lock:
            for sid, claim in expected.items():
                if owned.get(sid) == claim.term:
                    continue
                self._pending.pop(sid, None)
                held = self._held.get(sid)
                if held is not None and held.claim == claim:
                    del self._held[sid]
                    lost.append((held, "its row is held under another term now (taken over, or organisation deleted)"))
        return lost

    def _tell_enabled(self, disabled: frozenset[str]) -> None:
        """Tell the lessees whose queue was disabled or enabled since the last renewal."""
        with self._lock:
            changed = disabled ^ self._disabled
            self._disabled = disabled
            told = [(held.lessee, sid not in disabled) for sid in changed if (held := self._held.get(sid)) is not None]
        for lessee, enabled in told:
            lessee.set_enabled(enabled)

    def write_changed_states(self) -> None:
        """The new states of the schedulers whose state changed (a start, a stop), one statement per
        state; a row no longer ours is a lost claim."""
        with self._lock:
            changed = [self._held[sid] for sid in self._changed if sid in self._held]
            self._changed.clear()
            states = {held.claim.scheduler_id: held.state for held in changed if held.state is not None}
        if not changed:
            return
        with self.store.control_session() as session:
            renewed = scheduler_leases.renew_claims(
                session, [held.claim for held in changed], self.settings.lease_seconds, states
            )
        for held in changed:
            if held.claim.scheduler_id not in renewed:
                self._lose(held, "its row is held under another term now (taken over, or organisation deleted)")

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
            self._compare_rows = True  # the rows stay ours until released: the next renewal releases them
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
        with self._lock:
            holds_nothing = not self._held and not self._pending
        if holds_nothing:  # a process that gave everything up leaves no holder row behind
            try:
                with self.store.control_session() as session:
                    scheduler_leases.remove_holder(session, self.owner)
            except Exception:
                log.info("could not remove the lease holder's row; it expires", owner=self.owner)
