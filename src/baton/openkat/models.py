"""What Baton reads from KATalogus, Octopoes and Bytes: the fields mula reads, as strict as mula where
a missing field would make a wrong decision (ids, types, enabled), tolerant of every field it ignores.

Sources (nl-kat-coordination): mula/scheduler/models/{plugin,organisation,boefje,ooi}.py for what mula
reads; boefjes/boefjes/worker/models.py, octopoes/octopoes/models/__init__.py and bytes/bytes/models.py
for what the services send.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# --- KATalogus ---


class Organisation(Answer):
    id: str
    name: str | None = None
    deduplicate: bool = True


class Plugin(Answer):
    """A boefje or normalizer as KATalogus lists it for one organisation (`enabled` is that organisation's)."""

    id: str
    type: str  # "boefje", "normalizer" or "bit"
    enabled: bool
    name: str | None = None
    version: str | None = None
    scan_level: int | None = None  # boefjes only
    consumes: list[str] = Field(default_factory=list)  # object types (boefjes), mime types (normalizers)
    produces: list[str] = Field(default_factory=list)
    cron: str | None = None
    interval: int | None = None  # minutes between runs on the same object
    run_on: list[str] | None = None  # "create", "update": run on those mutations only, no rescans
    oci_image: str | None = None
    oci_arguments: list[str] = Field(default_factory=list)

    @field_validator("consumes", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value  # a bit consumes one type

    @field_validator("oci_arguments", mode="before")
    @classmethod
    def _no_arguments(cls, value: Any) -> Any:
        return [] if value is None else value


class BoefjeConfig(Answer):
    """A boefje's settings for one organisation; `duplicates` are the other organisations' identical ones."""

    id: int
    boefje_id: str
    enabled: bool
    organisation_id: str
    settings: dict[str, Any] = Field(default_factory=dict)
    duplicates: list[BoefjeConfig] = Field(default_factory=list)


# --- Octopoes ---


class ScanProfile(Answer):
    level: int
    reference: str
    scan_profile_type: str | None = None


class OOI(Answer):
    """An object of interest: only what scheduling needs (its other fields are ignored)."""

    primary_key: str
    object_type: str
    # Octopoes fills it in every answer but load_bulk, which gives null for an object without a profile.
    scan_profile: ScanProfile | None = None

    @property
    def scan_level(self) -> int:
        return self.scan_profile.level if self.scan_profile is not None else 0


class ObjectPage(Answer):
    count: int
    items: list[OOI]


# --- Bytes ---


class BoefjeRef(Answer):
    id: str
    version: str | None = None


class BoefjeMeta(Answer):
    """One boefje run as Bytes keeps it."""

    id: uuid.UUID
    boefje: BoefjeRef
    input_ooi: str | None
    arguments: dict[str, Any] = Field(default_factory=dict)
    organization: str
    started_at: datetime | None
    ended_at: datetime | None


class Token(Answer):
    access_token: str
