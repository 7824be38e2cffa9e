"""The HTTP server `baton serve` runs its ASGI app on, chosen by BATON_HTTP_SERVER: uvicorn (the default)
or granian. The one module that names either; each is imported only when chosen.

Both run with Baton's logging (no access log: Baton logs one line per request itself; the server's own
lines through the standard-library loggers, so in Baton's format at BATON_LOG_LEVEL), the ASGI lifespan
(the app's start-up and shutdown), and a graceful stop on SIGTERM or SIGINT, after which the call returns.

uvicorn serves one process's app in this process; granian always serves from child processes (its workers,
BATON_WORKERS of them), each building its app from the import target as uvicorn's workers do.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from typing import Any

from baton.core.settings import Settings

# Where a worker process finds its app: a factory, called once in each worker (`runtime.worker_app`).
WORKER_APP = "baton.runtime:worker_app"
# granian's loggers (its Rust core logs as `_granian`); they propagate to Baton's handler on the root logger.
GRANIAN_LOGGERS = ("_granian", "granian.access")
# How granian's Rust core words an operating system's error (its RuntimeError's first line), e.g. a port
# in use: "Address already in use (os error 98)".
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
# granian's default listen backlog, and with it the requests one worker serves at once beside waiting pops.
GRANIAN_BACKLOG = 1024


def serves_in_process(settings: Settings) -> bool:
    """Whether the server runs the app in this process (`run_app`), rather than in worker processes that
    each build their own (`run_workers`)."""
    return settings.http_server == "uvicorn" and settings.workers == 1


def run_app(settings: Settings, app: Any) -> None:
    """Serve `app` in this process until SIGTERM or SIGINT (uvicorn; see `serves_in_process`)."""
    import uvicorn

    uvicorn.run(app, **uvicorn_options(settings))


def run_workers(settings: Settings) -> None:
    """Serve BATON_WORKERS processes, each with the app of `WORKER_APP`, until SIGTERM or SIGINT."""
    if settings.http_server == "granian":
        run_granian(settings)
        return
    import uvicorn

    uvicorn.run(WORKER_APP, factory=True, workers=settings.workers, **uvicorn_options(settings))


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    return {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level.lower(),
        "log_config": None,  # our handlers (core/logging.py): one format for every line
        "access_log": False,  # Baton logs one structured line per request itself
    }


def run_granian(settings: Settings) -> None:
    from granian.constants import Interfaces
    from granian.log import LogLevels
    from granian.server import Server
    from setproctitle import getproctitle

    # granian starts its workers with multiprocessing's default method, on Linux a fork of this process,
    # whose director threads and database pool a child must not inherit; a fresh interpreter each, as
    # uvicorn's workers are.
    multiprocessing.set_start_method("spawn", force=True)
    level = settings.log_level.lower()
    server = Server(
        WORKER_APP,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,  # with the lifespan protocol
        factory=True,
        workers=settings.workers,
        backlog=GRANIAN_BACKLOG,
        # Requests one worker runs at once (beyond them a connection waits): a waiting pop holds one
        # until its task or its end, so room for every waiter BATON_POP_MAX_WAITERS allows and the rest.
        backpressure=settings.pop_max_waiters + GRANIAN_BACKLOG,
        websockets=False,
        log_level=LogLevels(level) if level in LogLevels.__members__ else LogLevels.info,
        log_dictconfig=granian_logging(),
        log_access=False,  # Baton logs one structured line per request itself
        process_name=getproctitle(),  # `ps` keeps showing `baton serve ...`; workers add ` worker-N`
    )
    try:
        server.serve()
    except RuntimeError as exc:
        error = as_os_error(exc)
        if error is exc:
            raise
        raise error from exc


def as_os_error(exc: RuntimeError) -> Exception:
    """granian's RuntimeError for an operating system's error (binding the port) as Python's OSError,
    which the command line explains in one line as it does uvicorn's (without the Rust backtrace that
    RUST_BACKTRACE adds to the message); any other error as it is."""
    found = RUST_OS_ERROR.search(str(exc).partition("\n")[0])
    if found is None:
        return exc
    number = int(found.group(1))
    return OSError(number, os.strerror(number))


def granian_logging() -> dict[str, Any]:
    """granian's logging configuration (`logging.config.dictConfig`, applied in the parent and in each
    worker before its app is built): its loggers without handlers of their own, so their lines reach the
    root logger, whose handler Baton configures (core/logging.py)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {},
        "handlers": {},
        "loggers": {name: {"handlers": [], "propagate": True} for name in GRANIAN_LOGGERS},
    }
