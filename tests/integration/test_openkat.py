"""OpenKAT drop-in, as OpenKAT's runners and web UI use Baton: every answer and every task Baton's
schedulers make is validated against models of OpenKAT's clients (tests/openkat_models.py), with
their strictness. On both backends."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from baton.core.jobs import BoefjeJob, NormalizerJob, ReportJob, job_hash, murmur_hex
from baton.core.model import utcnow
from baton.core.settings import Settings
from baton.ingest.catalogue.plugins_file import PluginSpec
from baton.ingest.events import InProcessSource, parse_event
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.planners.normalizer import NormalizerScheduler
from baton.ingest.planners.report import ReportScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.storage.engine import Store
from baton.storage.scheduling.plugins import seed_plugins
from harness.servers import api_replicas
from tests.openkat_models import (
    PaginatedSchedulesResponse,
    PaginatedTasksResponse,
    RockyTask,
    ScheduleResponse,
    ServiceHealth,
    TaskPop,
    runner_task,
    stats_document,
)

PLUGINS = [
    PluginSpec(
        id="dns-records",
        type="boefje",
        name="DNS records",
        consumes=["Hostname"],
        scan_level=1,
        version="1.2",
        oci_image="ghcr.io/minvws/openkat/dns:1.2",
    ),
    PluginSpec(id="kat_dns_normalize", type="normalizer", name="DNS normalizer", consumes=["boefje/dns-records"]),
]


def octopoes_mutation(org: str, reference: str, level: int, operation: str = "create") -> dict[str, Any]:
    """A scan-profile mutation as Octopoes publishes it on `scan_profile_mutations`."""
    return {
        "operation": operation,
        "primary_key": reference,
        "value": {
            "primary_key": reference,
            "object_type": reference.split("|")[0],
            "scan_profile": {"scan_profile_type": "declared", "reference": reference, "level": level, "user_id": 3},
        },
        "client_id": org,
    }


def bytes_raw_file(org: str, boefje_job_id: str, mime: str = "boefje/dns-records") -> dict[str, Any]:
    """A raw file as Bytes publishes it on `raw_file_received`."""
    return {
        "event_id": "raw_file_received",
        "created_at": "2026-01-01T10:00:02Z",
        "organization": org,
        "raw_data": {
            "id": str(uuid.uuid4()),
            "boefje_meta": {
                "id": boefje_job_id,
                "started_at": "2026-01-01T10:00:00+00:00",
                "ended_at": "2026-01-01T10:00:01+00:00",
                "boefje": {"id": "dns-records", "version": None},
                "input_ooi": "Hostname|internet|example.com",
                "arguments": {"oci_image": "ghcr.io/minvws/openkat/dns:1.2"},
                "organization": org,
                "runnable_hash": None,
                "environment": {},
            },
            "mime_types": [{"value": mime}, {"value": "openkat/dns"}],
            "secure_hash": "sha512:abc",
            "signing_provider_url": None,
            "hash_retrieval_link": None,
        },
    }


@pytest.fixture
def kat(client: TestClient, store: Store) -> TestClient:
    with store.session() as session:
        seed_plugins(session, [spec.model_dump() for spec in PLUGINS])
    for org in ("acme", "beta"):
        client.post("/organisations", json={"id": org, "name": org}).raise_for_status()
    return client


def scheduler_for(
    kind: type[Any],
    org: str,
    store: Store,
    source: InProcessSource | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> Any:
    from baton.core.model import SchedulerSpec

    settings = Settings(database_url=store.url)
    context = SchedulerContext(store, settings, "test", "here", source_factory=lambda spec: source, clock=clock)
    scheduler = kind(SchedulerSpec(org, kind.type), context)
    scheduler.setup()
    return scheduler


def ingest(store: Store, kind: type[Any], org: str, *events: dict[str, Any]) -> None:
    source = InProcessSource()
    for event in events:
        source.put(event)
    scheduler = scheduler_for(kind, org, store, source)
    scheduler.tick()
    scheduler.teardown()
    assert source.rejected == [], source.rejected


def pop(client: TestClient, scheduler: str, **params: Any) -> list[dict[str, Any]]:
    response = client.post(f"/schedulers/{scheduler}/pop", params=params)
    assert response.status_code == 200, response.text
    if scheduler.startswith(("boefje", "normalizer")):  # what boefjes' runners pop (rocky pops reports)
        TaskPop.model_validate(response.json())
    return list(response.json()["results"])


def test_hashes_are_openkats_byte_for_byte() -> None:
    # Values computed with the `mmh3` package (OpenKAT's scheduler uses mmh3.hash_bytes).
    assert murmur_hex("Hostname|internet|example.com-dns-records-myorg") == "df8085d08849fbd5c5507fb25f50d116"
    assert murmur_hex("dns-records-myorg") == "654e8f8c41e25eaa19334e0b8fe5bd58"
    assert murmur_hex("Hostname|internet|exämple.com-dns-records-org1") == "690ffc72c833cd364160c780979cf00b"
    boefje = BoefjeJob.model_validate(
        {"boefje": {"id": "dns-records"}, "input_ooi": "Hostname|internet|example.com", "organization": "myorg"}
    )
    assert job_hash(boefje) == "df8085d08849fbd5c5507fb25f50d116"
    assert job_hash(boefje.model_copy(update={"input_ooi": None})) == "654e8f8c41e25eaa19334e0b8fe5bd58"
    normalizer = NormalizerJob.model_validate(
        {
            "normalizer": {"id": "kat_nmap_normalize"},
            "raw_data": {
                "id": str(uuid.uuid4()),
                "mime_types": [],
                "boefje_meta": {
                    "id": "00000000-0000-0000-0000-000000000001",
                    "boefje": {"id": "nmap"},
                    "organization": "org1",
                },
            },
        }
    )
    assert job_hash(normalizer) == "41ccfd58da0a8f3011b1da53e169f852"
    report = ReportJob(organisation_id="org1", report_recipe_id="recipe-uuid")
    assert job_hash(report) == "cc4b5164a313fe01e382b9acccda0962"


def test_a_runner_executes_the_boefje_jobs_baton_makes_from_octopoes_events(kat: TestClient, store: Store) -> None:
    ingest(store, BoefjeScheduler, "acme", octopoes_mutation("acme", "Hostname|internet|example.com", 2))
    [answer] = pop(kat, "boefje")
    task = runner_task(answer)
    assert task.scheduler_id == "boefje" and task.organisation == "acme" and task.type == "boefje"
    meta = task.data
    assert meta.id == task.id, "a boefje job's id is its task's id"
    assert meta.boefje.id == "dns-records" and meta.boefje.oci_image == "ghcr.io/minvws/openkat/dns:1.2"
    assert meta.input_ooi == "Hostname|internet|example.com" and meta.organization == "acme"
    assert answer["hash"] == murmur_hex("Hostname|internet|example.com-dns-records-acme")
    assert kat.patch(f"/tasks/{task.id}", json={"status": "running"}).status_code == 200
    running = kat.get(f"/tasks/{task.id}").json()
    assert runner_task(running).status == "running"
    assert kat.patch(f"/tasks/{task.id}", json={"status": "completed"}).json()["status"] == "completed"


def test_a_runner_executes_the_normalizer_jobs_baton_makes_from_bytes_events(kat: TestClient, store: Store) -> None:
    boefje_job_id = str(uuid.uuid4())
    ingest(store, NormalizerScheduler, "acme", bytes_raw_file("acme", boefje_job_id))
    [answer] = pop(kat, "normalizer")
    task = runner_task(answer)
    meta = task.data
    assert meta.id == task.id and str(meta.raw_data.boefje_meta.id) == boefje_job_id
    assert meta.raw_data.mime_types[0] == {"value": "boefje/dns-records"}
    assert meta.normalizer.id == "kat_dns_normalize"
    RockyTask.model_validate(answer)  # the web UI shows it too (it needs `arguments` and `ended_at`)
    assert answer["hash"] == murmur_hex(f"kat_dns_normalize-{boefje_job_id}-acme")


def test_tasks_from_baton_shaped_events_are_openkat_jobs_too(kat: TestClient, store: Store) -> None:
    ingest(
        store,
        BoefjeScheduler,
        "beta",
        {
            "type": "scan_profile_mutation",
            "object": {"primary_key": "Hostname|x", "object_type": "Hostname", "scan_level": 1},
        },
    )
    ingest(
        store,
        NormalizerScheduler,
        "beta",
        {"type": "raw_file_received", "raw_file": {"id": "r1", "mime_types": ["boefje/dns-records"]}},
    )
    for answer in pop(kat, "boefje") + pop(kat, "normalizer"):
        runner_task(answer)
        RockyTask.model_validate(answer)
        if answer["type"] == "normalizer":
            # rocky's normalizer list looks every boefje up in its catalogue, except `manual`
            assert answer["data"]["raw_data"]["boefje_meta"]["boefje"]["id"] == "manual"


def test_delete_mutations_and_error_files_make_no_tasks(kat: TestClient, store: Store) -> None:
    deleted = {**octopoes_mutation("acme", "Hostname|internet|gone", 2, "delete"), "value": None}
    ingest(store, BoefjeScheduler, "acme", deleted)
    ingest(store, NormalizerScheduler, "acme", bytes_raw_file("acme", str(uuid.uuid4()), mime="error/boefje"))
    assert pop(kat, "boefje") == [] and pop(kat, "normalizer") == []


def push_raw(client: TestClient, scheduler: str, body: dict[str, Any]) -> httpx.Response:
    """As boefjes' client pushes: `content=task.model_dump_json()`, no Content-Type header."""
    return client.post(f"/schedulers/{scheduler}/push", content=json.dumps(body).encode())


def rocky_boefje_push(org: str, ooi: str) -> dict[str, Any]:
    """A manual boefje run as rocky pushes it."""
    return {
        "scheduler_id": "boefje",
        "organisation": org,
        "priority": 1,
        "data": {
            "type": "boefje",
            "id": None,
            "boefje": {"id": "dns-records", "name": "DNS records", "version": None, "oci_image": None},
            "input_ooi": ooi,
            "organization": org,
            "deduplication_key": None,
        },
    }


def test_push_without_content_type_then_a_duplicate_answers_as_openkat(kat: TestClient) -> None:
    first = push_raw(kat, "boefje", rocky_boefje_push("acme", "Hostname|a"))
    assert first.status_code == 201, first.text
    task = runner_task(first.json())
    assert task.data.id == task.id, "a fresh id for the task and its job"
    assert first.json()["hash"] == murmur_hex("Hostname|a-dns-records-acme")
    again = push_raw(kat, "boefje", rocky_boefje_push("acme", "Hostname|a"))
    assert again.status_code == 409 and again.headers["retry-after"] == "60"
    assert again.json()["detail"] == "Conflict error occurred: queue is not allowed to push items"
    other = push_raw(kat, "boefje", rocky_boefje_push("acme", "Hostname|b"))
    assert other.status_code == 201


def test_a_runner_hands_its_tasks_back_on_shutdown(kat: TestClient) -> None:
    assert push_raw(kat, "boefje", rocky_boefje_push("acme", "Hostname|a")).status_code == 201
    [popped] = pop(kat, "boefje")
    assert popped["status"] == "dispatched"
    # The worker manager pushes each unfinished task back to /schedulers/{task.scheduler_id}/push.
    assert popped["scheduler_id"] in ("boefje", "normalizer"), "OpenKAT's client refuses any other id"
    handed_back = push_raw(kat, popped["scheduler_id"], popped)
    assert handed_back.status_code == 201, handed_back.text
    assert handed_back.json()["id"] == popped["id"] and handed_back.json()["status"] == "queued"
    [again] = pop(kat, "boefje")
    assert again["id"] == popped["id"]


def test_malformed_items_answer_400(kat: TestClient) -> None:
    response = push_raw(kat, "boefje", {"organisation": "acme", "data": {"input_ooi": "x"}})
    assert response.status_code == 400 and "malformed item" in response.json()["message"]
    assert "boefje" in response.json()["message"]
    response = push_raw(kat, "report", {"organisation": "acme", "data": {"report_recipe_id": "r"}})
    assert response.status_code == 400 and "organisation_id" in response.json()["message"]


def test_the_web_ui_lists_filters_and_counts_tasks(kat: TestClient, store: Store) -> None:
    for ooi in ("Hostname|a", "Hostname|b", "Hostname|c"):
        push_raw(kat, "boefje", rocky_boefje_push("acme", ooi)).raise_for_status()
    push_raw(kat, "boefje", rocky_boefje_push("beta", "Hostname|z")).raise_for_status()
    pop(kat, "boefje-beta")
    today = datetime.now(UTC).date().isoformat()
    listing = kat.post(
        "/tasks",
        params={"scheduler_id": "boefje", "task_type": "boefje", "limit": 2, "min_created_at": today},
        json={"filters": [{"column": "organisation", "operator": "==", "value": "acme"}]},
    )
    page = PaginatedTasksResponse.model_validate(listing.json())
    assert page.count == 3 and len(page.results) == 2
    assert page.next is not None and "offset=2" in page.next and page.previous is None
    assert PaginatedTasksResponse.model_validate(kat.get(page.next).json()).results  # the next page
    counted = kat.post("/tasks", params={"limit": 0}).json()
    assert counted["count"] == 4 and counted["results"] == []
    by_object = kat.get("/tasks", params={"input_ooi": "Hostname|b"}).json()
    assert [task["data"]["input_ooi"] for task in by_object["results"]] == ["Hostname|b"]
    by_plugin = kat.get("/tasks", params={"plugin_id": "dns-records", "ooi_id": "ignored"}).json()
    assert by_plugin["count"] == 4
    stats = stats_document(kat.get("/tasks/stats", params={"scheduler_id": "boefje"}).json())
    [hour] = stats.values()
    assert hour["queued"] == 3 and hour["dispatched"] == 1 and hour["total"] == 4 and hour["pending"] == 0
    per_org = stats_document(
        kat.get("/tasks/stats", params={"scheduler_id": "boefje", "organisation_id": "beta"}).json()
    )
    assert next(iter(per_org.values()))["total"] == 1
    reversed_range = kat.get("/tasks", params={"min_created_at": "2030-01-02", "max_created_at": "2030-01-01"})
    assert reversed_range.status_code == 400


def test_task_lists_ignore_the_query_parameters_of_the_web_uis_own_pages(kat: TestClient) -> None:
    # rocky passes every query parameter of its task list page on to /tasks (page 2: `page=2`), and
    # offers `pending` as a status filter.
    push_raw(kat, "boefje", rocky_boefje_push("acme", "Hostname|a")).raise_for_status()
    page_two = kat.post("/tasks", params={"scheduler_id": "boefje", "page": 2, "sort": "asc", "limit": 150})
    assert page_two.status_code == 200, page_two.text
    assert PaginatedTasksResponse.model_validate(page_two.json()).count == 1
    pending = kat.get("/tasks", params={"status": "pending", "page": 1})
    assert pending.status_code == 200 and pending.json()["count"] == 0
    assert kat.get("/tasks", params={"status": "bogus"}).status_code == 422
    assert kat.get("/queues", params={"page": 2}).status_code == 422  # elsewhere a misspelt parameter is refused


def test_the_web_uis_health_page_reads_baton_as_a_healthy_scheduler(kat: TestClient) -> None:
    health = ServiceHealth.model_validate(kat.get("/health").json())
    assert health.service == "scheduler" and health.healthy


def report_schedule(org: str, recipe: str, **when: Any) -> dict[str, Any]:
    """A report schedule as rocky posts it."""
    return {
        "scheduler_id": "report",
        "organisation": org,
        "data": {"type": "report", "organisation_id": org, "report_recipe_id": recipe},
        **when,
    }


def test_the_web_ui_schedules_reports_and_the_report_scheduler_runs_them(kat: TestClient, store: Store) -> None:
    created = kat.post("/schedules", json=report_schedule("acme", "weekly", schedule="0 6 * * 1"))
    assert created.status_code == 201, created.text
    schedule = ScheduleResponse.model_validate(created.json())
    assert schedule.hash == murmur_hex("weekly-acme") and schedule.deadline_at is not None
    duplicate = kat.post("/schedules", json=report_schedule("acme", "weekly", schedule="0 7 * * 1"))
    assert duplicate.status_code == 409 and duplicate.headers["retry-after"] == "60"
    assert kat.post("/schedules", json=report_schedule("acme", "x")).status_code == 400  # neither cron nor deadline
    assert kat.post("/schedules", json=report_schedule("acme", "x", schedule="every day")).status_code == 400
    one_off = kat.post(
        "/schedules", json=report_schedule("acme", "now", deadline_at=datetime.now(UTC).date().isoformat())
    )
    assert one_off.status_code == 201, one_off.text
    search = kat.post(
        "/schedules/search",
        json={
            "filters": [
                {"column": "scheduler_id", "operator": "eq", "value": "report"},
                {"column": "organisation", "operator": "eq", "value": "acme"},
            ]
        },
    )
    assert PaginatedSchedulesResponse.model_validate(search.json()).count == 2
    listing = PaginatedSchedulesResponse.model_validate(kat.get("/schedules", params={"organisation": "acme"}).json())
    assert listing.count == 2
    assert kat.patch(f"/schedules/{schedule.id}", json={"enabled": False}).json()["enabled"] is False
    assert kat.patch(f"/schedules/{schedule.id}", json={}).status_code == 400
    # The one-off schedule is due: the report scheduler makes its task, a report job rocky reads.
    scheduler = scheduler_for(ReportScheduler, "acme", store, clock=lambda: datetime.now(UTC) + timedelta(days=1))
    assert scheduler.tick() == 1
    [answer] = pop(kat, "report")
    task = RockyTask.model_validate(answer)
    assert task.data.report_recipe_id == "now" and answer["schedule_id"] == one_off.json()["id"]  # type: ignore[union-attr]
    assert kat.get(f"/schedules/{one_off.json()['id']}").json()["deadline_at"] is None  # one-off: done
    assert kat.delete(f"/schedules/{schedule.id}").status_code == 204
    assert kat.delete(f"/schedules/{schedule.id}").status_code == 204  # as OpenKAT answers


def test_a_cron_boefje_schedule_queues_boefje_jobs_a_runner_executes(kat: TestClient, store: Store) -> None:
    job = rocky_boefje_push("acme", "Hostname|internet|example.com")["data"]  # rocky's BoefjeTask dump
    created = kat.post(
        "/schedules",
        json={"scheduler_id": "boefje", "organisation": "acme", "data": job, "schedule": "*/5 * * * *"},
    )
    assert created.status_code == 201, created.text
    schedule = ScheduleResponse.model_validate(created.json())
    assert schedule.hash == murmur_hex("Hostname|internet|example.com-dns-records-acme")
    scheduler = scheduler_for(BoefjeScheduler, "acme", store, clock=lambda: datetime.now(UTC) + timedelta(minutes=6))
    assert scheduler.tick() == 1
    [answer] = pop(kat, "boefje")
    task = runner_task(answer)
    assert task.data.id == task.id and answer["schedule_id"] == str(schedule.id)
    assert answer["hash"] == schedule.hash
    RockyTask.model_validate(answer)
    after = ScheduleResponse.model_validate(kat.get(f"/schedules/{schedule.id}").json())
    assert after.deadline_at is not None and schedule.deadline_at is not None
    assert after.deadline_at > schedule.deadline_at  # the next run


def test_an_unknown_organisation_appears_with_its_first_openkat_push(kat: TestClient) -> None:
    response = push_raw(kat, "boefje", rocky_boefje_push("newcomer", "Hostname|n"))
    assert response.status_code == 201, response.text
    assert kat.get("/organisations/newcomer").status_code == 200


@pytest.mark.parametrize("org", ["één", "_test", "-x"])
def test_openkats_organisation_codes_are_accepted_wherever_openkat_names_one(
    kat: TestClient, store: Store, org: str
) -> None:
    # rocky's organisation codes are lower-case Unicode slugs; `-` and `_` may lead.
    pushed = push_raw(kat, "boefje", rocky_boefje_push(org, "Hostname|internet|example.com"))
    assert pushed.status_code == 201, pushed.text
    assert runner_task(pushed.json()).organisation == org
    ingest(store, NormalizerScheduler, org, bytes_raw_file(org, str(uuid.uuid4())))
    [normalizer] = pop(kat, "normalizer")
    assert normalizer["organisation"] == org and normalizer["queue"] == f"normalizer-{org}"
    created = kat.post("/schedules", json=report_schedule(org, "weekly", schedule="0 6 * * 1"))
    assert created.status_code == 201, created.text
    listed = kat.post("/tasks", json={"filters": [{"column": "organisation", "operator": "==", "value": org}]})
    assert listed.json()["count"] == 2


def test_names_that_are_no_organisation_code_are_refused(kat: TestClient) -> None:
    for org in ("a/b", "a b", ".hidden", "x" * 65):
        assert push_raw(kat, "boefje", rocky_boefje_push(org, "Hostname|a")).status_code == 422
        assert kat.post("/schedules", json=report_schedule(org, "r", schedule="0 6 * * 1")).status_code == 422
        with pytest.raises(ValidationError):
            parse_event(octopoes_mutation(org, "Hostname|a", 1))


@pytest.fixture
def two_api_replicas(pg_store: Store) -> Iterator[list[str]]:
    with api_replicas(pg_store.url, 2) as urls:
        yield urls


def test_concurrent_limit_pops_across_two_api_replicas_never_overlap(two_api_replicas: list[str]) -> None:
    first = httpx.Client(base_url=two_api_replicas[0])
    for org in ("acme", "beta"):
        first.post("/organisations", json={"id": org, "name": org}).raise_for_status()
    expected = set()
    for n in range(300):
        pushed = first.post("/schedulers/boefje/push", json=rocky_boefje_push("acme" if n % 2 else "beta", f"obj{n}"))
        pushed.raise_for_status()
        expected.add(pushed.json()["id"])
    popped: list[list[str]] = [[] for _ in range(8)]

    def work(index: int) -> None:
        with httpx.Client(base_url=two_api_replicas[index % 2], timeout=30) as http:
            while batch := http.post("/schedulers/boefje/pop", params={"limit": 5}).json()["results"]:
                popped[index].extend(task["id"] for task in batch)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [task_id for ids in popped for task_id in ids]
    assert len(flat) == len(set(flat)), "a task was handed out twice"
    assert set(flat) == expected
    assert sum(1 for ids in popped if ids) > 1


def test_bad_filter_answers_422_naming_it(kat: TestClient) -> None:
    response = kat.post("/schedulers/boefje/pop", json={"filters": [{"column": "nope", "operator": "eq", "value": 1}]})
    assert response.status_code == 422 and "nope" in response.json()["message"]


def test_a_job_pushed_through_baton_s_own_dialect_is_stored_as_runners_read_it(kat: TestClient) -> None:
    job = rocky_boefje_push("acme", "Hostname|internet|a.example")["data"]
    created = kat.post("/queues/boefje-acme/push", json={"priority": 3, "data": job})
    assert created.status_code == 201, created.text
    task = created.json()
    assert task["data"]["id"] == task["id"]  # OpenKAT's runners report by data.id
    assert task["hash"] == job_hash(BoefjeJob.model_validate(job))
    [popped] = pop(kat, "boefje")
    assert popped["id"] == task["id"] and popped["data"]["boefje"]["id"] == "dns-records"
    other = kat.post("/queues/boefje-acme/push", json={"priority": 3, "data": {"anything": 1}}).json()
    assert other["data"] == {"anything": 1} and other["hash"] is None  # not a job: stored as sent
