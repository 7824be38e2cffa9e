"""KATalogus as the plugin catalogue (when BATON_KATALOGUS_URL is set).

Each organisation's boefje scheduler reads the organisation's plugin listing from KATalogus at most once
per poll (BATON_KATALOGUS_POLL_SECONDS) and writes it into Baton's catalogue tables in its fenced
transaction; every scheduler of the organisation then plans from the database (`KatalogusCatalogue`),
so there is one call per organisation per poll, never one per task. A failed read changes nothing: the
last catalogue written stays, and ingest goes on with it. Until an organisation's first listing is
written its event-driven schedulers leave their events waiting (there is no catalogue to plan with yet).

The calls are made outside any transaction. While a service is failing, one caller per process tries it
once per poll (the others keep their catalogue without waiting on it), so an outage does not hold the few
threads a worker's schedulers share.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from baton.core.catalogue import PLUGIN_TYPES, ListedPlugin, may_scan
from baton.core.logging import get_logger
from baton.core.settings import Settings
from baton.ingest.outside_services import OutsideServiceRecorder
from baton.storage.catalogue_sync import (
    plugin_enabled_for,
    plugins_enabled_by_setting,
)
from baton.storage.engine import Session, Store
from baton.storage.tables import Plugin

if TYPE_CHECKING:  # the HTTP clients are loaded only where KATalogus is configured
    from baton.openkat import BytesClient, KatalogusClient, OctopoesClient
    from baton.openkat.http import ServiceClient
    from baton.openkat.models import Plugin as KatalogusPlugin

log = get_logger("baton.katalogus")
_SAID_LEFT_OUT: set[str] = set()  # plugins this process said it leaves out (once each, not every poll)
# The widths of the plugins table's columns: a plugin KATalogus describes beyond them is left out.
LIMITS = {"id": 128, "version": 64, "oci_image": 512, "cron": 128}


@dataclass
class KatalogusLink:
    """A process's clients for KATalogus (and Octopoes, for new boefjes' objects; Bytes, for the rescans),
    shared by its schedulers."""

    katalogus: KatalogusClient
    octopoes: OctopoesClient | None
    poll_seconds: float
    recorder: OutsideServiceRecorder | None = None
    bytes: BytesClient | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next_probe: dict[str, datetime] = field(default_factory=dict)
    _empty: bool = False  # the last plugin listing had no plugin

    def may_call(self, client: ServiceClient, now: datetime) -> bool:
        """Always while the service answers; while it fails, once per poll in this process (the probe that
        ends the outage), so the process's other callers do not each wait out its retries."""
        if client.outages.current is None:
            return True
        with self._lock:
            if now < self._next_probe.get(client.service, now):
                return False
            self._next_probe[client.service] = now + timedelta(seconds=self.poll_seconds)
            return True

    def failed(self, client: ServiceClient, now: datetime) -> None:
        """A call failed: the process's next try of the service is a poll from now."""
        with self._lock:
            self._next_probe[client.service] = now + timedelta(seconds=self.poll_seconds)

    def listed(self, anything: bool) -> bool:
        """Whether a plugin listing had any plugin; one log line when listings start coming back empty,
        one when they no longer do (for the process, not per organisation)."""
        with self._lock:
            changed, self._empty = self._empty == anything, not anything
        if changed:
            if anything:
                log.info("KATalogus lists plugins again")
            else:
                log.warning("KATalogus lists no plugin; organisations keep their last catalogue")
        return anything

    def observed(self, client: ServiceClient) -> None:
        if self.recorder is not None:
            self.recorder.note(client)


_LINKS: dict[tuple[str, str], KatalogusLink] = {}
_LINKS_LOCK = threading.Lock()


def katalogus_link(store: Store, settings: Settings) -> KatalogusLink | None:
    """The process's link, when KATalogus is configured (None: Baton's own catalogue). One per process
    and database, shared by its schedulers and its organisation sync: one connection pool per service,
    one outage tracker, so an outage is logged once by the process, not once per caller."""
    if not settings.openkat.katalogus_url:
        return None
    key = (store.url, settings.openkat.model_dump_json())
    with _LINKS_LOCK:
        if key not in _LINKS:
            from baton.openkat import connect

            clients = connect(settings.openkat)
            assert clients.katalogus is not None  # its URL is set
            poll = settings.openkat.katalogus_poll_seconds
            recorder = OutsideServiceRecorder(store, poll)
            _LINKS[key] = KatalogusLink(clients.katalogus, clients.octopoes, poll, recorder, clients.bytes)
            if clients.octopoes is None:
                log.info("Octopoes is not configured: a newly enabled boefje gets tasks from new events only")
        return _LINKS[key]


def listed_plugins(plugins: Iterable[KatalogusPlugin]) -> list[ListedPlugin]:
    """What the scheduler keeps of a listing: boefjes and normalizers (not bits) that fit its tables."""
    listed = []
    for plugin in plugins:
        if plugin.type not in PLUGIN_TYPES:
            continue
        too_long = [name for name, limit in LIMITS.items() if len(getattr(plugin, name) or "") > limit]
        if too_long:
            if plugin.id not in _SAID_LEFT_OUT:
                _SAID_LEFT_OUT.add(plugin.id)
                log.warning("plugin left out: a field is longer than Baton stores", plugin=plugin.id, fields=too_long)
            continue
        listed.append(
            ListedPlugin(
                id=plugin.id,
                type=plugin.type,
                name=(plugin.name or plugin.id)[:256],
                enabled=plugin.enabled,
                consumes=tuple(plugin.consumes),
                scan_level=plugin.scan_level or 0,
                version=plugin.version,
                oci_image=plugin.oci_image,
                cron=plugin.cron,
                interval=plugin.interval,
                run_on=tuple(plugin.run_on) if plugin.run_on else None,
            )
        )
    return listed


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
