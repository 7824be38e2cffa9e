"""Leader election: only one director reconciles at a time.

`AdvisoryLockLeader` holds a PostgreSQL session-level advisory lock on a dedicated connection: it is
released by the server the moment the holder's connection dies (process killed, network gone), so a
standby takes over on its next attempt. `FileLockLeader` does the same for a SQLite file with an
exclusive file lock, so two directors (or `baton serve` and `baton director`) on one file never both
lead. k8s.py adds a `coordination.k8s.io` Lease elector with the same interface.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Protocol, TextIO

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from baton.core.logging import get_logger
from baton.storage.engine import Store

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


class FileLockLeader:
    """SQLite: an exclusive `flock` on a file beside the database. The kernel releases it when the
    holder's process dies, so a waiting director (or `baton serve`) takes over on its next round."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: TextIO | None = None
        self._said_waiting = False

    def acquire_or_renew(self) -> bool:
        if self._handle is not None:
            return True
        handle = open(self.path, "a+")  # noqa: SIM115 - held open for as long as we lead
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            if not self._said_waiting:
                log.warning(
                    "another director leads on this SQLite database; waiting as a follower", lock=str(self.path)
                )
                self._said_waiting = True
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle
        self._said_waiting = False
        log.info("became leader", lock=str(self.path))
        return True

    def release(self) -> None:
        if self._handle is None:
            return
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None


def default_elector(store: Store) -> LeaderElector:
    if store.is_postgresql:
        return AdvisoryLockLeader(store)
    database = store.engine.url.database
    if not database or database == ":memory:":
        return SingleProcessLeader()  # an in-memory database is private to this process anyway
    return FileLockLeader(Path(database).expanduser().resolve().with_name(Path(database).name + ".leader"))
