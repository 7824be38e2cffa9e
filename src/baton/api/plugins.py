"""The plugin catalogue and per-organisation enablement."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, status
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from sqlalchemy import select

from baton.api.deps import Responses, StoreDep
from baton.models import Plugin
from baton.plugins import PluginSpec, enabled_plugins, get_plugin, set_enabled_for_organisation
from baton.schemas import ErrorOut, ScanLevel
from baton.store import ConflictError, get_organisation

router = APIRouter(tags=["plugins"])
UNKNOWN: Responses = {404: {"model": ErrorOut, "description": "Unknown plugin or organisation"}}


class PluginPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=256)
    consumes: list[str] | None = Field(None, min_length=1, max_length=64)
    scan_level: ScanLevel | None = None
    enabled: StrictBool | None = None


class OrganisationPlugin(PluginSpec):
    enabled_here: bool = Field(description="Whether the plugin is enabled for this organisation.")


class EnabledPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool


@router.get("/plugins")
def list_plugins(store: StoreDep, type: Literal["boefje", "normalizer"] | None = None) -> list[PluginSpec]:
    with store.session() as session:
        query = select(Plugin).order_by(Plugin.id)
        if type is not None:
            query = query.where(Plugin.type == type)
        return [PluginSpec.model_validate(plugin) for plugin in session.scalars(query)]


@router.post(
    "/plugins",
    status_code=status.HTTP_201_CREATED,
    responses={409: {"model": ErrorOut, "description": "The plugin exists already"}},
)
def create_plugin(body: PluginSpec, store: StoreDep) -> PluginSpec:
    with store.session() as session:
        if session.get(Plugin, body.id) is not None:
            raise ConflictError(f"plugin '{body.id}' already exists")
        session.add(Plugin(**body.model_dump()))
    return body


@router.get("/plugins/{plugin_id}", responses=UNKNOWN)
def read_plugin(plugin_id: str, store: StoreDep) -> PluginSpec:
    with store.session() as session:
        return PluginSpec.model_validate(get_plugin(session, plugin_id))


@router.patch("/plugins/{plugin_id}", responses=UNKNOWN)
def patch_plugin(plugin_id: str, body: PluginPatch, store: StoreDep) -> PluginSpec:
    with store.session() as session:
        plugin = get_plugin(session, plugin_id)
        for key, value in body.model_dump(exclude_unset=True).items():
            if value is not None:
                setattr(plugin, key, value)
        session.flush()
        return PluginSpec.model_validate(plugin)


@router.get("/organisations/{org_id}/plugins", responses=UNKNOWN)
def organisation_plugins(org_id: str, store: StoreDep) -> list[OrganisationPlugin]:
    with store.session() as session:
        get_organisation(session, org_id)
        enabled = {plugin.id for kind in ("boefje", "normalizer") for plugin in enabled_plugins(session, org_id, kind)}
        plugins = session.scalars(select(Plugin).order_by(Plugin.id)).all()
        return [
            OrganisationPlugin(**PluginSpec.model_validate(plugin).model_dump(), enabled_here=plugin.id in enabled)
            for plugin in plugins
        ]


@router.put("/organisations/{org_id}/plugins/{plugin_id}", responses=UNKNOWN)
def set_organisation_plugin(org_id: str, plugin_id: str, body: EnabledPatch, store: StoreDep) -> EnabledPatch:
    """Enable or disable a plugin for one organisation (overrides the catalogue default)."""
    with store.session() as session:
        set_enabled_for_organisation(session, org_id, plugin_id, body.enabled)
    return body
