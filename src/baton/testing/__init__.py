"""Helpers for Baton's tests and benchmarks: throw-away servers, API replicas as real processes,
factories for organisations and tasks, polling. Not used by Baton itself (CI forbids it)."""
