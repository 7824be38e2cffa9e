"""Reading KATalogus', Octopoes' and Bytes' answers (samples as the real services sent them), and the
outage tracker's log lines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs

from baton.core.errors import InvalidInputError
from baton.core.outages import service_outages
from baton.openkat.katalogus import ORGANISATIONS, PLUGINS
from baton.openkat.models import BoefjeConfig, BoefjeMeta, ObjectPage, Plugin
from baton.openkat.octopoes import BY_REFERENCE, valid_time_param

# GET /v1/organisations/acme/plugins from KATalogus run from nl-kat-coordination's boefjes/ (cae5e263).
KATALOGUS_PLUGINS = """[
 {"id":"dns-records","name":"DNS records","version":null,"created":null,
  "description":"Fetch the DNS record(s) of a hostname.","enabled":false,"static":true,"type":"boefje",
  "scan_level":1,"consumes":["Hostname"],"produces":["boefje/dns-records"],
  "boefje_schema":{"title":"Arguments","type":"object","properties":{}},"cron":null,"interval":null,
  "run_on":null,"runnable_hash":"f8f5647a36dae4cd590d6ba89b56d13f5c2974714245c76274f3ec7a402effb6",
  "oci_image":"ghcr.io/minvws/openkat/generic:latest","oci_arguments":["kat_dns.main"],"deduplicate":true},
 {"id":"kat_adr_finding_types_normalize","name":"API Design Rules (ADR) Finding Types","version":null,
  "created":null,"description":"Parse API Design Rules (ADR) finding types.","enabled":true,"static":true,
  "type":"normalizer","consumes":["boefje/adr-finding-types","normalizer/kat_adr_finding_types_normalize"],
  "produces":["ADRFindingType"]}
]"""

# POST /{client}/objects/load_bulk: by primary key, the object's own fields too; a null scan profile.
OCTOPOES_LOAD_BULK = """{
 "Hostname|internet|example.com": {"object_type":"Hostname","scan_profile":{"scan_profile_type":"declared",
   "reference":"Hostname|internet|example.com","level":2,"user_id":null},"user_id":null,
   "primary_key":"Hostname|internet|example.com","network":"Network|internet","name":"example.com",
   "dns_zone":null,"registered_domain":null},
 "Network|internet": {"object_type":"Network","scan_profile":null,"user_id":null,
   "primary_key":"Network|internet","name":"internet"}
}"""

BYTES_RUN = {
    "id": "0b7d3f5e-0d50-4f9a-9a4b-2d8f4c3e1a10",
    "started_at": "2025-11-14T10:00:00+00:00",
    "ended_at": "2025-11-14T10:00:05+00:00",
    "boefje": {"id": "dns-records", "version": None},
    "input_ooi": "Hostname|internet|example.com",
    "arguments": {"domain": "example.com"},
    "organization": "acme",
    "runnable_hash": None,
    "environment": None,
}


def test_katalogus_plugins_as_the_real_one_lists_them() -> None:
    boefje, normalizer = PLUGINS.validate_json(KATALOGUS_PLUGINS)
    assert (boefje.id, boefje.type, boefje.enabled, boefje.scan_level, boefje.version) == (
        "dns-records",
        "boefje",
        False,
        1,
        None,
    )
    assert (boefje.oci_image, boefje.oci_arguments) == ("ghcr.io/minvws/openkat/generic:latest", ["kat_dns.main"])
    assert (normalizer.type, normalizer.enabled, normalizer.scan_level) == ("normalizer", True, None)
    assert normalizer.consumes[-1] == "normalizer/kat_adr_finding_types_normalize"


def test_a_plugin_without_id_type_or_enabled_is_refused() -> None:
    for missing in ("id", "type", "enabled"):
        plugin = {"id": "x", "type": "boefje", "enabled": True, "consumes": [], "produces": []}
        del plugin[missing]
        with pytest.raises(ValidationError, match=missing):
            Plugin.model_validate(plugin)


def test_a_bit_consumes_one_type_and_missing_oci_arguments_are_none() -> None:
    bit = Plugin.model_validate({"id": "b", "type": "bit", "enabled": True, "consumes": "Hostname", "produces": []})
    assert bit.consumes == ["Hostname"]
    boefje = Plugin.model_validate({"id": "x", "type": "boefje", "enabled": True, "oci_arguments": None})
    assert (boefje.consumes, boefje.produces, boefje.oci_arguments) == ([], [], [])


def test_organisations_listing_is_a_dict() -> None:
    organisations = ORGANISATIONS.validate_json('{"acme": {"id": "acme", "name": "Acme", "deduplicate": true}}')
    assert organisations["acme"].name == "Acme"
    with pytest.raises(ValidationError):
        ORGANISATIONS.validate_json('[{"id": "acme", "name": "Acme"}]')


def test_boefje_config_with_duplicates() -> None:
    config = BoefjeConfig.model_validate(
        {
            "id": 1,
            "settings": {"KEY": "v"},
            "enabled": True,
            "boefje_id": "shodan",
            "organisation_id": "acme",
            "duplicates": [
                {"id": 2, "settings": {"KEY": "v"}, "enabled": True, "boefje_id": "shodan", "organisation_id": "beta"}
            ],
        }
    )
    assert [twin.organisation_id for twin in config.duplicates] == ["beta"]


def test_octopoes_objects_with_and_without_a_scan_profile() -> None:
    objects = BY_REFERENCE.validate_json(OCTOPOES_LOAD_BULK)
    assert objects["Hostname|internet|example.com"].scan_level == 2
    assert objects["Network|internet"].scan_profile is None
    assert objects["Network|internet"].scan_level == 0
    page = ObjectPage.model_validate({"count": 2, "items": list(objects.values())})
    assert [item.object_type for item in page.items] == ["Hostname", "Network"]


def test_bytes_runs_as_mula_reads_them() -> None:
    run = BoefjeMeta.model_validate(BYTES_RUN)
    assert run.started_at == datetime(2025, 11, 14, 10, tzinfo=UTC)
    assert run.ended_at is not None and run.ended_at - run.started_at == timedelta(seconds=5)
    for required in ("id", "boefje", "input_ooi", "organization", "started_at", "ended_at"):
        incomplete = {key: value for key, value in BYTES_RUN.items() if key != required}
        with pytest.raises(ValidationError, match=required):
            BoefjeMeta.model_validate(incomplete)


def test_valid_time_must_carry_its_timezone() -> None:
    amsterdam = timezone(timedelta(hours=1))
    assert valid_time_param(datetime(2025, 11, 14, 11, tzinfo=amsterdam)) == "2025-11-14T11:00:00+01:00"
    assert valid_time_param(None).endswith("+00:00")
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        valid_time_param(datetime(2025, 11, 14, 11))


def test_an_outage_is_logged_when_it_starts_and_when_it_ends_only() -> None:
    tracker = service_outages("octopoes", "http://octopoes:80")
    with capture_logs() as logs:  # each call reports as of its end, as the HTTP clients do
        tracker.succeeded(tracker.mark)
        tracker.failed(tracker.mark, "connection refused")
        tracker.failed(tracker.mark, "timed out")
        outage = tracker.current
        tracker.succeeded(tracker.mark)
        tracker.succeeded(tracker.mark)
        tracker.failed(tracker.mark, "answered 500 to GET /acme/objects")
    assert outage is not None and (outage.service, outage.reason) == ("octopoes", "connection refused")
    assert [(line["log_level"], line["event"], line.get("reason")) for line in logs] == [
        ("warning", "outside service failing", "connection refused"),
        ("info", "outside service answering again", None),
        ("warning", "outside service failing", "answered 500 to GET /acme/objects"),
    ]
    assert logs[1]["outage_seconds"] >= 0
    assert tracker.current is not None and tracker.current.reason == "answered 500 to GET /acme/objects"
