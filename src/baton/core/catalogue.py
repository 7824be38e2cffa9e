"""Rules of a plugin catalogue read from KATalogus (no I/O): what a listing says, which boefjes it
newly enables, which boefje runs on which scan-profile operation, which organisations a listing
retires and which it brings back."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from baton.core.events import ScanLevel

PLUGIN_TYPES = ("boefje", "normalizer")  # KATalogus also lists "bit"s, which no scheduler runs
KATALOGUS_SOURCE = "katalogus"  # organisations.source of those the KATalogus sync created (or adopted)
AUTO_SOURCE = "auto"  # of those made because a message or a push named them: KATalogus' once it lists them
SCAN_LEVELS = range(5)


@dataclass(frozen=True)
class ListedPlugin:
    """A boefje or normalizer as KATalogus lists it for one organisation (`enabled` is that organisation's)."""

    id: str
    type: str
    name: str
    enabled: bool
    consumes: tuple[str, ...]
    scan_level: int = 0
    version: str | None = None
    oci_image: str | None = None
    cron: str | None = None
    interval: int | None = None  # minutes between runs on one object
    run_on: tuple[str, ...] | None = None

    def definition(self) -> dict[str, object]:
        """The columns of its `plugins` row (what every organisation shares; `enabled` is per organisation)."""
        return {
            "type": self.type,
            "name": self.name,
            "consumes": list(self.consumes),
            "scan_level": self.scan_level,
            "version": self.version,
            "oci_image": self.oci_image,
            "cron": self.cron,
            "interval": self.interval,
            "run_on": list(self.run_on) if self.run_on else None,
        }


def newly_enabled(recorded: Mapping[str, bool], listing: Sequence[ListedPlugin]) -> list[ListedPlugin]:
    """Boefjes the listing enables that were not enabled by the organisation's last recorded listing (mula's
    "new boefjes": enabled, with something to consume). With nothing recorded yet (its first listing) every
    enabled boefje is new, as every one is for mula when it starts; after that only a change is, whatever
    restarts in between (the recorded state is in the database, not in memory)."""
    return [
        plugin
        for plugin in listing
        if plugin.type == "boefje" and plugin.enabled and plugin.consumes and not recorded.get(plugin.id, False)
    ]


def runs_on(run_on: Sequence[str] | None, operation: str) -> bool:
    """Whether a boefje gets a task for a scan-profile `operation` ("create", "update"): one with `run_on`
    only for the operations it lists (mula's process_mutations), every other one for both."""
    if not run_on:
        return True
    return operation in run_on


def is_rescanned(run_on: Sequence[str] | None) -> bool:
    """A boefje with `run_on` runs on those mutations only: mula makes it no schedule (no rescans)."""
    return not run_on


def may_scan(consumes: Collection[str], scan_level: int, object_type: str, object_level: int) -> bool:
    """A boefje may scan an object of a type it consumes whose scan level is at least its own."""
    return object_type in consumes and scan_level <= object_level


def scan_levels_for(scan_level: int) -> range:
    """The object scan levels a boefje of `scan_level` may scan (mula: range(scan_level, 5))."""
    return range(max(scan_level, 0), len(SCAN_LEVELS))


def organisations_to_retire(listed: Collection[str], from_katalogus: Collection[str]) -> set[str]:
    """The organisations KATalogus created here (and are active) that its listing no longer has: they
    are retired, never deleted (their tasks and schedules stay readable). None when it lists no
    organisation at all: a KATalogus that lost its database (or is not set up yet) answers that, and it
    must not retire every organisation; the last one goes by hand."""
    if not listed:
        return set()
    return set(from_katalogus) - set(listed)


def organisations_to_restore(listed: Collection[str], retired: Collection[str]) -> set[str]:
    """Retired organisations the listing has again: they come back, with their history."""
    return set(retired) & set(listed)


# The reason of a queued task its organisation's retirement cancelled.
RETIRED_TASK_REASON = "organisation retired: KATalogus no longer lists it"


# -- Baton's own catalogue entry: what `POST /plugins` takes and the plugins file holds ---------------------

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
