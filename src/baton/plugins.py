"""The plugin catalogue: which boefjes and normalizers exist, what they consume, where enabled.

Schedulers ask a `PluginCatalogue`; `DatabaseCatalogue` answers from the `plugins` and
`plugin_settings` tables. An HTTP client for an external catalogue service would implement the
same two methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError
from sqlalchemy import CursorResult, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from baton.models import Plugin, PluginSetting
from baton.schemas import ScanLevel
from baton.store import NotFoundError, get_organisation

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


def enabled_plugins(session: Session, organisation: str, plugin_type: str) -> list[Plugin]:
    plugins = session.scalars(select(Plugin).where(Plugin.type == plugin_type).order_by(Plugin.id)).all()
    rows = session.execute(
        select(PluginSetting.plugin_id, PluginSetting.enabled).where(PluginSetting.organisation == organisation)
    )
    overrides = {plugin_id: enabled for plugin_id, enabled in rows}
    return [plugin for plugin in plugins if overrides.get(plugin.id, plugin.enabled)]


class DatabaseCatalogue:
    def boefjes_for(self, session: Session, organisation: str, object_type: str, scan_level: int) -> list[Plugin]:
        return [
            plugin
            for plugin in enabled_plugins(session, organisation, "boefje")
            if object_type in plugin.consumes and plugin.scan_level <= scan_level
        ]

    def normalizers_for(self, session: Session, organisation: str, mime_types: Sequence[str]) -> list[Plugin]:
        wanted = set(mime_types)
        return [
            plugin for plugin in enabled_plugins(session, organisation, "normalizer") if wanted & set(plugin.consumes)
        ]


def load_catalogue_file(path: Path) -> list[PluginSpec]:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"plugin catalogue {path}: {exc}") from exc
    try:
        return CatalogueFile.model_validate(raw).plugins
    except ValidationError as exc:
        raise ValueError(f"plugin catalogue {path}: {exc}") from exc


def seed_plugins(session: Session, specs: Sequence[PluginSpec]) -> int:
    """Add catalogue entries whose id is unknown; existing ones (maybe edited via the API) stay.

    `ON CONFLICT DO NOTHING`: several replicas starting at once all seed, and none may fail on it.
    """
    if not specs:
        return 0
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    stmt = (
        insert(Plugin).values([spec.model_dump() for spec in specs]).on_conflict_do_nothing(index_elements=[Plugin.id])
    )
    result: CursorResult[Any] = session.execute(stmt)  # type: ignore[assignment]
    return int(result.rowcount or 0)


def get_plugin(session: Session, plugin_id: str) -> Plugin:
    plugin = session.get(Plugin, plugin_id)
    if plugin is None:
        raise NotFoundError(f"plugin '{plugin_id}' not found")
    return plugin


def set_enabled_for_organisation(session: Session, organisation: str, plugin_id: str, enabled: bool) -> None:
    get_organisation(session, organisation)
    get_plugin(session, plugin_id)
    setting = session.get(PluginSetting, (organisation, plugin_id))
    if setting is None:
        session.add(PluginSetting(organisation=organisation, plugin_id=plugin_id, enabled=enabled))
    else:
        setting.enabled = enabled


def seed_catalogue(session: Session, path: str | None) -> int:
    """Seed from `path` (BATON_PLUGINS_FILE) or the built-in catalogue."""
    return seed_plugins(session, load_catalogue_file(Path(path) if path else BUILTIN_CATALOGUE))
