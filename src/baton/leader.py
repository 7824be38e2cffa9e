"""Leader election: only one director reconciles at a time.

`AdvisoryLockLeader` holds a PostgreSQL session-level advisory lock on a dedicated connection: it is
released by the server the moment the holder's connection dies (process killed, network gone), so a
standby takes over on its next attempt. `SingleProcessLeader` is for SQLite, where one process owns
the database file anyway. k8s.py adds a `coordination.k8s.io` Lease elector with the same interface.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from baton.logs import get_logger
from baton.store import Store

log = get_logger("baton.leader")
DIRECTOR_LOCK_KEY = 0x0BA7_0002


class LeaderElector(Protocol):
    def acquire_or_renew(self) -> bool:
        """Try to be (or stay) leader; True while this process leads."""
        ...

    def release(self) -> None:
        """Step down (on shutdown) so a standby takes over without waiting."""


class SingleProcessLeader:
    def acquire_or_renew(self) -> bool:
        return True

    def release(self) -> None:
        return None


class AdvisoryLockLeader:
    def __init__(self, store: Store, key: int = DIRECTOR_LOCK_KEY) -> None:
        self.store = store
        self.key = key
        self._conn: Connection | None = None

    def acquire_or_renew(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                self._conn.commit()  # never sit "idle in transaction" while leading
                return True
            except DBAPIError:
                log.warning("lost the database connection holding the leader lock")
                self._drop_connection()
                return False
        try:
            conn = self.store.engine.connect()
        except DBAPIError:
            return False
        try:
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar())
            conn.commit()
        except DBAPIError:
            conn.close()
            return False
        if not got:
            conn.close()
            return False
        self._conn = conn
        log.info("became leader")
        return True

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.invalidate()
                self._conn.close()
            except DBAPIError:
                pass
            self._conn = None

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
            self._conn.commit()
        except DBAPIError:
            pass
        self._drop_connection()


def default_elector(store: Store) -> LeaderElector:
    return AdvisoryLockLeader(store) if store.dialect == "postgresql" else SingleProcessLeader()
