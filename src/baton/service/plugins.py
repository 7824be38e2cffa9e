"""The plugin catalogue and per-organisation enablement, as the API edits and shows them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from baton.storage.control.organisations import get_organisation
from baton.storage.engine import Store
from baton.storage.scheduling import plugins as rows
from baton.storage.tables import Plugin as Plugin

__all__ = ["Plugin"]
PLUGIN_TYPES = ("boefje", "normalizer")


def list_plugins(store: Store, plugin_type: str | None = None) -> Sequence[Plugin]:
    with store.session() as session:
        return rows.list_plugins(session, plugin_type)


def create_plugin(store: Store, values: Mapping[str, Any]) -> Plugin:
    """A new catalogue entry; ConflictError when its id is taken."""
    with store.session() as session:
        return rows.create_plugin(session, values)


def get_plugin(store: Store, plugin_id: str) -> Plugin:
    with store.session() as session:
        return rows.get_plugin(session, plugin_id)


def update_plugin(store: Store, plugin_id: str, changes: Mapping[str, Any]) -> Plugin:
    """Change the fields given; a null leaves its field as it is."""
    with store.session() as session:
        given = {key: value for key, value in changes.items() if value is not None}
        return rows.update_plugin(session, plugin_id, given)


def organisation_plugins(store: Store, org_id: str) -> list[tuple[Plugin, bool]]:
    """Every plugin of the catalogue, and whether it is enabled for the organisation (its own
    setting, else the catalogue's default)."""
    with store.session() as session:
        get_organisation(session, org_id)
        enabled = {plugin.id for kind in PLUGIN_TYPES for plugin in rows.enabled_plugins(session, org_id, kind)}
        return [(plugin, plugin.id in enabled) for plugin in rows.list_plugins(session)]


def set_enabled_for_organisation(store: Store, org_id: str, plugin_id: str, enabled: bool) -> None:
    """Enable or disable a plugin for one organisation (overrides the catalogue default)."""
    with store.session() as session:
        rows.set_enabled_for_organisation(session, org_id, plugin_id, enabled)
