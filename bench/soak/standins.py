"""OpenKAT's KATalogus, Octopoes and Bytes for the soak run, in a process of their own (so that their
work is not the measuring process's), with a small control API beside them.

    python -m bench.soak.standins '<spec as JSON>'   # prints the four URLs as one JSON line

The spec names the organisations, the twin pairs and the addresses Octopoes holds at the start (the
boefjes and normalizers are bench/soak/plan.py's). KATalogus' own API changes plugins and settings (rocky's
calls); the control API does what no OpenKAT API does here:

- `POST /objects` `[{"organisation", "reference"}]`: Octopoes holds new objects (before their
  scan-profile message is published, as Octopoes publishes after it stored the object);
- `POST /down/{service}`, `POST /up/{service}`: the service refuses connections, or answers again;
- `GET /calls`: the calls each service received, by endpoint.

The process ends when its standard input closes (the soak run ends or dies).
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import httpx
from fastapi import FastAPI

from bench.soak.plan import BOEFJES, OBJECT_LEVEL, TWIN_BOEFJE
from harness.standins import BytesStandin, KatalogusStandin, OctopoesStandin, StandinServer

BYTES_USER = ("soak-bytes", "soak-secret")
IMAGE = "ghcr.io/minvws/openkat/{id}:soak"


def hostname(organisation: str, n: int) -> str:
    return f"Hostname|internet|h{n}.{organisation}.example"


def address(index: int, n: int) -> str:
    """The n-th address of the index-th organisation."""
    return f"IPAddressV4|internet|10.{index // 250}.{index % 250}.{n + 1}"


def twin_pairs(organisations: list[str], count: int) -> dict[str, str]:
    """Organisation → its twin (the first `count` organisations, two by two)."""
    pairs: dict[str, str] = {}
    for first, second in zip(organisations[0:count:2], organisations[1:count:2], strict=False):
        pairs[first], pairs[second] = second, first
    return pairs


def build(spec: dict[str, Any]) -> tuple[KatalogusStandin, OctopoesStandin, BytesStandin]:
    katalogus, octopoes = KatalogusStandin(deduplicate=True), OctopoesStandin()
    services = BytesStandin(*BYTES_USER)
    for boefje in BOEFJES:
        katalogus.add_boefje(
            boefje.id,
            [boefje.consumes],
            scan_level=1,
            enabled=boefje.enabled,
            oci_image=IMAGE.format(id=boefje.id),
            name=boefje.id.replace("-", " ").title(),
        )
        katalogus.add_normalizer(boefje.normalizer, [f"boefje/{boefje.id}"])
    organisations = spec["organisations"]
    for index, organisation in enumerate(organisations):
        katalogus.add_organisation(organisation)
        octopoes.add_organisation(organisation)
        for n in range(spec["addresses"]):
            octopoes.add_object(organisation, address(index, n), level=OBJECT_LEVEL)
    for organisation in twin_pairs(organisations, spec["twin_organisations"]):
        # Identical settings of the boefje (KATalogus' deduplication compares them): twins.
        katalogus.set_settings(organisation, TWIN_BOEFJE, {"SOAK_PROFILE": "shared"})
        katalogus.set_enabled(organisation, TWIN_BOEFJE, True)
    return katalogus, octopoes, services


def control_app(octopoes: OctopoesStandin, servers: dict[str, StandinServer], counted: dict[str, Any]) -> FastAPI:
    app = FastAPI(title="soak control")

    @app.post("/objects")
    def add_objects(objects: list[dict[str, str]]) -> dict[str, int]:
        for item in objects:
            octopoes.add_object(item["organisation"], item["reference"], level=OBJECT_LEVEL)
        return {"added": len(objects)}

    @app.post("/down/{service}")
    def down(service: str) -> dict[str, str]:
        servers[service].down()
        return {"service": service, "state": "down"}

    @app.post("/up/{service}")
    def up(service: str) -> dict[str, str]:
        servers[service].up()
        return {"service": service, "state": "up"}

    @app.get("/calls")
    def calls() -> dict[str, dict[str, int]]:
        return {name: standin.calls.snapshot() for name, standin in counted.items()}

    return app


def main() -> None:
    spec = json.loads(sys.argv[1])
    katalogus, octopoes, services = build(spec)
    standins = {"katalogus": katalogus, "octopoes": octopoes, "bytes": services}
    servers = {name: StandinServer(standin.app) for name, standin in standins.items()}
    control = StandinServer(control_app(octopoes, servers, standins))
    for server in [*servers.values(), control]:
        server.up()
    print(json.dumps({**{name: server.url for name, server in servers.items()}, "control": control.url}), flush=True)
    sys.stdin.read()  # until the soak run closes it (or dies)
    for server in [control, *servers.values()]:
        server.down()


class Outside:
    """The soak run's handle on the stand-ins' process."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self._http = httpx.Client(base_url=urls["control"], timeout=30)
        self._lock = threading.Lock()  # httpx.Client is thread-safe; the lock keeps calls short and ordered

    def add_objects(self, objects: list[dict[str, str]]) -> None:
        with self._lock:
            self._http.post("/objects", json=objects).raise_for_status()

    def down(self, service: str) -> None:
        with self._lock:
            self._http.post(f"/down/{service}").raise_for_status()

    def up(self, service: str) -> None:
        with self._lock:
            self._http.post(f"/up/{service}").raise_for_status()

    def calls(self) -> dict[str, dict[str, int]]:
        with self._lock:
            answer = self._http.get("/calls")
        answer.raise_for_status()
        result: dict[str, dict[str, int]] = answer.json()
        return result

    def enable(self, organisation: str, boefje: str) -> None:
        """As rocky enables a boefje for an organisation: KATalogus' own API."""
        url = f"{self.urls['katalogus']}/v1/organisations/{organisation}/plugins/{boefje}"
        httpx.patch(url, json={"enabled": True}, timeout=30).raise_for_status()

    def close(self) -> None:
        self._http.close()


if __name__ == "__main__":
    main()
