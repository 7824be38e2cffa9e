"""The driver's exceptions, as Baton's own: the one place that knows SQLAlchemy's and psycopg's errors.

Storage wraps every unit of work in `translated()`, so the layers above catch `BatonError`s only:
- connection refused or lost, a pool that could not hand out a connection in time, SQLite's lock
  held past its timeout: `DatabaseUnavailableError` (the API answers 503, a scheduler backs off);
- a unique key hit where the statement did not expect one is mapped where the statement runs (it
  alone knows which key it was: a task id, a twin's hash, an organisation's id);
- anything else (a bug, a statement the database refuses) is left as it is: a server fault.

Every unit of work also tells the process's `DATABASE` tracker (core/outages.py) how it went, so an
outage is logged once when it begins and once when it ends, whoever met it; the components that
meet one only back off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from baton.core.diagnosis import reason
from baton.core.errors import DatabaseUnavailableError
from baton.core.outages import OutageTracker

UNAVAILABLE = "database unavailable; retry later"
CONNECTION_LOST = "database connection lost; retry later"

# This process's view of the database: fed by every `translated()` unit of work.
DATABASE = OutageTracker("database")


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
    """Raise an outage as `DatabaseUnavailableError` (chained to the driver's error), and tell
    `DATABASE` whether the database answered."""
    seen = DATABASE.mark
    try:
        yield
    except DatabaseUnavailableError as exc:
        DATABASE.failed(seen, exc.reason)
        raise
    except (DBAPIError, PoolTimeoutError, psycopg.Error) as exc:
        error = unavailable(exc)
        if error is None:
            raise
        DATABASE.failed(seen, error.reason)
        raise error from exc
    DATABASE.succeeded(seen)
