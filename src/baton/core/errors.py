"""Baton's exceptions: one root, so callers can tell Baton's refusals from bugs.

Every error Baton raises on purpose derives from `BatonError`. The HTTP layer maps each class to a
status in one table (`baton.api.errors.STATUS`); the command line prints any of them as one line;
an event handler dead-letters an `UnprocessableError` and lets anything else (a bug) crash loudly.
"""

from __future__ import annotations


class BatonError(Exception):
    """Root of every error Baton raises on purpose."""


class NotFoundError(BatonError):
    """An organisation, queue, task, plugin or schedule that does not exist."""


class ConflictError(BatonError):
    """A create that collides with an existing row, or a change the current state forbids."""


class InvalidTransitionError(ConflictError):
    def __init__(self, current: str, requested: str) -> None:
        super().__init__(f"task status cannot change from '{current}' to '{requested}'")
        self.current = current
        self.requested = requested


class TaskIdTakenError(ConflictError):
    """A push chose a task id another task has."""


class QueueDisabledError(ConflictError):
    """The queue's scheduler is disabled: it accepts no pushes."""


class DuplicateTaskError(ConflictError):
    """A queued task with the same hash exists and the caller asked not to replace it (OpenKAT's rule)."""


class QueueFullError(BatonError):
    """The queue holds `maxsize` queued tasks already."""


class InvalidInputError(BatonError, ValueError):
    """Input a schema could not describe is wrong; the message names the field.

    Also a ValueError, so pydantic validators can raise it and it becomes a 422 like any other.
    """


class ContradictoryInputError(BatonError):
    """Parts of one request that contradict each other (a body naming another queue than its path)."""


class FilterError(InvalidInputError):
    """A pop or listing filter that cannot be used; the message names where and what is accepted."""


class PayloadTooLargeError(BatonError):
    """A task's `data` larger than the configured limit."""


class UnprocessableError(BatonError):
    """An event that is well-formed but cannot be turned into tasks (it is dead-lettered)."""


class FencedError(BatonError):
    """A write refused because the writer's lease or term is no longer current: it must stop."""


class DatabaseUnavailableError(BatonError):
    """The database cannot be reached, or a connection broke mid-statement: retry later (503).

    Storage raises it for every driver error that means "not now" (connection refused or lost, no
    pooled connection free in time, SQLite's lock held too long), so no layer above storage needs
    to know the driver's own exceptions. `reason`: why, in a few words (for logs)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class ConfigurationError(BatonError):
    """A setting or the environment stops a command; the message says which and how to fix it."""


class OutsideServiceError(BatonError):
    """An outside service (OpenKAT's KATalogus, Octopoes or Bytes) did not answer, or answered what
    Baton cannot use, after the retries; `service` names it and `reason` says why in a few words."""

    def __init__(self, service: str, reason: str) -> None:
        super().__init__(f"{service}: {reason}")
        self.service = service
        self.reason = reason
