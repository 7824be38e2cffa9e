"""Baton's exceptions: one root, so callers can tell Baton's refusals from bugs."""

from __future__ import annotations


class BatonError(Exception):
    """Root of every error Baton raises on purpose."""


class ConfigurationError(BatonError):
    """A setting or the environment stops a command; the message says which and how to fix it."""
