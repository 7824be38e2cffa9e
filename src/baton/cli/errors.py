"""What the command line prints when it cannot go on: one line naming the setting and the fix.

Errors raised on purpose (`BatonError`: a setting, an unreachable service, an unknown organisation)
print their own message; a settings validation error names the BATON_* variable; anything else is a
bug and keeps its type and message (and, with --debug or BATON_DEBUG=1, its traceback).
"""

from __future__ import annotations

import errno

from pydantic import ValidationError

from baton.core.errors import BatonError, ConfigurationError
from baton.core.settings import GROUP_PREFIXES


def settings_error(exc: ValidationError) -> ConfigurationError:
    prefix = GROUP_PREFIXES.get(exc.title, "BATON_")
    problems = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error.get("loc", ()))
        variable = prefix + field.upper() if field else exc.title
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        given = error.get("input")
        shown = f" (got {given!r})" if isinstance(given, str | int | float | bool) else ""
        problems.append(f"{variable}: {message}{shown}")
    return ConfigurationError("; ".join(problems))


def explain(exc: BaseException) -> str:
    """One line for the user: what went wrong and which setting fixes it."""
    if isinstance(exc, BatonError):
        return str(exc)
    if isinstance(exc, ValidationError):  # input given on the command line
        return "; ".join(
            f"{'.'.join(str(part) for part in error.get('loc', ()))}: {error.get('msg', 'invalid')}"
            + (f" (got {error['input']!r})" if isinstance(error.get("input"), str | int | float) else "")
            for error in exc.errors(include_url=False)
        )
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return f"cannot listen: {exc.strerror}; choose another BATON_PORT or stop what uses it"
    return f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"
