"""The plugin catalogue: which boefjes and normalizers exist, what they consume, where enabled.

Schedulers ask a `PluginCatalogue`; `DatabaseCatalogue` answers from the `plugins` and
`plugin_settings` tables (a plugin's default, overridden per organisation). With KATalogus configured,
`KatalogusCatalogue` (katalogus.py) answers from the same tables, filled from KATalogus' listings.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from baton.core.catalogue import may_scan
from baton.core.errors import ConfigurationError
from baton.ingest.events import ScanLevel
from baton.storage.catalogue_sync import plugin_enabled_for
from baton.storage.engine import Session
from baton.storage.plugins import enabled_plugins, seed_plugins
from baton.storage.tables import Plugin

BUILTIN_CATALOGUE = Path(__file__).parent / "plugins.yml"
PluginId = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class PluginSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", from_attributes=True)

    id: str = PluginId
    type: Literal["boefje", "normalizer"]
    name: str = Field(min_length=1, max_length=256)
    consumes: list[str] = Field(min_length=1, max_length=64, description="Object types or mime types.")
    scan_level: ScanLevel = Field(0, description="Boefjes: lowest object scan level they may scan.")
    enabled: StrictBool = Field(True, description="Default for organisations without their own setting.")
    version: str | None = Field(None, max_length=64, description="Plugin version (OpenKAT's runners show it).")
    oci_image: str | None = Field(None, max_length=512, description="Boefjes: the container image that runs it.")


class CatalogueFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    plugins: list[PluginSpec]


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


def load_catalogue_file(path: Path) -> list[PluginSpec]:
    import yaml  # only the processes that seed the catalogue read it (not a scheduler)

    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"BATON_PLUGINS_FILE: cannot read the plugin catalogue {path}: {exc}") from exc
    try:
        return CatalogueFile.model_validate(raw).plugins
    except ValidationError as exc:
        raise ConfigurationError(f"BATON_PLUGINS_FILE: {path} is not a plugin catalogue: {exc}") from exc


def seed_catalogue(session: Session, path: str | None) -> int:
    """Seed from `path` (BATON_PLUGINS_FILE) or the built-in catalogue."""
    specs = load_catalogue_file(Path(path) if path else BUILTIN_CATALOGUE)
    return seed_plugins(session, [spec.model_dump() for spec in specs])
