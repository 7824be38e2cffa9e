"""The status page's data, actions and authentication, on SQLite and PostgreSQL (in-process app)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pika
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from baton.core.model import SchedulerState, TaskStatus, utcnow
from baton.core.settings import Settings
from baton.runtime import broker_queues, build_app, metrics_for, queue_service_for, status_service_for
from baton.service.status import BrokerProbe, PageRequest, RateSampler, StatusService, TaskFilter
from baton.service.tokens import Scope
from baton.storage.control import scheduler_leases
from baton.storage.control import workers as worker_rows
from baton.storage.control.leadership import report_leadership
from baton.storage.control.scheduler_rows import record_heartbeat
from baton.storage.engine import Store
from baton.storage.queues.status_reads import failed_since
from baton.storage.tables import LeaderRecord, Task
from baton.ui.render import render
from harness.factories import add_organisation, bearer, finish, named_tokens, pop, push


def fail(store: Store, queue: str, count: int = 1, task_hash: str | None = None) -> list[str]:
    ids = []
    for index in range(count):
        task = push(store, queue, data={"n": index}, task_hash=task_hash)
        ids.append(str(task.task["id"]))
    for task in pop(store, queue, limit=count):
        finish(store, task["id"], TaskStatus.FAILED)
    return ids


# -- the shell -------------------------------------------------------------------------------------------


def test_the_page_shell_is_public_holds_no_data_and_loads_nothing_from_elsewhere(client: TestClient) -> None:
    page = client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    # Every address the page loads is this server's own.
    for address in re.findall(r'(?:src|href)="([^"#]+)"', page.text):
        assert address.startswith("/"), address
    script = client.get("/ui/static/baton.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "sessionStorage" in script.text and "document.cookie" not in script.text
    again = client.get("/ui/static/baton.js", headers={"If-None-Match": script.headers["etag"]})
    assert again.status_code == 304
    assert client.get("/ui/static/baton.css").headers["content-type"].startswith("text/css")
    missing = client.get("/ui/static/..%2Fpage.html")
    assert missing.status_code == 404 and missing.json()["message"]


def test_actions_are_documented_in_openapi_and_fragments_are_not(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "post" in paths["/ui/api/tasks/{task_id}/requeue"]
    assert "put" in paths["/ui/api/tasks/{task_id}/priority"]
    for path in ("/ui/api/overview", "/ui/api/schedulers", "/ui/api/control-plane", "/ui/api/tasks"):
        assert "get" in paths[path]
    assert not [path for path in paths if path.startswith("/ui/fragments") or path in ("/ui", "/ui/static/{name}")]


# -- overview --------------------------------------------------------------------------------------------


def test_overview_counts_come_from_the_counters(client: TestClient, store: Store) -> None:
    add_organisation(store, "acme", maxsize=3)
    add_organisation(store, "beta")
    for index in range(3):
        push(store, "boefje-acme", data={"i": index})
    push(store, "normalizer-beta")
    popped = pop(store, "normalizer-beta")
    fail(store, "report-beta", 2)

    overview = client.get("/ui/api/overview").json()
    assert overview["total"] == {
        "name": "all",
        "queued": 3,
        "in_flight": 1,
        "failed_last_hour": 2,
        "oldest_queued_seconds": overview["total"]["oldest_queued_seconds"],
        "full_queues": 1,
        "queues": 6,
    }
    assert overview["total"]["oldest_queued_seconds"] is not None
    by_type = {row["name"]: row for row in overview["by_type"]}
    assert by_type["boefje"]["queued"] == 3 and by_type["boefje"]["full_queues"] == 1
    assert by_type["report"]["failed_last_hour"] == 2 and by_type["report"]["oldest_queued_seconds"] is None
    assert [org["organisation"] for org in overview["organisations"]] == ["acme", "beta"]  # by id
    acme = {queue["type"]: queue for queue in overview["organisations"][0]["queues"]}
    assert acme["boefje"]["full"] and acme["boefje"]["oldest_queued_at"] is not None
    assert not acme["normalizer"]["full"] and acme["normalizer"]["oldest_queued_at"] is None
    assert overview["rates"]["scope"].startswith("this API process")

    estate = overview["estate"]
    assert estate["organisations"] == 2 and estate["schedulers"] == 6 and estate["by_state"] == {"stopped": 6}
    assert estate["queued"] == 3 and estate["in_flight"] == 1 and estate["stale"] == 0

    finish(store, popped[0]["id"])
    first_page = client.get("/ui/api/overview", params={"limit": 1}).json()
    assert [org["organisation"] for org in first_page["organisations"]] == ["acme"]
    assert first_page["previous_cursor"] is None
    second_page = client.get("/ui/api/overview", params={"limit": 1, "after": first_page["next_cursor"]}).json()
    assert [org["organisation"] for org in second_page["organisations"]] == ["beta"]
    assert second_page["organisations_total"] == 2 and second_page["total"]["in_flight"] == 0
    assert second_page["next_cursor"] is None
    back = client.get("/ui/api/overview", params={"limit": 1, "before": second_page["previous_cursor"]}).json()
    assert [org["organisation"] for org in back["organisations"]] == ["acme"] and back["previous_cursor"] is None
    assert [
        org["organisation"] for org in client.get("/ui/api/overview", params={"q": "be"}).json()["organisations"]
    ] == ["beta"]
    refused = client.get("/ui/api/overview", params={"after": "nonsense"})
    assert refused.status_code == 422 and refused.json()["message"].startswith("after: ")

    fragment = client.get("/ui/fragments/overview").text
    assert 'data-queue="boefje-acme"' in fragment and 'data-flag="full"' in fragment


def test_failures_of_the_last_hour_are_a_bounded_read(store: Store) -> None:
    add_organisation(store, "acme")
    fail(store, "boefje-acme", 5)
    with store.session() as session:
        counts, capped = failed_since(session, utcnow() - timedelta(hours=1), cap=3)
        assert counts == {"boefje-acme": 3} and capped
        counts, capped = failed_since(session, utcnow() - timedelta(hours=1))
        assert counts == {"boefje-acme": 5} and not capped
        session.execute(update(Task).values(modified_at=utcnow() - timedelta(hours=2)))
    with store.session() as session:
        assert failed_since(session, utcnow() - timedelta(hours=1)) == ({}, False)


def test_rates_are_sampled_from_this_process_counters(store: Store) -> None:
    metrics = metrics_for(store)
    sampler = RateSampler(metrics, interval=5.0, window=15.0)
    sampler.sample(clock=0.0)
    metrics.pops.labels("boefje-acme").inc(10)
    metrics.pushes.labels("normalizer-acme", "created").inc(4)
    metrics.pushes.labels("normalizer-acme", "deduplicated").inc(1)
    sampler.sample(clock=5.0)
    rates = sampler.rates()
    series = {item.type: item for item in rates.by_type}
    assert series["boefje"].pops == [2.0] and series["normalizer"].pushes == [1.0]
    assert rates.pops_per_second == 2.0 and rates.pushes_per_second == 1.0
    for clock in (10.0, 15.0, 20.0, 25.0):
        sampler.sample(clock=clock)
    assert len(sampler.rates().times) == 3  # the ring keeps the window (15 s / 5 s), no more


# -- schedulers ------------------------------------------------------------------------------------------


def test_a_scheduler_whose_heartbeat_stopped_is_flagged_stale(store: Store) -> None:
    add_organisation(store, "acme")
    now = utcnow()
    with store.session() as session:
        record_heartbeat(session, "boefje-acme", state=SchedulerState.RUNNING, runner="process", location="w1:41")
        record_heartbeat(
            session,
            "normalizer-acme",
            state=SchedulerState.RUNNING,
            runner="kubernetes",
            location="baton-normalizer-acme:7",
            now=now - timedelta(seconds=60),
        )
    settings = Settings(database_url=store.url, heartbeat_timeout_seconds=30)
    with TestClient(build_app(settings, store)) as client:
        page = client.get("/ui/api/schedulers").json()
        assert page["problems"] == 1 and page["estate"]["schedulers"] == 3 and page["estate"]["stale"] == 1
        assert page["estate"]["by_state"] == {"running": 1, "failed": 1, "stopped": 1}
        assert [row["id"] for row in page["schedulers"]] == ["boefje-acme", "normalizer-acme", "report-acme"]
        first = page["schedulers"][1]
        assert first["id"] == "normalizer-acme" and first["stale"] and first["state"] == "failed"
        assert first["reported_state"] == "running" and first["heartbeat_age_seconds"] >= 60
        assert first["pod"] == "baton-normalizer-acme" and first["pid"] == 7
        healthy = next(row for row in page["schedulers"] if row["id"] == "boefje-acme")
        assert not healthy["stale"] and healthy["host"] == "w1" and healthy["pid"] == 41 and healthy["pod"] is None
        only = client.get("/ui/api/schedulers", params={"problems": True}).json()
        assert [row["id"] for row in only["schedulers"]] == ["normalizer-acme"]
        fragment = client.get("/ui/fragments/schedulers").text
        assert re.search(r'<tr data-scheduler="normalizer-acme"[^>]*class="stale"', fragment)


# -- control plane ---------------------------------------------------------------------------------------


def test_control_plane_shows_the_leader_and_says_what_is_absent(client: TestClient, store: Store) -> None:
    with store.session() as session:
        report_leadership(session, "director", "host-a:12", 4, utcnow() + timedelta(seconds=15))
    plane = client.get("/ui/api/control-plane").json()
    assert [(row["role"], row["holder"], row["stale"]) for row in plane["leaders"]] == [
        ("director", "host-a:12", False)
    ]
    assert plane["workers"]["rows"] == []  # no `baton worker` runs
    assert plane["broker"]["configured"] is False and plane["broker"]["error"] == "RabbitMQ not configured"
    assert "RabbitMQ not configured" in client.get("/ui/fragments/control-plane").text
    # The leader rewrites its row every round: one not renewed for longer than the lease is flagged.
    with store.session() as session:
        session.execute(update(LeaderRecord).values(renewed_at=utcnow() - timedelta(seconds=60)))
    assert client.get("/ui/api/control-plane").json()["leaders"][0]["stale"] is True


def status_service(store: Store, **settings: Any) -> StatusService:
    config = Settings(database_url=store.url, **settings)
    metrics = metrics_for(store)
    return status_service_for(config, store, queue_service_for(config, store, None, metrics), metrics)


def test_workers_and_leases_are_shown(store: Store) -> None:
    add_organisation(store, "acme")
    with store.session() as session:
        claims = scheduler_leases.claim_schedulers(session, ["boefje-acme", "normalizer-acme"], "pod-x:1#ab", 15)
        worker_rows.heartbeat_worker(session, "pod-x:1#ab", 15)
    assert len(claims) == 2
    status = status_service(store)
    plane = status.control_plane(None)
    assert plane.workers is not None and [row["id"] for row in plane.workers.rows] == ["pod-x:1#ab"]
    assert [(owner.owner, owner.schedulers) for owner in plane.lease_owners or []] == [(None, 1), ("pod-x:1#ab", 2)]
    page = status.schedulers(PageRequest("schedulers"))
    lease = {row.id: row for row in page.schedulers}
    assert lease["boefje-acme"].owner == "pod-x:1#ab" and lease["boefje-acme"].term == 1
    assert lease["boefje-acme"].lease_expires_in_seconds is not None
    assert 0 < lease["boefje-acme"].lease_expires_in_seconds <= 15
    assert lease["report-acme"].owner is None and lease["report-acme"].lease_expires_at is None
    fragment = render("schedulers.html", view=page, params={})
    assert "Lease holder" in fragment and "lease_expires_at" not in fragment and "expires in " in fragment


def test_rabbitmq_dead_letters_and_consumers(amqp_url: str, store: Store) -> None:
    """Against the test broker, with queues of this test's own (the real dead-letter queue is left alone)."""
    org = f"ui-{uuid.uuid4().hex[:8]}"
    add_organisation(store, org)
    dead_letter, names = broker_queues([org])
    assert dead_letter == "baton.dead-letter"
    assert names == ["baton.organisations", f"{org}__scan_profile_mutations", f"{org}__raw_file_received"]
    dead_letter = f"baton.dead-letter.{org}"
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        channel.queue_declare(dead_letter, durable=True)
        channel.queue_declare(names[1], durable=True)
        channel.basic_publish("", dead_letter, b"{not json")
        probe = BrokerProbe(lambda: pika.BlockingConnection(pika.URLParameters(amqp_url)))
        broker = probe.read(dead_letter, names[1:])
        assert broker.reachable and broker.dead_letters == 1
        found = {queue.name: queue for queue in broker.queues}
        assert found[names[1]].declared and found[names[1]].consumers == 0 and found[names[1]].messages == 0
        assert not found[names[2]].declared
        assert probe.read(dead_letter, names[1:]) is broker  # remembered for a while
        status = status_service(store, amqp_enabled=True)
        status.broker = probe
        html = render("control.html", view=status.control_plane(lambda orgs: (dead_letter, names[1:])))
        assert 'data-broker="on"' in html and '<strong data-field="dead_letters" class="bad">1</strong>' in html
        assert f'data-amqp-queue="{names[2]}"' in html and "not declared" in html
    finally:
        channel = connection.channel()
        channel.queue_delete(dead_letter)
        channel.queue_delete(names[1])
        connection.close()
    unreachable = BrokerProbe(lambda: pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:1/")))
    answer = unreachable.read(dead_letter, names)
    assert not answer.reachable and answer.error


# -- tasks -----------------------------------------------------------------------------------------------


def test_task_pages_are_keyset_pages_without_counts(client: TestClient, store: Store) -> None:
    add_organisation(store, "acme")
    add_organisation(store, "beta")
    ids = [str(push(store, "boefje-acme", data={"i": i}, task_hash=f"h{i}").task["id"]) for i in range(7)]
    push(store, "normalizer-beta", task_hash="h0")
    seen: list[str] = []
    before = None
    while True:
        params: dict[str, Any] = {"organisation": "acme", "limit": 3}
        if before is not None:
            params["before"] = before
        page = client.get("/ui/api/tasks", params=params).json()
        assert "count" not in page and page["known_total"] is None
        seen += [task["id"] for task in page["tasks"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == list(reversed(ids))

    queued = client.get("/ui/api/tasks", params={"status": "queued", "type": "boefje"}).json()
    assert queued["known_total"] == 7 and len(queued["tasks"]) == 7
    by_hash = client.get("/ui/api/tasks", params={"q": "h0"}).json()["tasks"]
    assert sorted(task["scheduler_id"] for task in by_hash) == ["boefje-acme", "normalizer-beta"]
    by_id = client.get("/ui/api/tasks", params={"q": ids[3]}).json()["tasks"]
    assert [task["id"] for task in by_id] == [ids[3]]
    assert client.get("/ui/api/tasks", params={"status": "failed"}).json()["tasks"] == []
    assert client.get("/ui/api/tasks", params={"organisation": "no such org!"}).status_code == 422
    assert client.get("/ui/api/tasks", params={"statuz": "failed"}).status_code == 422


def test_sqlite_task_pages_look_beyond_the_newest_window(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A status too rare to fill a page among the newest tasks is still found further back."""
    monkeypatch.setattr("baton.storage.queues.task_pages.SCAN_WINDOW", 4)
    add_organisation(store, "acme")
    old = fail(store, "boefje-acme", 2)
    for index in range(10):
        push(store, "boefje-acme", data={"i": index})
    status = status_service(store)
    page = status.tasks(TaskFilter(status=TaskStatus.FAILED), limit=1)
    assert [str(task.id) for task in page.tasks] == [old[1]] and page.next_before is not None
    rest = status.tasks(TaskFilter(status=TaskStatus.FAILED), before=page.next_before, limit=5)
    assert [str(task.id) for task in rest.tasks] == [old[0]] and rest.next_before is None
    newest = status.tasks(TaskFilter(status=TaskStatus.QUEUED), limit=3)
    assert len(newest.tasks) == 3 and newest.next_before is not None


def test_requeue_and_priority(client: TestClient, store: Store) -> None:
    add_organisation(store, "acme")
    [failed] = fail(store, "boefje-acme", task_hash="dns|example.com")
    requeued = client.post(f"/ui/api/tasks/{failed}/requeue")
    assert requeued.status_code == 200, requeued.text
    task = requeued.json()["task"]
    assert task["status"] == "queued" and task["reason"] == "requeued by an operator from failed"
    assert requeued.json()["can_change_priority"] and not requeued.json()["can_requeue"]
    again = client.post(f"/ui/api/tasks/{failed}/requeue")
    assert again.status_code == 409 and "'queued'" in again.json()["message"]

    changed = client.put(f"/ui/api/tasks/{failed}/priority", json={"priority": -5})
    assert changed.status_code == 200 and changed.json()["task"]["priority"] == -5
    assert pop(store, "boefje-acme")[0]["priority"] == -5
    not_queued = client.put(f"/ui/api/tasks/{failed}/priority", json={"priority": 1})
    assert not_queued.status_code == 409 and "only a queued task" in not_queued.json()["message"]
    assert client.put(f"/ui/api/tasks/{failed}/priority", json={"priority": "1"}).status_code == 422
    assert client.put(f"/ui/api/tasks/{failed}/priority", json={"priority": 2**40}).status_code == 422

    stuck = client.post(f"/ui/api/tasks/{failed}/requeue")  # dispatched and silent: back in the queue
    assert stuck.status_code == 200 and stuck.json()["task"]["status"] == "queued"

    unknown = uuid.uuid4()
    assert client.post(f"/ui/api/tasks/{unknown}/requeue").status_code == 404
    assert client.put(f"/ui/api/tasks/{unknown}/priority", json={"priority": 1}).status_code == 404


def test_requeue_keeps_the_queue_rules(client: TestClient, store: Store) -> None:
    add_organisation(store, "acme", maxsize=1)
    [first] = fail(store, "boefje-acme", task_hash="same")
    push(store, "boefje-acme", task_hash="same")
    twin = client.post(f"/ui/api/tasks/{first}/requeue")
    assert twin.status_code == 409 and "already queued" in twin.json()["message"]
    [second] = fail(store, "normalizer-acme", task_hash="other")
    push(store, "normalizer-acme", task_hash="filler")
    full = client.post(f"/ui/api/tasks/{second}/requeue")
    assert full.status_code == 429 and "full" in full.json()["message"]
    [third] = fail(store, "report-acme")
    assert client.patch("/schedulers/report-acme", json={"enabled": False}).status_code == 200
    disabled = client.post(f"/ui/api/tasks/{third}/requeue")
    assert disabled.status_code == 409 and "disabled" in disabled.json()["message"]
    with store.session() as session:
        statuses = {str(task.id): task.status for task in session.query(Task).all()}
    assert statuses[first] == statuses[second] == statuses[third] == "failed"


# -- authentication --------------------------------------------------------------------------------------


@pytest.fixture
def secured(store: Store) -> Iterator[tuple[TestClient, dict[str, str]]]:
    tokens = named_tokens(
        store,
        {"reader": [Scope.READ], "runner": [Scope.READ, Scope.POP], "boss": [Scope.ADMIN], "feeder": [Scope.PUSH]},
    )
    with TestClient(build_app(Settings(database_url=store.url, auth="on"), store)) as client:
        yield client, tokens


def test_tokens_decide_what_the_page_offers_and_the_server_refuses_the_rest(
    secured: tuple[TestClient, dict[str, str]], store: Store
) -> None:
    client, tokens = secured
    add_organisation(store, "acme")
    [failed] = fail(store, "boefje-acme")
    queued = str(push(store, "boefje-acme").task["id"])

    assert client.get("/ui").status_code == 200  # the shell: no data, no token
    assert client.get("/ui/static/baton.js").status_code == 200
    for path in ("/ui/api/session", "/ui/api/overview", "/ui/fragments/tasks", f"/ui/fragments/tasks/{failed}"):
        response = client.get(path)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer", path
    assert client.get("/ui/api/overview", headers=bearer(tokens["feeder"])).status_code == 403
    assert client.get("/ui/api/overview", headers={"Cookie": f"token={tokens['boss']}"}).status_code == 401

    reader = client.get("/ui/api/session", headers=bearer(tokens["reader"])).json()
    assert reader == {
        "auth_required": True,
        "token": "reader",
        "scopes": ["read"],
        "can_cancel": False,
        "can_requeue": False,
        "can_change_priority": False,
    }
    for path in (f"/ui/fragments/tasks/{failed}", f"/ui/fragments/tasks/{queued}", "/ui/fragments/tasks"):
        assert "data-action" not in client.get(path, headers=bearer(tokens["reader"])).text, path
    assert client.post(f"/ui/api/tasks/{failed}/requeue", headers=bearer(tokens["reader"])).status_code == 403
    assert (
        client.put(
            f"/ui/api/tasks/{queued}/priority", json={"priority": 1}, headers=bearer(tokens["reader"])
        ).status_code
        == 403
    )
    refused = client.patch(f"/tasks/{queued}", json={"status": "cancelled"}, headers=bearer(tokens["reader"]))
    assert refused.status_code == 403

    runner = client.get(f"/ui/fragments/tasks/{queued}", headers=bearer(tokens["runner"])).text
    assert 'data-action="cancel"' in runner and 'data-action="priority"' not in runner
    assert client.post(f"/ui/api/tasks/{failed}/requeue", headers=bearer(tokens["runner"])).status_code == 403

    boss = client.get(f"/ui/fragments/tasks/{failed}", headers=bearer(tokens["boss"])).text
    assert 'data-action="requeue"' in boss and 'data-action="cancel"' not in boss  # failed: not cancellable
    done = client.post(f"/ui/api/tasks/{failed}/requeue", headers=bearer(tokens["boss"]))
    assert done.status_code == 200 and done.json()["task"]["reason"] == "requeued by token 'boss' from failed"
