"""Baton: a task scheduler for security-scanning platforms."""

__version__ = "0.1.0"
