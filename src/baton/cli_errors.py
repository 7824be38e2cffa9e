"""What the command line prints when it cannot go on: one line naming the setting and the fix.

`explain` turns the exceptions that a wrong setting or an unreachable service raise into such a
line; anything it does not recognise is a bug and keeps its type and message (and, with --debug or
BATON_DEBUG=1, its traceback).
"""

from __future__ import annotations

import errno
from typing import Any

from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from baton.errors import ConfigurationError

SETTINGS_PREFIX = "BATON_"


def _reason(exc: BaseException) -> str:
    """The innermost, shortest description of why a connection failed."""
    text = str(getattr(exc, "orig", None) or exc) or repr(exc)
    lowered = text.lower()
    for needle, reason in (
        ("connection refused", "connection refused"),
        ("timeout", "timed out"),
        ("timed out", "timed out"),
        ("could not translate host name", "unknown host"),
        ("name or service not known", "unknown host"),
        ("password authentication failed", "password authentication failed"),
        ("no password supplied", "no password supplied"),
        ("does not exist", text.strip().splitlines()[-1].removeprefix("FATAL:  ").strip()),
        ("unable to open database file", "unable to open the database file"),
        ("readonly database", "the database file is read-only"),
        ("disk i/o error", "disk I/O error"),
    ):
        if needle in lowered:
            return reason
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:200]


def describe_database(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        return "the database"
    if parsed.get_backend_name() == "sqlite":
        return f"SQLite at {parsed.database or ':memory:'}"
    return f"PostgreSQL at {parsed.host or 'localhost'}:{parsed.port or 5432}"


def database_error(exc: DBAPIError | OSError, url: str) -> ConfigurationError:
    target = describe_database(url)
    verb = "open" if target.startswith("SQLite") else "reach"
    hint = "check BATON_DATABASE_URL"
    if target.startswith("SQLite"):
        hint += " and that its directory exists and is writable"
    return ConfigurationError(f"cannot {verb} {target} ({_reason(exc)}); {hint}")


def settings_error(exc: ValidationError) -> ConfigurationError:
    problems = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error.get("loc", ()))
        variable = SETTINGS_PREFIX + field.upper()
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        given = error.get("input")
        shown = f" (got {given!r})" if isinstance(given, str | int | float | bool) else ""
        problems.append(f"{variable}: {message}{shown}")
    return ConfigurationError("; ".join(problems))


def explain(exc: BaseException, database_url: str | None = None, amqp_url: str | None = None) -> str:
    """One line for the user: what went wrong and which setting fixes it."""
    if isinstance(exc, ConfigurationError):
        return str(exc)
    if isinstance(exc, ValidationError):  # settings errors arrive as ConfigurationError already
        return "; ".join(
            f"{'.'.join(str(part) for part in error.get('loc', ()))}: {error.get('msg', 'invalid')}"
            + (f" (got {error['input']!r})" if isinstance(error.get("input"), str | int | float) else "")
            for error in exc.errors(include_url=False)
        )
    if isinstance(exc, DBAPIError) and database_url is not None:
        return str(database_error(exc, database_url))
    if isinstance(exc, NoSuchModuleError | ArgumentError):
        return f"BATON_DATABASE_URL: {exc}; use sqlite:///path/baton.db or postgresql://user@host:port/db"
    if isinstance(exc, PermissionError | FileNotFoundError | NotADirectoryError) and database_url is not None:
        return str(database_error(exc, database_url))
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return f"cannot listen: {exc.strerror}; choose another BATON_PORT or stop what uses it"
    return f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"


def amqp_error(exc: BaseException, url: str) -> ConfigurationError:
    try:
        import pika

        params: Any = pika.URLParameters(url)
        where = f"{params.host}:{params.port}"
    except Exception:
        where = "the configured address"
    reason = _reason(exc)
    return ConfigurationError(f"cannot reach RabbitMQ at {where} ({reason}); check BATON_AMQP_URL")
