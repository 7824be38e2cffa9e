"""Events, plugins and report schedules over HTTP."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_events_are_validated_and_routed(client: TestClient) -> None:
    client.post("/organisations", json={"id": "acme", "name": "Acme"})
    accepted = client.post(
        "/organisations/acme/events",
        json={"type": "raw_file_received", "raw_file": {"id": "r", "mime_types": ["text/html"]}},
    )
    assert accepted.status_code == 202 and accepted.json()["scheduler_id"] == "normalizer-acme"
    accepted = client.post(
        "/organisations/acme/events",
        json={
            "type": "scan_profile_mutation",
            "object": {"primary_key": "k", "object_type": "Hostname", "scan_level": 1},
        },
    )
    assert accepted.json()["scheduler_id"] == "boefje-acme"
    bad_level = client.post(
        "/organisations/acme/events",
        json={
            "type": "scan_profile_mutation",
            "object": {"primary_key": "k", "object_type": "Hostname", "scan_level": 9},
        },
    )
    assert bad_level.status_code == 422 and "scan_level" in bad_level.json()["message"]
    unknown_type = client.post("/organisations/acme/events", json={"type": "nope"})
    assert unknown_type.status_code == 422
    missing = client.post(
        "/organisations/ghost/events",
        json={"type": "raw_file_received", "raw_file": {"id": "r", "mime_types": ["x"]}},
    )
    assert missing.status_code == 404 and "ghost" in missing.json()["message"]


def test_plugins_crud_and_organisation_enablement(client: TestClient) -> None:
    client.post("/organisations", json={"id": "acme", "name": "Acme"})
    spec = {"id": "whois", "type": "boefje", "name": "Whois", "consumes": ["Hostname"], "scan_level": 1}
    assert client.post("/plugins", json=spec).status_code == 201
    assert client.post("/plugins", json=spec).status_code == 409
    assert client.get("/plugins/whois").json()["name"] == "Whois"
    assert client.get("/plugins/ghost").status_code == 404
    patched = client.patch("/plugins/whois", json={"enabled": False, "scan_level": 2})
    assert patched.json()["enabled"] is False and patched.json()["scan_level"] == 2
    assert [p["id"] for p in client.get("/plugins", params={"type": "boefje"}).json()] == ["whois"]
    assert client.put("/organisations/acme/plugins/whois", json={"enabled": True}).status_code == 200
    listing = {p["id"]: p["enabled_here"] for p in client.get("/organisations/acme/plugins").json()}
    assert listing == {"whois": True}
    assert client.put("/organisations/acme/plugins/ghost", json={"enabled": True}).status_code == 404
    bad = client.post("/plugins", json={**spec, "id": "x", "type": "scanner"})
    assert bad.status_code == 422 and "type" in bad.json()["message"]


def test_report_schedules(client: TestClient) -> None:
    client.post("/organisations", json={"id": "acme", "name": "Acme"})
    created = client.post("/organisations/acme/report-schedules", json={"cron": "0 6 * * 1", "data": {"r": 1}})
    assert created.status_code == 201 and created.json()["next_run_at"].endswith("06:00:00Z")
    bad = client.post("/organisations/acme/report-schedules", json={"cron": "every monday"})
    assert bad.status_code == 422 and "cron" in bad.json()["message"]
    assert len(client.get("/organisations/acme/report-schedules").json()) == 1
    schedule_id = created.json()["id"]
    assert client.delete(f"/organisations/acme/report-schedules/{schedule_id}").status_code == 204
    assert client.delete(f"/organisations/acme/report-schedules/{schedule_id}").status_code == 404
