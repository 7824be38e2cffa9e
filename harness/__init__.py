"""Helpers for Baton's tests and benchmarks: stand-ins for OpenKAT's services, throw-away servers,
API replicas as real processes, factories for organisations and tasks, polling, chaos and lease
faults, the write audit. They live beside tests/, outside the installed package, and are imported
from the repository root (pytest's `pythonpath`, `python -m bench...` from the root). Baton itself
never imports them (import-linter)."""
