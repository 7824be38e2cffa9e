"""Shared request plumbing: the store, settings and metrics of the running app.

These dependencies are `async def` on purpose: FastAPI runs a plain `def` dependency in its thread
pool, and a thread hop per dependency per request is a large share of a pop's cost.

Endpoints open their transaction with `with store.session()` themselves, so it commits before the
response leaves: a client never sees a popped task whose pop was not committed.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError

from baton.config import Settings
from baton.metrics import Metrics
from baton.store import Store


async def get_store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


Responses = dict[int | str, dict[str, Any]]


def invalid(location: tuple[str, ...], message: str, kind: str = "value_error") -> RequestValidationError:
    """A 422 in FastAPI's own validation-error shape, so every 422 reads (and documents) alike."""
    return RequestValidationError([{"loc": location, "msg": message, "type": kind}])
