"""The plugin catalogue and per-organisation enablement (service/plugins.py's port)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from baton.core.catalogue import PLUGIN_TYPES
from baton.core.views import PluginView
from baton.storage.control.organisations import get_organisation
from baton.storage.engine import Store
from baton.storage.ports.rows import view_of
from baton.storage.scheduling import plugins as rows


class PluginRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    def listed(self, plugin_type: str | None = None) -> list[PluginView]:
        with self.store.session() as session:
            return [view_of(PluginView, row) for row in rows.list_plugins(session, plugin_type)]

    def create(self, values: Mapping[str, Any]) -> PluginView:
        with self.store.session() as session:
            return view_of(PluginView, rows.create_plugin(session, values))

    def get(self, plugin_id: str) -> PluginView:
        with self.store.session() as session:
            return view_of(PluginView, rows.get_plugin(session, plugin_id))

    def update(self, plugin_id: str, changes: Mapping[str, Any]) -> PluginView:
        with self.store.session() as session:
            return view_of(PluginView, rows.update_plugin(session, plugin_id, changes))

    def of_organisation(self, org_id: str) -> list[tuple[PluginView, bool]]:
        """Every plugin, and whether it is enabled for the organisation (NotFoundError: no such one)."""
        with self.store.session() as session:
            get_organisation(session, org_id)
            enabled = {plugin.id for kind in PLUGIN_TYPES for plugin in rows.enabled_plugins(session, org_id, kind)}
            return [(view_of(PluginView, plugin), plugin.id in enabled) for plugin in rows.list_plugins(session)]

    def set_enabled_for_organisation(self, org_id: str, plugin_id: str, enabled: bool) -> None:
        with self.store.session() as session:
            rows.set_enabled_for_organisation(session, org_id, plugin_id, enabled)
