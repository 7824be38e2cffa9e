"""The driver's exceptions, as Baton's own: the one place that knows SQLAlchemy's and psycopg's errors.

Storage wraps every unit of work in `translated()`, so the layers above catch `BatonError`s only:
- connection refused or lost, a pool that could not hand out a connection in time, SQLite's lock
  held past its timeout: `DatabaseUnavailableError` (the API answers 503, a scheduler backs off);
- a unique key hit where the statement did not expect one is mapped where the statement runs (it
  alone knows which key it was: a task id, a twin's hash, an organisation's id);
- anything else (a bug, a statement the database refuses) is left as it is: a server fault.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from baton.core.diagnosis import reason
from baton.core.errors import DatabaseUnavailableError

UNAVAILABLE = "database unavailable; retry later"
CONNECTION_LOST = "database connection lost; retry later"


def unavailable(exc: BaseException) -> DatabaseUnavailableError | None:
    """The Baton error a driver error means, or None when it is not an outage."""
    if isinstance(exc, DatabaseUnavailableError):
        return exc
    if isinstance(exc, OperationalError | PoolTimeoutError | psycopg.OperationalError):
        return DatabaseUnavailableError(UNAVAILABLE, reason(exc))
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return DatabaseUnavailableError(CONNECTION_LOST, reason(exc))
    return None


@contextmanager
def translated() -> Iterator[None]:
    """Raise an outage as `DatabaseUnavailableError` (chained to the driver's error)."""
    try:
        yield
    except DatabaseUnavailableError:
        raise
    except (DBAPIError, PoolTimeoutError, psycopg.Error) as exc:
        error = unavailable(exc)
        if error is None:
            raise
        raise error from exc
