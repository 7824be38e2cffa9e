"""The plugin catalogue and per-organisation enablement."""

from __future__ import annotations

from typing import Literal

from fastapi import status
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from baton.api import routing, security
from baton.api.deps import AppServicesDep, Responses
from baton.api.schemas import ErrorOut
from baton.core.catalogue import PluginSpec
from baton.core.events import ScanLevel

router = routing.router(tags=["plugins"])
UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown plugin or organisation"}}


class PluginPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=256)
    consumes: list[str] | None = Field(None, min_length=1, max_length=64)
    scan_level: ScanLevel | None = None
    enabled: StrictBool | None = None
    version: str | None = Field(None, max_length=64)
    oci_image: str | None = Field(None, max_length=512)


class OrganisationPlugin(PluginSpec):
    enabled_here: bool = Field(description="Whether the plugin is enabled for this organisation.")


class EnabledPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool


@router.get("/plugins", dependencies=[security.READ])
def list_plugins(services: AppServicesDep, type: Literal["boefje", "normalizer"] | None = None) -> list[PluginSpec]:
    return [PluginSpec.model_validate(plugin) for plugin in services.plugins.listed(type)]


@router.post(
    "/plugins",
    status_code=status.HTTP_201_CREATED,
    responses={409: {"model": ErrorOut, "description": "The plugin exists already"}},
    dependencies=[security.ADMIN],
)
def create_plugin(body: PluginSpec, services: AppServicesDep) -> PluginSpec:
    return PluginSpec.model_validate(services.plugins.create(body.model_dump()))


@router.get("/plugins/{plugin_id}", responses=UNKNOWN, dependencies=[security.READ])
def read_plugin(plugin_id: str, services: AppServicesDep) -> PluginSpec:
    return PluginSpec.model_validate(services.plugins.get(plugin_id))


@router.patch("/plugins/{plugin_id}", responses=UNKNOWN, dependencies=[security.ADMIN])
def patch_plugin(plugin_id: str, body: PluginPatch, services: AppServicesDep) -> PluginSpec:
    return PluginSpec.model_validate(services.plugins.update(plugin_id, body.model_dump(exclude_unset=True)))


@router.get("/organisations/{org_id}/plugins", responses=UNKNOWN, dependencies=[security.READ])
def organisation_plugins(org_id: str, services: AppServicesDep) -> list[OrganisationPlugin]:
    return [
        OrganisationPlugin(**PluginSpec.model_validate(plugin).model_dump(), enabled_here=enabled)
        for plugin, enabled in services.plugins.of_organisation(org_id)
    ]


@router.put("/organisations/{org_id}/plugins/{plugin_id}", responses=UNKNOWN, dependencies=[security.ADMIN])
def set_organisation_plugin(org_id: str, plugin_id: str, body: EnabledPatch, services: AppServicesDep) -> EnabledPatch:
    """Enable or disable a plugin for one organisation (overrides the catalogue default)."""
    services.plugins.set_enabled_for_organisation(org_id, plugin_id, body.enabled)
    return body
