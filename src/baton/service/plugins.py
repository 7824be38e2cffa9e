"""The plugin catalogue and per-organisation enablement, as the API edits and shows them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from baton.core.views import PluginView


class PluginRecords(Protocol):
    """The stored catalogue (storage/ports/plugins.py)."""

    def listed(self, plugin_type: str | None = None) -> list[PluginView]: ...

    def create(self, values: Mapping[str, Any]) -> PluginView: ...

    def get(self, plugin_id: str) -> PluginView: ...

    def update(self, plugin_id: str, changes: Mapping[str, Any]) -> PluginView: ...

    def of_organisation(self, org_id: str) -> list[tuple[PluginView, bool]]: ...

    def set_enabled_for_organisation(self, org_id: str, plugin_id: str, enabled: bool) -> None: ...


class Plugins:
    def __init__(self, records: PluginRecords) -> None:
        self.records = records

    def listed(self, plugin_type: str | None = None) -> list[PluginView]:
        return self.records.listed(plugin_type)

    def create(self, values: Mapping[str, Any]) -> PluginView:
        """A new catalogue entry; ConflictError when its id is taken."""
        return self.records.create(values)

    def get(self, plugin_id: str) -> PluginView:
        return self.records.get(plugin_id)

    def update(self, plugin_id: str, changes: Mapping[str, Any]) -> PluginView:
        """Change the fields given; a null leaves its field as it is."""
        return self.records.update(plugin_id, {key: value for key, value in changes.items() if value is not None})

    def of_organisation(self, org_id: str) -> list[tuple[PluginView, bool]]:
        """Every plugin of the catalogue, and whether it is enabled for the organisation (its own
        setting, else the catalogue's default)."""
        return self.records.of_organisation(org_id)

    def set_enabled_for_organisation(self, org_id: str, plugin_id: str, enabled: bool) -> None:
        """Enable or disable a plugin for one organisation (overrides the catalogue default)."""
        self.records.set_enabled_for_organisation(org_id, plugin_id, enabled)
