"""Baton's KATalogus, Octopoes and Bytes clients over real HTTP, against the stand-ins in harness/standins
(and, with BATON_TEST_KATALOGUS_URL set, against a real KATalogus run from OpenKAT's source).

Every call the clients make, paging, 404, 500 and refused connections (retried, then one error; the outage
logged once when it starts and once when it ends), Bytes' login again after a 401, load_bulk in batches.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from baton.core.errors import InvalidInputError, NotFoundError, OutsideServiceError
from baton.openkat import BytesClient, KatalogusClient, OctopoesClient
from baton.openkat.http import Outcome, RetryPolicy, ServiceClient
from harness.standins import BytesStandin, KatalogusStandin, OctopoesStandin, StandinServer

FAST_RETRIES = RetryPolicy(retries=2, initial=0.01, maximum=0.02)
PLUGINS = "GET /v1/organisations/{organisation_id}/plugins"


def http(service: str, url: str, observed: list[tuple[str, Outcome]] | None = None, **options: Any) -> ServiceClient:
    observer = None if observed is None else (lambda name, outcome: observed.append((name, outcome)))
    return ServiceClient(service, url, retry=FAST_RETRIES, observer=observer, **{"timeout": 2.0, **options})


@pytest.fixture
def katalogus() -> Iterator[tuple[KatalogusStandin, StandinServer]]:
    standin = KatalogusStandin()
    with StandinServer(standin.app) as server:
        yield standin, server


@pytest.fixture
def octopoes() -> Iterator[tuple[OctopoesStandin, OctopoesClient]]:
    standin = OctopoesStandin()
    with StandinServer(standin.app) as server:
        yield standin, OctopoesClient(http("octopoes", server.url))


@pytest.fixture
def bytes_() -> Iterator[tuple[BytesStandin, BytesClient]]:
    standin = BytesStandin(username="baton", password="s3cret")
    with StandinServer(standin.app) as server:
        yield standin, BytesClient(http("bytes", server.url), "baton", "s3cret")


def outage_lines(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(line["log_level"], line["event"]) for line in logs if line["event"].startswith("outside service")]


# --- KATalogus ---


def test_organisations_are_read_as_a_dict_keyed_by_id(katalogus: tuple[KatalogusStandin, StandinServer]) -> None:
    standin, server = katalogus
    standin.add_organisation("acme", "Acme Corp")
    standin.add_organisation("beta", deduplicate=False)
    client = KatalogusClient(http("katalogus", server.url))

    organisations = client.organisations()

    assert sorted(organisations) == ["acme", "beta"]
    assert organisations["acme"].name == "Acme Corp"
    assert organisations["beta"].deduplicate is False
    assert client.organisation("acme") == organisations["acme"]
    assert client.organisation("gone") is None  # 404 {"message": ...}


def test_plugins_carry_what_mula_reads(katalogus: tuple[KatalogusStandin, StandinServer]) -> None:
    standin, server = katalogus
    standin.add_organisation("acme")
    standin.add_boefje(
        "nmap",
        ["IPAddressV4", "IPAddressV6"],
        scan_level=2,
        version="7.94",
        oci_image="ghcr.io/minvws/openkat/nmap:latest",
        oci_arguments=["--top-ports", "250"],
        interval=1440,
        run_on=["create"],
    )
    standin.add_boefje("ssl-certificates", ["Website"], cron="0 3 * * *")
    standin.add_normalizer("kat_nmap_normalize", ["boefje/nmap"], produces=["IPPort"])
    standin.set_enabled("acme", "nmap", True)
    client = KatalogusClient(http("katalogus", server.url))

    plugins = {plugin.id: plugin for plugin in client.plugins("acme")}

    nmap = plugins["nmap"]
    assert (nmap.type, nmap.enabled, nmap.scan_level, nmap.version) == ("boefje", True, 2, "7.94")
    assert nmap.consumes == ["IPAddressV4", "IPAddressV6"]
    assert "boefje/nmap" in nmap.produces
    assert (nmap.oci_image, nmap.oci_arguments) == ("ghcr.io/minvws/openkat/nmap:latest", ["--top-ports", "250"])
    assert (nmap.interval, nmap.run_on, nmap.cron) == (1440, ["create"], None)
    assert plugins["ssl-certificates"].cron == "0 3 * * *"
    assert plugins["ssl-certificates"].enabled is False  # a boefje's default
    normalizer = plugins["kat_nmap_normalize"]
    assert (normalizer.type, normalizer.enabled, normalizer.scan_level) == ("normalizer", True, None)
    assert normalizer.consumes == ["boefje/nmap", "normalizer/kat_nmap_normalize"]
    # Another organisation sees the defaults: the enabled flag is per organisation.
    assert client.plugin("other", "nmap") is not None
    assert client.plugin("other", "nmap").enabled is False  # type: ignore[union-attr]
    assert client.plugin("acme", "nmap") == nmap
    assert client.plugin("acme", "no-such-boefje") is None


def test_plugin_filters_and_paging(katalogus: tuple[KatalogusStandin, StandinServer]) -> None:
    standin, server = katalogus
    for index in range(7):
        standin.add_boefje(f"boefje-{index}", ["Hostname"] if index % 2 else ["IPAddressV4"])
    standin.add_normalizer("normalizer", ["boefje/boefje-1"])
    standin.add_organisation("acme")
    standin.set_enabled("acme", "boefje-3", True)
    client = KatalogusClient(http("katalogus", server.url))

    hostname_boefjes = client.plugins("acme", plugin_type="boefje", consumes=["Hostname"])
    assert [plugin.id for plugin in hostname_boefjes] == ["boefje-1", "boefje-3", "boefje-5"]
    assert [plugin.id for plugin in client.plugins("acme", plugin_type="boefje", enabled=True)] == ["boefje-3"]
    assert [plugin.id for plugin in client.plugins("acme", plugin_type="normalizer")] == ["normalizer"]

    standin.calls.reset()
    paged = client.plugins("acme", page_size=3)
    assert paged == client.plugins("acme")
    assert standin.calls[PLUGINS] == 3 + 1  # 8 plugins in pages of 3, then the one-call listing


def test_boefje_configs_report_the_organisations_with_identical_settings(
    katalogus: tuple[KatalogusStandin, StandinServer],
) -> None:
    standin, server = katalogus
    standin.add_boefje("shodan", ["IPAddressV4"])
    for organisation in ("acme", "beta", "gamma", "delta"):
        standin.add_organisation(organisation, deduplicate=organisation != "delta")
        standin.set_enabled(organisation, "shodan", True)
        standin.set_settings(organisation, "shodan", {"SHODAN_API": "key-1" if organisation != "gamma" else "key-2"})
    client = KatalogusClient(http("katalogus", server.url))

    [config] = client.boefje_configs("acme", "shodan")

    assert (config.organisation_id, config.boefje_id, config.enabled) == ("acme", "shodan", True)
    assert config.settings == {"SHODAN_API": "key-1"}
    # gamma's settings differ; delta does not deduplicate.
    assert [duplicate.organisation_id for duplicate in config.duplicates] == ["beta"]
    assert client.boefje_configs("acme", "no-settings-here") == []


def test_a_listing_answered_404_is_a_failure_not_an_empty_catalogue(
    katalogus: tuple[KatalogusStandin, StandinServer],
) -> None:
    _, server = katalogus
    client = KatalogusClient(http("katalogus", server.url + "/wrong-prefix"))
    with capture_logs() as logs, pytest.raises(OutsideServiceError, match="answered 404"):
        client.organisations()
    assert outage_lines(logs) == [("warning", "outside service failing")]


def test_an_answer_baton_cannot_read_is_a_failure(katalogus: tuple[KatalogusStandin, StandinServer]) -> None:
    standin, server = katalogus
    standin.add_boefje("nmap", ["IPAddressV4"])
    standin.update_boefje("nmap", enabled=None)
    with pytest.raises(OutsideServiceError, match=r"cannot read .*0\.enabled"):
        KatalogusClient(http("katalogus", server.url)).plugins("acme")


# --- failures: retried, then one error; one log line per outage and one when it ends ---


def test_500_is_retried_then_fails_and_the_outage_is_logged_once(
    katalogus: tuple[KatalogusStandin, StandinServer],
) -> None:
    standin, server = katalogus
    standin.add_organisation("acme")
    observed: list[tuple[str, Outcome]] = []
    client = KatalogusClient(http("katalogus", server.url, observed))
    standin.faults.status = 500

    with capture_logs() as logs:
        for _ in range(3):
            with pytest.raises(OutsideServiceError, match="katalogus: answered 500 to GET /v1/organisations"):
                client.organisations()
        assert standin.calls["GET /v1/organisations"] == 3 * (1 + FAST_RETRIES.retries)
        standin.faults.clear()
        assert list(client.organisations()) == ["acme"]
        assert list(client.organisations()) == ["acme"]

    assert outage_lines(logs) == [("warning", "outside service failing"), ("info", "outside service answering again")]
    failing, back = (line for line in logs if line["event"].startswith("outside service"))
    assert (failing["service"], failing["reason"]) == ("katalogus", "answered 500 to GET /v1/organisations")
    assert back["outage_seconds"] >= 0
    assert "exc_info" not in failing and "exception" not in failing  # no traceback
    assert observed.count(("katalogus", "retry")) == 3 * FAST_RETRIES.retries
    assert observed.count(("katalogus", "error")) == 3
    assert observed.count(("katalogus", "ok")) == 2
    assert client.http.outages.current is None


def test_refused_connections_are_retried_then_fail_until_the_service_is_back(
    katalogus: tuple[KatalogusStandin, StandinServer],
) -> None:
    standin, server = katalogus
    standin.add_organisation("acme")
    client = KatalogusClient(http("katalogus", server.url))
    assert list(client.organisations()) == ["acme"]  # a pooled connection to the server that goes away

    with capture_logs() as logs:
        server.down()
        for _ in range(2):
            with pytest.raises(OutsideServiceError, match="katalogus: connection refused"):
                client.organisations()
        outage = client.http.outages.current
        assert outage is not None and (outage.service, outage.reason) == ("katalogus", "connection refused")
        server.up()
        assert list(client.organisations()) == ["acme"]

    assert outage_lines(logs) == [("warning", "outside service failing"), ("info", "outside service answering again")]


def test_a_slow_answer_times_out_and_is_retried(octopoes: tuple[OctopoesStandin, OctopoesClient]) -> None:
    standin, quick = octopoes
    standin.add_object("acme", "Hostname|internet|example.com", level=1)
    client = OctopoesClient(http("octopoes", quick.http.base_url, timeout=0.2))
    standin.faults.latency_ms = 1000
    with pytest.raises(OutsideServiceError, match="octopoes: timed out"):
        client.object("acme", "Hostname|internet|example.com")
    assert standin.calls["GET /{client}/object"] == 1 + FAST_RETRIES.retries
    standin.faults.clear()
    assert client.object("acme", "Hostname|internet|example.com") is not None


# --- Octopoes ---


def test_objects_are_streamed_page_by_page(octopoes: tuple[OctopoesStandin, OctopoesClient]) -> None:
    standin, client = octopoes
    for index in range(2500):
        standin.add_object("acme", f"Hostname|internet|host-{index:04}.example", level=2)
    standin.add_object("acme", "IPAddressV4|internet|192.0.2.1", level=2)
    standin.add_object("acme", "Hostname|internet|low.example", level=0)

    objects = client.objects("acme", ["Hostname"], scan_levels=[1, 2, 3, 4])
    first = next(objects)
    assert standin.calls["GET /{client}/objects"] == 1  # nothing fetched before it is needed
    rest = list(objects)

    assert standin.calls["GET /{client}/objects"] == 3  # pages of 1000 (mula's)
    references = [first.primary_key, *(item.primary_key for item in rest)]
    assert len(references) == len(set(references)) == 2500
    assert all(reference.startswith("Hostname|") for reference in references)
    assert {item.scan_level for item in rest} == {2}


def test_objects_of_an_unknown_organisation_or_type_are_none(octopoes: tuple[OctopoesStandin, OctopoesClient]) -> None:
    standin, client = octopoes
    standin.add_object("acme", "Hostname|internet|example.com", level=1)
    assert list(client.objects("unknown-org", ["Hostname"])) == []
    assert list(client.objects("acme", ["NoSuchType"])) == []
    assert list(client.objects("acme", [])) == []
    assert [item.primary_key for item in client.objects("acme", ["Hostname", "NoSuchType"])] == []  # as Octopoes
    assert client.http.outages.current is None  # answers, not failures
    # Octopoes answers an unknown type with 400 "Type not found" (checked on Octopoes' API run from source).
    unknown_type = httpx.get(
        f"{client.http.base_url}/acme/objects",
        params={"types": "NoSuchType", "valid_time": datetime.now(UTC).isoformat()},
    )
    assert (unknown_type.status_code, unknown_type.json()) == (400, {"detail": "Type not found"})


def test_one_object_and_a_missing_one(octopoes: tuple[OctopoesStandin, OctopoesClient]) -> None:
    standin, client = octopoes
    standin.add_object("acme", "Hostname|internet|example.com", level=3, profile="inherited")
    found = client.object("acme", "Hostname|internet|example.com")
    assert found is not None
    assert (found.object_type, found.scan_level, found.scan_profile.scan_profile_type) == (  # type: ignore[union-attr]
        "Hostname",
        3,
        "inherited",
    )
    assert client.object("acme", "Hostname|internet|gone.example") is None


def test_load_bulk_in_batches(octopoes: tuple[OctopoesStandin, OctopoesClient]) -> None:
    standin, client = octopoes
    present = [f"Hostname|internet|host-{index}.example" for index in range(1100)]
    for reference in present:
        standin.add_object("acme", reference, level=1)
    standin.add_object("acme", "IPAddressV4|internet|192.0.2.1", profile=None)  # no scan profile document
    gone = [f"Hostname|internet|gone-{index}.example" for index in range(100)]

    found = client.load_bulk("acme", [*present, *gone, "IPAddressV4|internet|192.0.2.1"], batch_size=500)

    assert standin.calls["POST /{client}/objects/load_bulk"] == 3  # 1201 references in batches of 500
    assert set(found) == {*present, "IPAddressV4|internet|192.0.2.1"}
    assert found["IPAddressV4|internet|192.0.2.1"].scan_profile is None
    assert found["IPAddressV4|internet|192.0.2.1"].scan_level == 0
    assert found[present[0]].scan_level == 1
    assert client.load_bulk("acme", []) == {}
    with pytest.raises(NotFoundError, match="does not know organisation 'unknown-org'"):
        client.load_bulk("unknown-org", present[:1])


def test_object_clients(octopoes: tuple[OctopoesStandin, OctopoesClient]) -> None:
    standin, client = octopoes
    for organisation in ("acme", "beta"):
        standin.add_object(organisation, "Hostname|internet|shared.example", level=2)
    standin.add_organisation("gamma")
    held = client.object_clients("Hostname|internet|shared.example", ["acme", "beta", "gamma"])
    assert sorted(held) == ["acme", "beta"]
    assert held["beta"].primary_key == "Hostname|internet|shared.example"
    assert client.object_clients("Hostname|internet|shared.example", ["acme", "unknown-org"]) == {}


def test_valid_time_is_timezone_aware(octopoes: tuple[OctopoesStandin, OctopoesClient]) -> None:
    standin, client = octopoes
    standin.add_object("acme", "Hostname|internet|example.com", level=1)
    yesterday = datetime.now(UTC) - timedelta(days=1)
    assert client.object("acme", "Hostname|internet|example.com", valid_time=yesterday) is not None
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        client.object("acme", "Hostname|internet|example.com", valid_time=datetime.now())
    # Octopoes itself refuses a naive valid_time (AwareDatetime), as the stand-in does.
    naive = httpx.get(
        f"{client.http.base_url}/acme/object",
        params={"reference": "Hostname|internet|example.com", "valid_time": "2025-01-01T00:00:00"},
    )
    assert naive.status_code == 422


# --- Bytes ---


def test_runs_newest_first_read_incrementally(bytes_: tuple[BytesStandin, BytesClient]) -> None:
    standin, client = bytes_
    start = datetime(2025, 11, 1, tzinfo=UTC)
    runs = [
        standin.add_run("acme", "dns-records", f"Hostname|internet|host-{i}.example", started_at=start + timedelta(i))
        for i in range(5)
    ]
    standin.add_run("acme", "dns-records", None, started_at=start + timedelta(days=10))  # no input object
    standin.add_run("acme", "nmap", "IPAddressV4|internet|192.0.2.1", started_at=start)
    standin.add_run("beta", "dns-records", "Hostname|internet|host-0.example", started_at=start)

    every = list(client.boefje_runs("acme", "dns-records", page_size=2))
    # Every object's runs (input_ooi=*), the run without an object too, newest first; no other boefje or
    # organisation.
    assert [run.input_ooi for run in every] == [None, *(run["input_ooi"] for run in reversed(runs))]
    assert standin.calls["POST /token"] == 1
    assert standin.calls["GET /bytes/boefje_meta"] == 4  # 6 runs in pages of 2, then an empty page

    standin.calls.reset()
    since = start + timedelta(days=3)
    recent = list(client.boefje_runs("acme", "dns-records", since=since, page_size=2))
    assert [run.started_at for run in recent] == [start + timedelta(days=10), start + timedelta(days=4), since]
    assert str(recent[2].id) == runs[3]["id"]
    assert standin.calls["GET /bytes/boefje_meta"] == 2  # stopped at the run known already, not read to the end
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        list(client.boefje_runs("acme", "dns-records", since=datetime(2025, 1, 1)))

    last = client.last_run("acme", "dns-records", "Hostname|internet|host-2.example")
    assert last is not None and last.started_at == start + timedelta(days=2)
    assert client.last_run("acme", "dns-records", "Hostname|internet|never.example") is None


def test_an_expired_token_logs_in_again(bytes_: tuple[BytesStandin, BytesClient]) -> None:
    standin, client = bytes_
    standin.add_run("acme", "dns-records", "Hostname|internet|example.com")
    assert len(list(client.boefje_runs("acme", "dns-records"))) == 1
    standin.expire_tokens()

    assert len(list(client.boefje_runs("acme", "dns-records"))) == 1

    assert standin.calls["POST /token"] == 2
    assert standin.calls["GET /bytes/boefje_meta"] == 3  # the one answered 401, and its repeat


def test_wrong_bytes_credentials_are_a_failure(bytes_: tuple[BytesStandin, BytesClient]) -> None:
    standin, client = bytes_
    wrong = BytesClient(client.http, "baton", "wrong")
    with pytest.raises(OutsideServiceError, match="bytes: answered 401 to POST /token"):
        list(wrong.boefje_runs("acme", "dns-records"))
    assert standin.calls["POST /token"] == 1  # a 4xx is not retried


def test_bytes_lists_only_runs_without_an_object_unless_asked_for_every_one(
    bytes_: tuple[BytesStandin, BytesClient],
) -> None:
    """Why the client sends input_ooi=*: Bytes' filter compares the absent parameter (None) too."""
    standin, client = bytes_
    standin.add_run("acme", "dns-records", "Hostname|internet|example.com")
    client.login()
    url = f"{client.http.base_url}/bytes/boefje_meta"
    headers = {"Authorization": client.http.headers["Authorization"]}
    params = {"organization": "acme", "boefje_id": "dns-records", "limit": 10}
    assert httpx.get(url, params=params, headers=headers).json() == []
    assert len(httpx.get(url, params={**params, "input_ooi": "*"}, headers=headers).json()) == 1
    assert httpx.get(url, params=params).status_code == 401


# --- against a real KATalogus (OpenKAT's own, run from its source) or the stand-in ---


def real_katalogus_url() -> str:
    url = os.environ.get("BATON_TEST_KATALOGUS_URL")
    if not url:
        pytest.skip(
            "BATON_TEST_KATALOGUS_URL is not set (a KATalogus run from OpenKAT's boefjes/, BOEFJES_DEDUPLICATE=true)"
        )
    return url.rstrip("/")


@contextmanager
def katalogus_standin_server() -> Iterator[str]:
    standin = KatalogusStandin()
    # Two of KATalogus' own plugins the tests use, as the real one lists them.
    standin.add_boefje(
        "dns-records",
        ["Hostname"],
        name="DNS records",
        oci_image="ghcr.io/minvws/openkat/generic:latest",
        oci_arguments=["kat_dns.main"],
    )
    standin.add_normalizer("kat_adr_finding_types_normalize", ["boefje/adr-finding-types"], produces=["ADRFindingType"])
    with StandinServer(standin.app) as server:
        yield server.url


@pytest.fixture(params=["standin", "real"])
def katalogus_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "real":
        yield real_katalogus_url()
        return
    with katalogus_standin_server() as url:
        yield url


def test_katalogus_api_drives_what_the_client_reads(katalogus_url: str) -> None:
    """Organisations and plugins changed through KATalogus' own API, read back by Baton's client."""
    suffix = uuid.uuid4().hex[:8]
    organisation, twin, boefje = f"baton-{suffix}", f"baton-twin-{suffix}", f"baton-probe-{suffix}"
    client = KatalogusClient(http("katalogus", katalogus_url))
    api = httpx.Client(base_url=katalogus_url, timeout=10)
    try:
        assert api.post("/v1/organisations", json={"id": organisation, "name": "Baton"}).status_code == 405
        created = api.post("/v1/organisations/", json={"id": organisation, "name": "Baton test"})
        assert (created.status_code, created.json()) == (201, None)
        assert api.post("/v1/organisations/", json={"id": organisation, "name": "Again"}).status_code == 400
        assert client.organisations()[organisation].name == "Baton test"

        dns = client.plugin(organisation, "dns-records")
        assert dns is not None and (dns.type, dns.enabled, dns.version) == ("boefje", False, None)
        assert (dns.oci_image, dns.oci_arguments, dns.consumes) == (
            "ghcr.io/minvws/openkat/generic:latest",
            ["kat_dns.main"],
            ["Hostname"],
        )
        enable = api.patch(f"/v1/organisations/{organisation}/plugins/dns-records", json={"enabled": True})
        assert enable.status_code == 204
        enabled = client.plugins(organisation, plugin_type="boefje", enabled=True)
        assert "dns-records" in [plugin.id for plugin in enabled]
        assert client.plugin(organisation, "dns-records").enabled is True  # type: ignore[union-attr]
        [config] = client.boefje_configs(organisation, "dns-records")
        assert (config.organisation_id, config.enabled) == (organisation, True)
        # A second organisation with the same (empty) settings of the boefje: a duplicate of the first.
        assert api.post("/v1/organisations/", json={"id": twin, "name": "Twin"}).status_code == 201
        api.patch(f"/v1/organisations/{twin}/plugins/dns-records", json={"enabled": True})
        [config] = client.boefje_configs(organisation, "dns-records")
        assert twin in [duplicate.organisation_id for duplicate in config.duplicates]
        api.patch(f"/v1/organisations/{organisation}/plugins/dns-records", json={"enabled": False})
        assert client.plugin(organisation, "dns-records").enabled is False  # type: ignore[union-attr]
        assert api.patch("/v1/organisations/no-such-org/plugins/dns-records", json={"enabled": True}).status_code == 404

        # A boefje added through the API, then a new version of it: the client reads image and version.
        new = {"id": boefje, "name": f"Probe {suffix}", "type": "boefje", "consumes": ["Hostname"], "scan_level": 2}
        new |= {"version": "1.0", "oci_image": f"ghcr.io/example/probe:1.0-{suffix}", "interval": 60}
        assert api.post(f"/v1/organisations/{organisation}/plugins", json=new).status_code == 201
        probe = client.plugin(organisation, boefje)
        assert probe is not None
        assert (probe.version, probe.oci_image, probe.scan_level, probe.interval) == ("1.0", new["oci_image"], 2, 60)
        update = {"version": "1.1", "oci_image": f"ghcr.io/example/probe:1.1-{suffix}"}
        assert api.patch(f"/v1/organisations/{organisation}/boefjes/{boefje}", json=update).status_code == 204
        probe = client.plugin(organisation, boefje)
        assert probe is not None and (probe.version, probe.oci_image) == ("1.1", update["oci_image"])
        assert api.patch(f"/v1/organisations/{organisation}/boefjes/dns-records", json=update).status_code == 403
    finally:
        api.delete(f"/v1/organisations/{organisation}")
        api.delete(f"/v1/organisations/{twin}")
        api.close()
    assert organisation not in client.organisations()
    assert client.organisation(organisation) is None
