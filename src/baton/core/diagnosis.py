"""Why a connection failed, in a few words (for one-line errors)."""

from __future__ import annotations

REASONS = (
    ("connection refused", "connection refused"),
    ("timeout", "timed out"),
    ("timed out", "timed out"),
    ("could not translate host name", "unknown host"),
    ("name or service not known", "unknown host"),
    ("password authentication failed", "password authentication failed"),
    ("no password supplied", "no password supplied"),
    ("unable to open database file", "unable to open the database file"),
    ("readonly database", "the database file is read-only"),
    ("disk i/o error", "disk I/O error"),
    ("access_refused", "access refused (user or password)"),
)


def reason(exc: BaseException) -> str:
    """The innermost, shortest description of why a connection failed."""
    text = str(getattr(exc, "orig", None) or exc) or repr(exc)
    lowered = text.lower()
    if "does not exist" in lowered:  # the line that says what (a statement's error goes on to quote it)
        line = next(line for line in text.strip().splitlines() if "does not exist" in line.lower())
        return line.removeprefix("FATAL:  ").strip()
    for needle, short in REASONS:
        if needle in lowered:
            return short
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:200]
