"""Shared request plumbing: the services and settings of the running app.

These dependencies are `async def` on purpose: FastAPI runs a plain `def` dependency in its thread
pool, and a thread hop per dependency per request is a large share of a pop's cost.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from baton.core.settings import Settings
from baton.service.app_services import AppServices
from baton.service.metrics import Metrics
from baton.service.queues import QueueService


async def get_services(request: Request) -> AppServices:
    services: AppServices = request.app.state.app_services
    return services


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


async def get_queues(request: Request) -> QueueService:
    queues: QueueService = request.app.state.queues
    return queues


AppServicesDep = Annotated[AppServices, Depends(get_services)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
QueuesDep = Annotated[QueueService, Depends(get_queues)]

Responses = dict[int | str, dict[str, Any]]
