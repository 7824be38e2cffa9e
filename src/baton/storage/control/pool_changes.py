"""Wake-ups between workers: a worker that joins, leaves or gives schedulers up tells its peers,
who run their next round at once instead of at its time (LISTEN/NOTIFY; PostgreSQL only)."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from baton.storage.engine import on_postgresql
from baton.storage.urls import DatabaseAddress

if TYPE_CHECKING:
    import psycopg

WORKERS_CHANNEL = "baton_workers"


def announce_pool_change(session: Session) -> None:
    """Tell every worker, at commit, that the pool changed (a worker joined or left, schedulers were
    given up): they run their next round now instead of at its time. PostgreSQL only."""
    if on_postgresql(session):
        session.execute(select(func.pg_notify(WORKERS_CHANNEL, "")))


class PoolChanges:
    """Waits for `announce_pool_change` from any worker (LISTEN on its own connection), or for a
    timeout. On SQLite, and while that connection cannot be made, it is a plain wait."""

    def __init__(self, address: DatabaseAddress, stop: threading.Event) -> None:
        self._dsn = address.conninfo  # the store's: every connection through one connection string
        self._postgresql = address.backend == "postgresql"
        self._stop = stop
        self._conn: psycopg.Connection[Any] | None = None

    def wait(self, seconds: float) -> None:
        conn = self._listening()
        if conn is None:
            self._stop.wait(seconds)
            return
        import psycopg

        try:
            for _ in conn.notifies(timeout=seconds, stop_after=1):
                pass
        except psycopg.Error:
            self.close()  # listen again next time; this round waited less, which is harmless

    def _listening(self) -> psycopg.Connection[Any] | None:
        if not self._postgresql:
            return None
        import psycopg  # only where PostgreSQL is used

        if self._conn is None:
            try:
                self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
                self._conn.execute(f"LISTEN {WORKERS_CHANNEL}")
            except psycopg.Error:
                self.close()
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                conn.close()
