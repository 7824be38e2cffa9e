"""Leader election: only one director reconciles at a time, and only for a bounded time without
renewing.

`DatabaseLeaseLeader` holds a lease row in the database (storage/control/leadership.py): renewed every retry
period, taken over by a conditional UPDATE once expired, every takeover a new term. The holder
stops acting when it could not renew within the renew deadline, which comes before the lease ends,
so in normal operation two terms never overlap; when they do (a frozen process resumes), fencing
refuses the old term's writes. kubernetes.py adds a `coordination.k8s.io` Lease elector with the
same interface.

On PostgreSQL the leader also holds a session advisory lock on a connection of its own
(`LivenessLock`, storage/control/leadership.py), as a fast liveness signal only: the server frees it the
moment the holder's connection dies (SIGKILL, node lost, connection terminated), so a standby that
gets the lock takes the lease over at once instead of waiting for it to expire, provided the lease
row says its holder had the lock (a leader that took over from a frozen one may not have it yet). A
frozen holder keeps its connection, hence the lock, and then the lease's expiry decides. Safety
never rests on the lock: every takeover is a new term, and fencing refuses whatever the previous
term still tries to write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from baton.core.errors import DatabaseUnavailableError
from baton.core.leases import past_renew_deadline
from baton.core.logging import get_logger
from baton.core.settings import LeaseSettings
from baton.storage.control.leadership import (
    DIRECTOR_ROLE,
    LIVENESS_LOCK_KEY,
    LivenessLock,
    release_leadership,
    renew_leadership,
    try_acquire_leadership,
)
from baton.storage.engine import Store

log = get_logger("baton.leader")


class LeaderElector(Protocol):
    #: True when the elector's own state is the `leaders` row (nothing for the director to report)
    recorded_in_database: bool

    @property
    def term(self) -> int | None:
        """The term this process leads in (grows with every takeover); None while not leading."""
        ...

    def acquire_or_renew(self) -> bool:
        """Try to be (or stay) leader; True while this process leads."""
        ...

    def release(self) -> None:
        """Step down (on shutdown) so a standby takes over without waiting."""


class DatabaseLeaseLeader:
    recorded_in_database = True

    def __init__(
        self,
        store: Store,
        holder: str,
        settings: LeaseSettings,
        role: str = DIRECTOR_ROLE,
        clock: Callable[[], float] = time.monotonic,
        liveness_key: int = LIVENESS_LOCK_KEY,
    ) -> None:
        self.store = store
        self.holder = holder
        self.settings = settings
        self.role = role
        self._clock = clock
        self._term: int | None = None
        self._renewed_at = 0.0
        self._liveness = LivenessLock(store, liveness_key)  # a key per role: each role's holder has its own

    @property
    def term(self) -> int | None:
        return self._term

    def acquire_or_renew(self) -> bool:
        if self._term is None:
            return self._acquire()
        return self._renew(self._term)

    # -- the lease ---------------------------------------------------------------------------------

    def _acquire(self) -> bool:
        started = self._clock()
        holds_lock = self._liveness.hold()
        try:
            with self.store.control_session() as session:
                term = try_acquire_leadership(session, self.role, self.holder, self.settings.lease_seconds, holds_lock)
        except DatabaseUnavailableError:
            self._liveness.drop()
            return False
        if term is None:
            self._liveness.drop()
            return False
        self._term, self._renewed_at = term, started
        log.info("became leader", role=self.role, term=term, holder=self.holder)
        return True

    def _renew(self, term: int) -> bool:
        started = self._clock()
        # Every renewal says whether we hold the liveness lock now (and takes it when it is free:
        # a leader that took over from a frozen one gets it once that one lets go), so that a
        # standby takes over at once when our connection dies, not only in our first round.
        holds_lock = self._liveness.hold()
        try:
            with self.store.control_session() as session:
                renewed = renew_leadership(
                    session, self.role, self.holder, term, self.settings.lease_seconds, holds_lock
                )
        except DatabaseUnavailableError:  # logged once, as an outage (storage/errors.py)
            if not past_renew_deadline(started, self._renewed_at, self.settings.renew_deadline_seconds):
                return True
            log.info("leadership not renewed within the renew deadline; stepping down", term=term, cause="database")
            self._term = None
            self._liveness.drop()
            return False
        if not renewed:
            log.warning("leadership taken over by another director", term=term)
            self._term = None
            self._liveness.drop()
            return False
        if past_renew_deadline(started, self._renewed_at, self.settings.renew_deadline_seconds):
            # Renewed, but after the deadline (we were frozen?): our schedulers were told to stop,
            # so begin a new term rather than carry on in this one.
            log.warning("leadership renewed too late; stepping down", term=term)
            self.release()
            return False
        self._renewed_at = started
        return True

    def release(self) -> None:
        term, self._term = self._term, None
        self._liveness.drop()
        if term is None:
            return
        try:
            with self.store.control_session() as session:
                release_leadership(session, self.role, self.holder, term)
        except DatabaseUnavailableError:
            pass  # the lease simply expires


class SingleProcessLeader:
    """Leads always, without a term: for tests and tools that run one director by construction."""

    term: int | None = None
    recorded_in_database = False

    def acquire_or_renew(self) -> bool:
        return True

    def release(self) -> None:
        return None
