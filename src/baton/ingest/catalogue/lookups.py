"""What a planner asks of the plugin catalogue: the enabled boefjes for an object, the enabled
normalizers for a raw file's mime types, one plugin, every enabled boefje.

`DatabaseCatalogue` is Baton's own catalogue: the `plugins` and `plugin_settings` tables (a plugin's
default, overridden per organisation). `KatalogusCatalogue` answers from the same tables as KATalogus'
listings wrote them (planners/catalogue_sync.py): a plugin runs for an organisation only when that
organisation's listing enabled it. `BatchCatalogue` keeps one batch's answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from baton.core.catalogue import may_scan
from baton.storage.engine import Session
from baton.storage.scheduling.catalogue_sync import plugin_enabled_for, plugins_enabled_by_setting
from baton.storage.scheduling.plugins import enabled_plugins
from baton.storage.tables import Plugin


class PluginCatalogue(Protocol):
    def boefjes_for(self, session: Session, organisation: str, object_type: str, scan_level: int) -> list[Plugin]:
        """Enabled boefjes that consume `object_type` and may scan an object at `scan_level`."""
        ...

    def normalizers_for(self, session: Session, organisation: str, mime_types: Sequence[str]) -> list[Plugin]:
        """Enabled normalizers that consume any of `mime_types`."""
        ...

    def enabled_plugin(self, session: Session, organisation: str, plugin_id: str) -> Plugin | None:
        """The plugin if it is enabled for the organisation (None: unknown or disabled)."""
        ...

    def enabled_boefjes(self, session: Session, organisation: str) -> list[Plugin]:
        """Every boefje enabled for the organisation (the rescans check a page of schedules against it)."""
        ...


class DatabaseCatalogue:
    def boefjes_for(self, session: Session, organisation: str, object_type: str, scan_level: int) -> list[Plugin]:
        return [
            plugin
            for plugin in enabled_plugins(session, organisation, "boefje")
            if may_scan(plugin.consumes, plugin.scan_level, object_type, scan_level)
        ]

    def normalizers_for(self, session: Session, organisation: str, mime_types: Sequence[str]) -> list[Plugin]:
        wanted = set(mime_types)
        return [
            plugin for plugin in enabled_plugins(session, organisation, "normalizer") if wanted & set(plugin.consumes)
        ]

    def enabled_plugin(self, session: Session, organisation: str, plugin_id: str) -> Plugin | None:
        return plugin_enabled_for(session, organisation, plugin_id, by_setting_only=False)

    def enabled_boefjes(self, session: Session, organisation: str) -> list[Plugin]:
        return enabled_plugins(session, organisation, "boefje")


class BatchCatalogue:
    """A catalogue's answers kept for one batch of events: each distinct question is asked once.

    Made afresh per batch (in its transaction), so a plugin enabled or disabled counts from the next
    batch on, as it did from the next event."""

    def __init__(self, catalogue: PluginCatalogue) -> None:
        self.catalogue = catalogue
        self._boefjes: dict[tuple[str, str, int], list[Plugin]] = {}
        self._normalizers: dict[tuple[str, tuple[str, ...]], list[Plugin]] = {}

    def boefjes_for(self, session: Session, organisation: str, object_type: str, scan_level: int) -> list[Plugin]:
        key = (organisation, object_type, scan_level)
        if key not in self._boefjes:
            self._boefjes[key] = self.catalogue.boefjes_for(session, organisation, object_type, scan_level)
        return self._boefjes[key]

    def normalizers_for(self, session: Session, organisation: str, mime_types: Sequence[str]) -> list[Plugin]:
        key = (organisation, tuple(mime_types))
        if key not in self._normalizers:
            self._normalizers[key] = self.catalogue.normalizers_for(session, organisation, mime_types)
        return self._normalizers[key]

    def enabled_plugin(self, session: Session, organisation: str, plugin_id: str) -> Plugin | None:
        return self.catalogue.enabled_plugin(session, organisation, plugin_id)

    def enabled_boefjes(self, session: Session, organisation: str) -> list[Plugin]:
        return self.catalogue.enabled_boefjes(session, organisation)


class KatalogusCatalogue:
    """The catalogue as KATalogus said it last: a plugin runs for an organisation only when the
    organisation's own listing enabled it."""

    def boefjes_for(self, session: Session, organisation: str, object_type: str, scan_level: int) -> list[Plugin]:
        return [
            plugin
            for plugin in plugins_enabled_by_setting(session, organisation, "boefje")
            if may_scan(plugin.consumes, plugin.scan_level, object_type, scan_level)
        ]

    def normalizers_for(self, session: Session, organisation: str, mime_types: Sequence[str]) -> list[Plugin]:
        wanted = set(mime_types)
        return [
            plugin
            for plugin in plugins_enabled_by_setting(session, organisation, "normalizer")
            if wanted & set(plugin.consumes)
        ]

    def enabled_plugin(self, session: Session, organisation: str, plugin_id: str) -> Plugin | None:
        return plugin_enabled_for(session, organisation, plugin_id, by_setting_only=True)

    def enabled_boefjes(self, session: Session, organisation: str) -> list[Plugin]:
        return plugins_enabled_by_setting(session, organisation, "boefje")
