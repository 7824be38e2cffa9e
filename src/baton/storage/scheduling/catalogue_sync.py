"""KATalogus' plugin listing of one organisation, written into Baton's catalogue tables, and the reads
of that catalogue.

The definitions (`plugins`) are shared by every organisation, the `enabled` flags (`plugin_settings`) are
the organisation's own. A write touches only what changed, so the steady state (every organisation's
scheduler writing its listing each poll) writes nothing to the shared rows, and rows are written in id
order, so two organisations' writes of the same changed definitions wait for each other, never deadlock.
With KATalogus as the catalogue, a plugin is enabled for an organisation only by its own setting: one that
KATalogus does not list (Baton's built-in ones among them) is off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from baton.core.catalogue import ListedPlugin, newly_enabled
from baton.storage.engine import insert_for
from baton.storage.tables import Organisation, Plugin, PluginSetting


@dataclass(frozen=True)
class ListingChange:
    """What writing a listing changed for the organisation."""

    enabled: list[ListedPlugin]  # boefjes enabled now that were not (their objects need tasks)
    disabled: list[str]  # plugins that were enabled and are not now
    definitions: int  # plugin definitions added or changed


def apply_plugin_listing(
    session: Session, organisation: str, listing: Sequence[ListedPlugin], now: datetime
) -> ListingChange:
    """Write the organisation's listing: definitions that changed, its enabled flags, the time."""
    listing = sorted({plugin.id: plugin for plugin in listing}.values(), key=lambda plugin: plugin.id)
    changed = _write_definitions(session, listing)
    recorded = {
        plugin_id: enabled
        for plugin_id, enabled in session.execute(
            select(PluginSetting.plugin_id, PluginSetting.enabled).where(PluginSetting.organisation == organisation)
        )
    }
    wanted = {plugin.id: plugin.enabled for plugin in listing}
    for plugin_id in sorted(recorded.keys() - wanted.keys()):
        wanted[plugin_id] = False  # not listed (any more): off for this organisation
    new_rows = [
        {"organisation": organisation, "plugin_id": plugin_id, "enabled": enabled}
        for plugin_id, enabled in sorted(wanted.items())
        if plugin_id not in recorded
    ]
    if new_rows:
        session.execute(insert_for(session)(PluginSetting).values(new_rows).on_conflict_do_nothing())
    for enabled in (True, False):
        flipped = sorted(
            plugin_id
            for plugin_id, wanted_enabled in wanted.items()
            if wanted_enabled is enabled and recorded.get(plugin_id, not enabled) is not enabled
        )
        if flipped:
            session.execute(
                update(PluginSetting)
                .where(PluginSetting.organisation == organisation, PluginSetting.plugin_id.in_(flipped))
                .values(enabled=enabled)
            )
    session.execute(update(Organisation).where(Organisation.id == organisation).values(catalogue_synced_at=now))
    disabled = sorted(plugin_id for plugin_id, enabled in recorded.items() if enabled and not wanted[plugin_id])
    return ListingChange(newly_enabled(recorded, listing), disabled, changed)


def _write_definitions(session: Session, listing: Sequence[ListedPlugin]) -> int:
    if not listing:
        return 0
    ids = [plugin.id for plugin in listing]
    stored = {plugin.id: plugin for plugin in session.scalars(select(Plugin).where(Plugin.id.in_(ids)))}
    missing = [
        # A definition KATalogus brought is off by default: only an organisation's own setting enables it.
        {"id": plugin.id, "enabled": False, **plugin.definition()}
        for plugin in listing
        if plugin.id not in stored
    ]
    if missing:
        session.execute(insert_for(session)(Plugin).values(missing).on_conflict_do_nothing())
    changed = 0
    for plugin in listing:
        row = stored.get(plugin.id)
        if row is None:
            continue
        definition = plugin.definition()
        if any(getattr(row, column) != value for column, value in definition.items()):
            session.execute(update(Plugin).where(Plugin.id == plugin.id).values(**definition))
            changed += 1
    return changed + len(missing)


def catalogue_synced_at(session: Session, organisation: str) -> datetime | None:
    """When the organisation's listing was last written (None: never, or no such organisation)."""
    return session.scalar(select(Organisation.catalogue_synced_at).where(Organisation.id == organisation))


def plugins_enabled_by_setting(session: Session, organisation: str, plugin_type: str) -> list[Plugin]:
    """The organisation's plugins of a type that its own setting enables (KATalogus as the catalogue:
    a plugin without a setting for it is off), by id."""
    query = (
        select(Plugin)
        .join(PluginSetting, PluginSetting.plugin_id == Plugin.id)
        .where(PluginSetting.organisation == organisation, PluginSetting.enabled, Plugin.type == plugin_type)
        .order_by(Plugin.id)
    )
    return list(session.scalars(query))


def plugin_enabled_for(session: Session, organisation: str, plugin_id: str, *, by_setting_only: bool) -> Plugin | None:
    """The plugin if it is enabled for the organisation, else None: by its setting, or (`by_setting_only`
    False: Baton's own catalogue) by its default where the organisation has no setting for it."""
    plugin = session.get(Plugin, plugin_id)
    if plugin is None:
        return None
    setting = session.scalar(
        select(PluginSetting.enabled).where(
            PluginSetting.organisation == organisation, PluginSetting.plugin_id == plugin_id
        )
    )
    enabled = setting if setting is not None else (False if by_setting_only else plugin.enabled)
    return plugin if enabled else None
