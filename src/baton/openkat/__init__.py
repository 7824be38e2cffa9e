"""Clients for OpenKAT's services: KATalogus (plugins, organisations), Octopoes (objects), Bytes (runs).

A layer beside storage: it imports only baton.core. `connect` builds the clients the settings name;
each has one pooled HTTP client, retries with backoff and logs an outage once (`baton.openkat.http`).
"""

from __future__ import annotations

from dataclasses import dataclass

from baton.core.outages import Outage
from baton.core.settings import OpenKatSettings
from baton.openkat.bytes import BytesClient
from baton.openkat.http import Observer, RetryPolicy, ServiceClient
from baton.openkat.katalogus import KatalogusClient
from baton.openkat.octopoes import OctopoesClient

__all__ = ["BytesClient", "KatalogusClient", "OctopoesClient", "OpenKatClients", "Outage", "connect"]


@dataclass
class OpenKatClients:
    """The services configured; None where a URL is not set."""

    katalogus: KatalogusClient | None = None
    octopoes: OctopoesClient | None = None
    bytes: BytesClient | None = None

    def outages(self) -> list[Outage]:
        """The services failing now (for /ready and the status page)."""
        found = []
        for client in (self.katalogus, self.octopoes, self.bytes):
            if client is not None and (outage := client.http.outages.current) is not None:
                found.append(outage)
        return found

    def close(self) -> None:
        for client in (self.katalogus, self.octopoes, self.bytes):
            if client is not None:
                client.http.close()


def connect(settings: OpenKatSettings, observer: Observer | None = None) -> OpenKatClients:
    """Clients for the services whose URLs are set (none: Baton's embedded catalogue, no outside calls)."""

    def http(service: str, url: str) -> ServiceClient:
        return ServiceClient(
            service,
            url,
            timeout=settings.openkat_timeout_seconds,
            max_connections=settings.openkat_max_connections,
            retry=RetryPolicy(retries=settings.openkat_retries),
            observer=observer,
        )

    clients = OpenKatClients()
    if settings.katalogus_url:
        clients.katalogus = KatalogusClient(http("katalogus", settings.katalogus_url))
    if settings.octopoes_url:
        clients.octopoes = OctopoesClient(http("octopoes", settings.octopoes_url))
    if settings.bytes_url and settings.bytes_username and settings.bytes_password:
        password = settings.bytes_password.get_secret_value()
        clients.bytes = BytesClient(http("bytes", settings.bytes_url), settings.bytes_username, password)
    return clients
