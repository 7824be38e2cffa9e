"""Baton's own plugin catalogue as a file: the built-in `plugins.yml` (beside this package) or
BATON_PLUGINS_FILE, read and seeded into the catalogue tables by `baton migrate` and `baton serve`;
its entries are `PluginSpec`s (core/catalogue.py), also what `POST /plugins` takes."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from baton.core.catalogue import PluginSpec
from baton.core.errors import ConfigurationError
from baton.storage.engine import Session
from baton.storage.scheduling.plugins import seed_plugins

BUILTIN_CATALOGUE = Path(__file__).parent.parent / "plugins.yml"
__all__ = ["BUILTIN_CATALOGUE", "CatalogueFile", "PluginSpec", "load_catalogue_file", "seed_catalogue"]


class CatalogueFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    plugins: list[PluginSpec]


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
