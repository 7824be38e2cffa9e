"""Logging: one format for every line (Baton's own, uvicorn's, alembic's, pika's), to stderr.

Console text by default, JSON lines with BATON_LOG_JSON=true. Baton's own lines go straight through
structlog to stderr (one per request on the hot path: it has to be cheap); the standard-library
loggers of the libraries go through structlog's formatter with the same renderer, so a JSON log
stays parseable line by line. Chatty libraries (alembic's migration banner, kubernetes, urllib3)
log at WARNING and above only; those that log every failed reconnect (pika, the connection pools)
only with debug.
"""

from __future__ import annotations

import logging
import sys

# structlog imports rich (with pygments: ~5 MiB resident) for a traceback formatter Baton never uses (it
# renders plain tracebacks, below). A None in sys.modules makes that `import rich` fail as if rich were
# not installed; it is removed again at once, so typer still finds rich for its help.
_hide_rich = "rich" not in sys.modules
if _hide_rich:
    sys.modules["rich"] = None  # type: ignore[assignment]
try:
    import structlog
finally:
    if _hide_rich:
        del sys.modules["rich"]

QUIET_LIBRARIES = ("alembic", "kubernetes", "urllib3", "asyncio", "httpx", "httpcore")
# pika logs each step of a failed connection as an ERROR (seven lines and a traceback per attempt);
# Baton logs every broker failure itself, once, with the reason. pika speaks again with debug.
# The connection pools log each failed reconnect (psycopg's) and each connection that could not be
# reset after the server went away (SQLAlchemy's, with a traceback): Baton logs a database outage
# itself, once when it begins and once when it ends (core/outages.py). They speak again with debug.
SILENCED_UNLESS_DEBUG = ("pika", "psycopg.pool", "sqlalchemy.pool")
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def _level(level: str) -> int:
    numeric = logging.getLevelName(level.upper())
    return numeric if isinstance(numeric, int) else logging.INFO


def add_component(logger: object, method: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """A library's line names its logger as Baton's lines name their component."""
    record = event.get("_record")
    if record is not None:
        event.setdefault("component", record.name)
    return event


def configure_logging(level: str = "info", json: bool = False) -> None:
    numeric = _level(level)
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor
    if json:
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.dict_tracebacks)
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback, sort_keys=False, pad_event_to=0
        )
    structlog.configure(
        processors=[*shared, renderer],
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, add_component],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, numeric))
    for name in SILENCED_UNLESS_DEBUG:
        logging.getLogger(name).setLevel(numeric if numeric <= logging.DEBUG else logging.CRITICAL)
    for name in UVICORN_LOGGERS:  # uvicorn installs its own handlers unless told not to: use ours
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    # Bound lazily: loggers made at import time still use the configuration made later.
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(component=name)
    return logger
