"""The plugin catalogue's tables: plugins and per-organisation enablement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import CursorResult, and_, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from baton.core.errors import ConflictError, NotFoundError
from baton.storage.control.organisations import get_organisation
from baton.storage.engine import insert_for
from baton.storage.tables import Plugin, PluginSetting


def enabled_plugins(session: Session, organisation: str, plugin_type: str) -> list[Plugin]:
    plugins = session.scalars(select(Plugin).where(Plugin.type == plugin_type).order_by(Plugin.id)).all()
    rows = session.execute(
        select(PluginSetting.plugin_id, PluginSetting.enabled).where(PluginSetting.organisation == organisation)
    )
    overrides = {plugin_id: enabled for plugin_id, enabled in rows}
    return [plugin for plugin in plugins if overrides.get(plugin.id, plugin.enabled)]


def seed_plugins(session: Session, plugins: Sequence[Mapping[str, Any]]) -> int:
    """Add catalogue entries whose id is unknown; existing ones (maybe edited via the API) stay, except
    that one without an `oci_image` or `version` gets the one given (a catalogue that gained images
    reaches installations seeded before). How many rows were added or completed.

    An upsert: several replicas starting at once all seed, and none may fail on it; a row that has
    what the catalogue gives is not written."""
    if not plugins:
        return 0
    insert = insert_for(session)(Plugin).values(list(plugins))
    missing = or_(
        and_(Plugin.oci_image.is_(None), insert.excluded.oci_image.is_not(None)),
        and_(Plugin.version.is_(None), insert.excluded.version.is_not(None)),
    )
    stmt = insert.on_conflict_do_update(
        index_elements=[Plugin.id],
        set_={
            "oci_image": func.coalesce(Plugin.oci_image, insert.excluded.oci_image),
            "version": func.coalesce(Plugin.version, insert.excluded.version),
        },
        where=missing,
    )
    result: CursorResult[Any] = session.execute(stmt)  # type: ignore[assignment]
    return int(result.rowcount or 0)


def list_plugins(session: Session, plugin_type: str | None = None) -> Sequence[Plugin]:
    query = select(Plugin).order_by(Plugin.id)
    if plugin_type is not None:
        query = query.where(Plugin.type == plugin_type)
    return session.scalars(query).all()


def create_plugin(session: Session, values: Mapping[str, Any]) -> Plugin:
    if session.get(Plugin, values["id"]) is not None:
        raise ConflictError(f"plugin '{values['id']}' already exists")
    plugin = Plugin(**values)
    session.add(plugin)
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent create of the same id won the race
        raise ConflictError(f"plugin '{values['id']}' already exists") from exc
    return plugin


def get_plugin(session: Session, plugin_id: str) -> Plugin:
    plugin = session.get(Plugin, plugin_id)
    if plugin is None:
        raise NotFoundError(f"plugin '{plugin_id}' not found")
    return plugin


def update_plugin(session: Session, plugin_id: str, changes: Mapping[str, Any]) -> Plugin:
    plugin = get_plugin(session, plugin_id)
    for key, value in changes.items():
        setattr(plugin, key, value)
    session.flush()
    return plugin


def set_enabled_for_organisation(session: Session, organisation: str, plugin_id: str, enabled: bool) -> None:
    get_organisation(session, organisation)
    get_plugin(session, plugin_id)
    setting = session.get(PluginSetting, (organisation, plugin_id))
    if setting is None:
        session.add(PluginSetting(organisation=organisation, plugin_id=plugin_id, enabled=enabled))
    else:
        setting.enabled = enabled
