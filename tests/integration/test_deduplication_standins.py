"""The stand-ins answer the two deduplication calls on the wire as KATalogus and Octopoes do (raw HTTP, as
mula's clients send them): boefjes/katalogus/configs.py with sql/config_storage.py's duplicates, and
octopoes/api/bulk_router.py's list_object_clients with api.py's error answers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from harness.standins import KatalogusStandin, OctopoesStandin, StandinServer

SHARED = "Hostname|internet|shared.example"


@pytest.fixture
def katalogus() -> Iterator[tuple[KatalogusStandin, httpx.Client]]:
    standin = KatalogusStandin()
    standin.add_boefje("shodan", ["IPAddressV4"], scan_level=1)
    standin.add_boefje("no-dedup", ["IPAddressV4"], deduplicate=False)
    for org, settings in (("acme", {"K": "1"}), ("beta", {"K": "1"}), ("gamma", {"K": "2"}), ("delta", {"K": "1"})):
        standin.add_organisation(org, deduplicate=org != "delta")
        for boefje in ("shodan", "no-dedup"):
            standin.set_enabled(org, boefje, True)
            standin.set_settings(org, boefje, settings)
    standin.add_organisation("epsilon")
    standin.set_settings("epsilon", "shodan", {"K": "1"})  # identical settings, but disabled
    with StandinServer(standin.app) as server, httpx.Client(base_url=server.url) as client:
        yield standin, client


def configs(client: httpx.Client, **params: object) -> httpx.Response:
    return client.get("/v1/configs", params=params)


def test_configs_with_duplicates(katalogus: tuple[KatalogusStandin, httpx.Client]) -> None:
    standin, client = katalogus
    # mula's query (less its limit=0): the organisation's one config, with the identical enabled ones of
    # organisations that deduplicate (not gamma: other settings; delta: no deduplication; epsilon: disabled).
    answer = configs(client, organisation_id="acme", boefje_id="shodan", enabled=True, with_duplicates=True)
    assert answer.status_code == 200
    [config] = answer.json()
    assert sorted(config) == ["boefje_id", "duplicates", "enabled", "id", "organisation_id", "settings"]
    assert (config["organisation_id"], config["boefje_id"], config["settings"]) == ("acme", "shodan", {"K": "1"})
    assert [duplicate["organisation_id"] for duplicate in config["duplicates"]] == ["beta"]
    assert config["duplicates"][0]["duplicates"] == []
    # A boefje that does not deduplicate has no duplicates; nor has anything without both ids.
    [config] = configs(client, organisation_id="acme", boefje_id="no-dedup", with_duplicates=True).json()
    assert config["duplicates"] == []
    listing = configs(client, boefje_id="shodan", with_duplicates=True).json()
    assert len(listing) == 5 and all(item["duplicates"] == [] for item in listing)
    assert configs(client, organisation_id="unknown", boefje_id="shodan", with_duplicates=True).json() == []
    # KATalogus without BOEFJES_DEDUPLICATE ignores with_duplicates.
    standin.deduplicate = False
    [config] = configs(client, organisation_id="acme", boefje_id="shodan", with_duplicates=True).json()
    assert config["duplicates"] == []
    standin.faults.status = 500
    assert configs(client, organisation_id="acme", boefje_id="shodan").status_code == 500


@pytest.fixture
def octopoes() -> Iterator[tuple[OctopoesStandin, httpx.Client]]:
    standin = OctopoesStandin()
    standin.add_object("acme", SHARED, level=2)
    standin.add_object("beta", SHARED, level=3, profile="inherited")
    standin.add_organisation("gamma")
    with StandinServer(standin.app) as server, httpx.Client(base_url=server.url) as client:
        yield standin, client


def test_object_clients(octopoes: tuple[OctopoesStandin, httpx.Client]) -> None:
    standin, client = octopoes
    now = datetime.now(UTC).isoformat()
    params = {"reference": SHARED, "clients": ["acme", "beta", "gamma"], "valid_time": now}
    answer = client.get("/object-clients", params=params)
    assert answer.status_code == 200
    held = answer.json()
    assert sorted(held) == ["acme", "beta"]  # gamma does not hold it
    assert held["beta"]["primary_key"] == SHARED and held["beta"]["object_type"] == "Hostname"
    assert held["beta"]["scan_profile"]["level"] == 3
    assert held["beta"]["scan_profile"]["scan_profile_type"] == "inherited"
    # One client Octopoes has no node for: 404 for the whole call (NodeNotFound).
    unknown = client.get("/object-clients", params={**params, "clients": ["acme", "nowhere"]})
    assert unknown.status_code == 404 and unknown.json() == {"detail": "Node not found"}
    assert client.get("/object-clients", params={"reference": SHARED, "valid_time": now}).json() == {}
    # valid_time is an AwareDatetime: a naive or missing one is refused with 422.
    naive = datetime.now().isoformat()
    assert client.get("/object-clients", params={**params, "valid_time": naive}).status_code == 422
    assert client.get("/object-clients", params={"reference": SHARED, "clients": ["acme"]}).status_code == 422
    standin.faults.status = 500
    assert client.get("/object-clients", params=params).status_code == 500
