"""Baton's own plugin catalogue as a file: the built-in `plugins.yml` (beside this package) or
BATON_PLUGINS_FILE, read and seeded into the catalogue tables by `baton migrate` and `baton serve`;
`PluginSpec` is also what `POST /plugins` takes."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from baton.core.errors import ConfigurationError
from baton.ingest.events import ScanLevel
from baton.storage.engine import Session
from baton.storage.scheduling.plugins import seed_plugins

BUILTIN_CATALOGUE = Path(__file__).parent.parent / "plugins.yml"
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
