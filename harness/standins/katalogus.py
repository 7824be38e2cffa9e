"""A KATalogus stand-in: organisations, plugins enabled per organisation, boefje settings (for
deduplication), speaking KATalogus' wire format for every call Baton makes and the calls a test makes
to drive it (create and delete organisations, enable and disable plugins, a boefje's settings).

Source: nl-kat-coordination boefjes/boefjes/katalogus/ (root.py mounts the routers under /v1 and maps
NotFound to 404 {"message"}; organisations.py, plugins.py, configs.py, settings.py), the filters and pagination of
boefjes/boefjes/dependencies/plugins.py, the models of boefjes/boefjes/worker/models.py and the
settings comparison of boefjes/boefjes/sql/config_storage.py.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Body, HTTPException, Query, Response, status
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field

from harness.standins.common import Standin


class OrganisationIn(BaseModel):  # boefjes/worker/models.py Organisation
    id: str
    name: str
    deduplicate: bool = True


class BoefjeIn(BaseModel):  # boefjes/worker/models.py Boefje, as POST /plugins reads it
    type: Literal["boefje"]
    id: str
    name: str
    version: str | None = None
    scan_level: int = 1
    consumes: set[str] = Field(default_factory=set)
    produces: set[str] = Field(default_factory=set)
    cron: str | None = None
    interval: int | None = None
    run_on: list[Literal["create", "update"]] | None = None
    oci_image: str | None = None
    oci_arguments: list[str] = Field(default_factory=list)
    deduplicate: bool = True


class BoefjeUpdate(BaseModel):  # plugins.py BoefjeIn: every field optional, only those sent change
    name: str | None = None
    version: str | None = None
    scan_level: int = 1
    consumes: set[str] = Field(default_factory=set)
    produces: set[str] = Field(default_factory=set)
    cron: str | None = None
    interval: int | None = None
    run_on: list[Literal["create", "update"]] | None = None
    oci_image: str | None = None
    oci_arguments: list[str] = Field(default_factory=list)


def not_found(message: str) -> JSONResponse:  # root.py: entity_not_found_handler
    return JSONResponse({"message": message}, status_code=404)


class KatalogusStandin(Standin):
    """State a test drives directly (or through the HTTP calls KATalogus itself serves)."""

    def __init__(self, *, deduplicate: bool = True) -> None:
        super().__init__("KAT-alogus API stand-in")
        # KATalogus' BOEFJES_DEDUPLICATE: off by default in boefjes/config.py, on in OpenKAT's .env-defaults.
        self.deduplicate = deduplicate
        self.organisations: dict[str, dict[str, Any]] = {}
        self.plugins: dict[str, dict[str, Any]] = {}  # id -> the plugin at its default state
        self.configs: dict[tuple[str, str], dict[str, Any]] = {}  # (organisation, plugin) -> config row
        self._next_config_id = 1
        self._routes()

    # --- the state, as a test drives it ---

    def add_organisation(self, organisation_id: str, name: str | None = None, *, deduplicate: bool = True) -> None:
        with self.lock:
            self.organisations[organisation_id] = {
                "id": organisation_id,
                "name": name or organisation_id,
                "deduplicate": deduplicate,
            }

    def remove_organisation(self, organisation_id: str) -> None:
        with self.lock:
            self.organisations.pop(organisation_id, None)
            for key in [key for key in self.configs if key[0] == organisation_id]:
                del self.configs[key]

    def add_boefje(
        self,
        boefje_id: str,
        consumes: list[str],
        *,
        scan_level: int = 1,
        enabled: bool = False,
        version: str | None = None,
        oci_image: str | None = None,
        oci_arguments: list[str] | None = None,
        cron: str | None = None,
        interval: int | None = None,
        run_on: list[Literal["create", "update"]] | None = None,
        produces: list[str] | None = None,
        deduplicate: bool = True,
        static: bool = True,
        name: str | None = None,
    ) -> None:
        """A boefje, disabled for every organisation unless `enabled` (KATalogus' default for a boefje).
        `static`: one of KATalogus' own (worker/repository.py adds its "boefje/<id>" mime types), else one
        created through the API."""
        mime_types = [f"boefje/{boefje_id}"] + ([f"boefje/{boefje_id}-{version}"] if version else [])
        if not static:
            mime_types = []
        with self.lock:
            self.plugins[boefje_id] = {
                "id": boefje_id,
                "name": name or boefje_id.replace("-", " ").title(),
                "version": version,
                "created": None,
                "description": None,
                "enabled": enabled,
                "static": static,
                "type": "boefje",
                "scan_level": scan_level,
                "consumes": sorted(consumes),
                "produces": sorted([*(produces or []), *mime_types]),
                "boefje_schema": None,
                "cron": cron,
                "interval": interval,
                "run_on": run_on,
                "runnable_hash": None,
                "oci_image": oci_image,
                "oci_arguments": oci_arguments or [],
                "deduplicate": deduplicate,
            }

    def add_normalizer(self, normalizer_id: str, consumes: list[str], *, produces: list[str] | None = None) -> None:
        """A normalizer, enabled by default; it consumes `normalizer/<id>` too (worker/repository.py)."""
        with self.lock:
            self.plugins[normalizer_id] = {
                "id": normalizer_id,
                "name": normalizer_id,
                "version": None,
                "created": None,
                "description": None,
                "enabled": True,
                "static": True,
                "type": "normalizer",
                "consumes": [*consumes, f"normalizer/{normalizer_id}"],
                "produces": produces or [],
            }

    def set_enabled(self, organisation_id: str, plugin_id: str, enabled: bool) -> None:
        with self.lock:
            self._config(organisation_id, plugin_id)["enabled"] = enabled

    def set_settings(self, organisation_id: str, boefje_id: str, settings: dict[str, Any]) -> None:
        with self.lock:
            self._config(organisation_id, boefje_id)["settings"] = dict(settings)

    def update_boefje(self, boefje_id: str, **fields: Any) -> None:
        """Change a boefje for every organisation (its version, image, cron, ...)."""
        with self.lock:
            self.plugins[boefje_id].update(fields)

    def plugins_of(self, organisation_id: str) -> list[dict[str, Any]]:
        """dependencies/plugins.py get_all: the default state, overridden by the organisation's own."""
        with self.lock:
            plugins = []
            for plugin in self.plugins.values():
                config = self.configs.get((organisation_id, plugin["id"]))
                plugins.append(plugin if config is None else {**plugin, "enabled": config["enabled"]})
            return plugins

    def _config(self, organisation_id: str, plugin_id: str) -> dict[str, Any]:
        key = (organisation_id, plugin_id)
        if key not in self.configs:
            default = self.plugins[plugin_id]["enabled"]
            self.configs[key] = {"id": self._next_config_id, "enabled": default, "settings": {}}
            self._next_config_id += 1
        return self.configs[key]

    def _config_out(self, key: tuple[str, str]) -> dict[str, Any]:  # config_storage.py _to_boefje_config
        row = self.configs[key]
        return {
            "id": row["id"],
            "settings": row["settings"],
            "enabled": row["enabled"],
            "boefje_id": key[1],
            "organisation_id": key[0],
            "duplicates": [],
        }

    # --- the API ---

    def _routes(self) -> None:
        app = self.app

        @app.get("/health")
        def health() -> dict[str, Any]:  # root.py
            return {"service": "katalogus", "healthy": True, "version": "stand-in", "additional": None, "results": []}

        @app.get("/v1/organisations")
        def list_organisations() -> dict[str, Any]:  # organisations.py: a dict keyed by id
            with self.lock:
                return dict(self.organisations)

        @app.get("/v1/organisations/{organisation_id}")
        def get_organisation(organisation_id: str) -> Any:
            with self.lock:
                if organisation_id not in self.organisations:  # the store raises OrganisationNotFound first
                    return not_found(f"Organisation with id '{organisation_id}' not found")
                return self.organisations[organisation_id]

        # Trailing slash as KATalogus declares it: POST /v1/organisations answers 405.
        @app.post("/v1/organisations/", status_code=status.HTTP_201_CREATED)
        def add_organisation(organisation: OrganisationIn) -> Any:
            with self.lock:
                if organisation.id in self.organisations:  # session.py: UniqueViolation -> 400
                    message = (
                        'duplicate key value violates unique constraint "organisation_id"\n'
                        f"DETAIL:  Key (id)=({organisation.id}) already exists.\n"
                    )
                    return JSONResponse({"message": message}, status_code=400)
                self.add_organisation(organisation.id, organisation.name, deduplicate=organisation.deduplicate)
            return None

        @app.delete("/v1/organisations/{organisation_id}")
        def remove_organisation(organisation_id: str) -> Any:
            with self.lock:
                if organisation_id not in self.organisations:
                    return not_found(f"Organisation with id '{organisation_id}' not found")
                self.remove_organisation(organisation_id)
            return None

        @app.get("/v1/organisations/{organisation_id}/plugins")
        def list_plugins(
            organisation_id: str,
            q: str | None = None,
            ids: list[str] | None = Query(None),
            plugin_type: Literal["boefje", "normalizer", "bit"] | None = None,
            state: bool | None = None,
            oci_image: str | None = None,
            consumes: set[str] | None = Query(None),
            produces: set[str] | None = Query(None),
            offset: int = 0,
            limit: int | None = None,
        ) -> Any:
            plugins = self.plugins_of(organisation_id)  # an unknown organisation: every plugin, default state
            if ids:
                by_id = {plugin["id"]: plugin for plugin in plugins}
                if any(plugin_id not in by_id for plugin_id in ids):
                    raise HTTPException(status.HTTP_404_NOT_FOUND, "Plugin not found")
                plugins = [by_id[plugin_id] for plugin_id in ids]
            if q is not None:
                plugins = [p for p in plugins if any(q in (p[field] or "") for field in ("id", "name", "description"))]
            if plugin_type is not None:
                plugins = [p for p in plugins if p["type"] == plugin_type]
            if state is not None:
                plugins = [p for p in plugins if p["enabled"] is state]
            if oci_image is not None:
                plugins = [p for p in plugins if p["type"] == "boefje" and p["oci_image"] == oci_image]
            if consumes is not None:
                plugins = [p for p in plugins if consumes.intersection(p["consumes"])]
            if produces is not None:
                plugins = [p for p in plugins if produces.intersection(p["produces"])]
            return plugins[offset:] if limit is None else plugins[offset : offset + limit]

        @app.get("/v1/organisations/{organisation_id}/plugins/{plugin_id}")
        def get_plugin(organisation_id: str, plugin_id: str) -> Any:
            for plugin in self.plugins_of(organisation_id):
                if plugin["id"] == plugin_id:
                    return plugin
            raise HTTPException(status.HTTP_404_NOT_FOUND, "Plugin not found")

        @app.post("/v1/organisations/{organisation_id}/plugins", status_code=201)
        def add_plugin(organisation_id: str, plugin: BoefjeIn) -> Any:  # only boefjes, here
            with self.lock:
                if plugin.id in self.plugins:
                    detail = "Duplicate plugin: a plugin with this plugin_id already exists"
                    raise HTTPException(status.HTTP_400_BAD_REQUEST, detail)
                fields = plugin.model_dump(exclude={"type", "id", "consumes", "produces"})
                self.add_boefje(
                    plugin.id, sorted(plugin.consumes), produces=sorted(plugin.produces), static=False, **fields
                )
            return None

        @app.patch("/v1/organisations/{organisation_id}/boefjes/{boefje_id}", status_code=204, response_model=None)
        def update_boefje(organisation_id: str, boefje_id: str, boefje: BoefjeUpdate) -> Any:
            with self.lock:
                if boefje_id not in self.plugins or self.plugins[boefje_id]["type"] != "boefje":
                    return not_found(f"Plugin with id '{boefje_id}' not found")
                if self.plugins[boefje_id]["static"]:
                    raise HTTPException(status.HTTP_403_FORBIDDEN, "Updating a static plugin is not allowed")
                changes = boefje.model_dump(exclude_unset=True)
                for field in ("consumes", "produces"):
                    if field in changes:
                        changes[field] = sorted(changes[field])
                self.update_boefje(boefje_id, **changes)
            return Response(status_code=204)

        @app.patch("/v1/organisations/{organisation_id}/plugins/{plugin_id}", status_code=204, response_model=None)
        def update_plugin_state(organisation_id: str, plugin_id: str, enabled: bool = Body(False, embed=True)) -> Any:
            with self.lock:
                if plugin_id not in self.plugins:  # plugins.py set_enabled_by_id re-raises a KeyError: 500
                    return PlainTextResponse("Internal Server Error", status_code=500)
                if organisation_id not in self.organisations:  # config_storage.py upsert
                    return not_found(f"Organisation with id '{organisation_id}' not found")
                self.set_enabled(organisation_id, plugin_id, enabled)
            return Response(status_code=204)

        settings_path = "/v1/organisations/{organisation_id}/{plugin_id}/settings"  # settings.py (no schemas here)

        @app.get(settings_path)
        def get_settings(organisation_id: str, plugin_id: str) -> Any:
            with self.lock:
                return dict(self.configs.get((organisation_id, plugin_id), {}).get("settings", {}))

        @app.put(settings_path)
        def put_settings(organisation_id: str, plugin_id: str, values: dict[str, Any]) -> Any:
            with self.lock:
                if self.plugins.get(plugin_id, {}).get("type") != "boefje":  # a KeyError, or a normalizer's config
                    return PlainTextResponse("Internal Server Error", status_code=500)
                if organisation_id not in self.organisations:  # config_storage.py upsert
                    return not_found(f"Organisation with id '{organisation_id}' not found")
                self.set_settings(organisation_id, plugin_id, values)
            return None

        @app.delete(settings_path)
        def delete_settings(organisation_id: str, plugin_id: str) -> Any:
            with self.lock:  # config_storage.py delete: the whole config goes, its enabled flag too
                if self.configs.pop((organisation_id, plugin_id), None) is None:
                    return not_found(f"Setting not found for organisation '{organisation_id}' and plugin '{plugin_id}'")
            return None

        @app.get("/v1/configs")
        def list_configs(
            organisation_id: str | None = None,
            boefje_id: str | None = None,
            enabled: bool | None = None,
            with_duplicates: bool = False,
            offset: int = 0,
            limit: int | None = None,
        ) -> Any:
            with self.lock:
                keys = [
                    key
                    for key, row in self.configs.items()
                    if self.plugins[key[1]]["type"] == "boefje"
                    and (organisation_id is None or key[0] == organisation_id)
                    and (boefje_id is None or key[1] == boefje_id)
                    and (enabled is None or row["enabled"] is enabled)
                ]
                keys = keys[offset:] if limit is None else keys[offset : offset + limit]
                if not (self.deduplicate and with_duplicates and organisation_id and boefje_id):
                    return [self._config_out(key) for key in keys]
                if not keys:
                    return []
                config = self._config_out(keys[0])
                row = self.configs[keys[0]]
                config["duplicates"] = [
                    self._config_out(key)
                    for key, other in self.configs.items()
                    if key[1] == boefje_id
                    and other["id"] != row["id"]
                    and other["enabled"] is row["enabled"]
                    and self.organisations.get(key[0], {}).get("deduplicate", False)
                    and self.plugins[boefje_id]["deduplicate"]
                    and other["settings"] == row["settings"]
                ]
                return [config]
