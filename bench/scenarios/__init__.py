"""Benchmark scenarios: each module's `run(ctx)` builds its own state, measures, and returns data
(plain dicts: JSON-ready, no printing, no files). `bench.run` chooses and runs them; `bench.report`
turns what they return into docs/."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

# In the order `bench.run` runs them by default.
NAMES = (
    "hot_path",
    "push",
    "before_after",
    "startup",
    "batched",
    "ingest",
    "depth",
    "sqlite",
    "fairness",
    "organisations",
    "director",
    "retention",
    "profile",
    "replication",
    "workers",
    "leases",
    "estate",
    "capacity",
    "listings",
    "rescans",
    "mula_import",
    "soak",
)


def load(name: str) -> ModuleType:
    if name not in NAMES:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(NAMES)}")
    return import_module(f"bench.scenarios.{name}")
