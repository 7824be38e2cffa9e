"""KATalogus: organisations, the plugins enabled per organisation, and boefje settings shared between
organisations (for deduplication).

Paths and parameters as boefjes/boefjes/katalogus/{organisations,plugins,configs}.py serve them and
mula/scheduler/clients/http/external/katalogus.py calls them, less two of mula's bugs: it calls
`/boefjes` without `/v1` (404 on KATalogus) and `/v1/configs` with `limit=0` (always `[]`).
A listing KATalogus answers with 404 is a failure here, never "none": only a wrong URL gives one, and
"no organisations" would stop every scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import TypeAdapter

from baton.openkat.http import ServiceClient
from baton.openkat.models import BoefjeConfig, Organisation, Plugin

ORGANISATIONS = TypeAdapter(dict[str, Organisation])
ORGANISATION = TypeAdapter(Organisation)
PLUGINS = TypeAdapter(list[Plugin])
PLUGIN = TypeAdapter(Plugin)
CONFIGS = TypeAdapter(list[BoefjeConfig])
PluginType = Literal["boefje", "normalizer"]


class KatalogusClient:
    def __init__(self, http: ServiceClient) -> None:
        self.http = http

    def organisations(self) -> dict[str, Organisation]:
        """Every organisation, keyed by id (KATalogus answers a dict, not a list)."""
        return self.http.fetch("GET", "/v1/organisations", ORGANISATIONS)

    def organisation(self, organisation_id: str) -> Organisation | None:
        return self.http.fetch_or_none("GET", f"/v1/organisations/{organisation_id}", ORGANISATION)

    def plugins(
        self,
        organisation_id: str,
        *,
        plugin_type: PluginType | None = None,
        consumes: Iterable[str] | None = None,
        enabled: bool | None = None,
        page_size: int | None = None,
    ) -> list[Plugin]:
        """The organisation's plugins with its own `enabled` flags, in one call (KATalogus builds the whole
        list for every request; `page_size` splits the answer, not the work). KATalogus answers an unknown
        organisation with every plugin at its default state."""
        params: dict[str, Any] = {}
        if plugin_type is not None:
            params["plugin_type"] = plugin_type
        if consumes is not None:
            params["consumes"] = sorted(consumes)
        if enabled is not None:
            params["state"] = enabled
        path = f"/v1/organisations/{organisation_id}/plugins"
        if page_size is None:
            return self.http.fetch("GET", path, PLUGINS, params=params)
        plugins: list[Plugin] = []
        while True:
            page = self.http.fetch("GET", path, PLUGINS, params={**params, "offset": len(plugins), "limit": page_size})
            plugins.extend(page)
            if len(page) < page_size:
                return plugins

    def plugin(self, organisation_id: str, plugin_id: str) -> Plugin | None:
        return self.http.fetch_or_none("GET", f"/v1/organisations/{organisation_id}/plugins/{plugin_id}", PLUGIN)

    def boefje_configs(
        self, organisation_id: str, boefje_id: str, *, enabled: bool | None = True, with_duplicates: bool = True
    ) -> list[BoefjeConfig]:
        """The organisation's settings of the boefje (at most one), each with `duplicates`: the other
        organisations whose settings of it are identical. KATalogus fills `duplicates` only when it runs
        with BOEFJES_DEDUPLICATE on (OpenKAT's .env-defaults turn it on)."""
        params: dict[str, Any] = {
            "organisation_id": organisation_id,
            "boefje_id": boefje_id,
            "with_duplicates": with_duplicates,
        }
        if enabled is not None:
            params["enabled"] = enabled
        return self.http.fetch("GET", "/v1/configs", CONFIGS, params=params)
