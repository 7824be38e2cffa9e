"""What Baton keeps of KATalogus' plugin listing: its boefjes and normalizers (not its bits) that fit
Baton's catalogue tables; a plugin described beyond a column's width is left out, said once per process."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from baton.core.catalogue import PLUGIN_TYPES, ListedPlugin
from baton.core.logging import get_logger

if TYPE_CHECKING:  # the HTTP clients are loaded only where KATalogus is configured
    from baton.openkat.models import Plugin as KatalogusPlugin

log = get_logger("baton.katalogus")
_SAID_LEFT_OUT: set[str] = set()  # plugins this process said it leaves out (once each, not every poll)
# The widths of the plugins table's columns: a plugin KATalogus describes beyond them is left out.
LIMITS = {"id": 128, "version": 64, "oci_image": 512, "cron": 128}


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
