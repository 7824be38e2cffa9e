"""OpenKAT's own scheduler clients, unmodified, against a running `baton serve` (run by
scripts/openkat_clients.sh, which puts OpenKAT's files and the stand-ins in stubs/ on PYTHONPATH).

boefjes' `SchedulerAPIClient` and `SchedulerWorkerManager` run the boefje and normalizer tasks Baton
makes from messages published as Octopoes and Bytes publish them (Bytes' own models serialise them),
report completed and failed, clean up after a dead worker and hand tasks back on shutdown; rocky's
`SchedulerClient` runs manual boefjes and normalizers, reschedules, lists, filters and counts tasks,
checks health, schedules reports and runs them as its report worker does. Prints PASS/FAIL per check;
exits 1 on any failure.

Environment: SCHEDULER_API (Baton's URL), AMQP (the broker Baton consumes), ORG (default acme).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import django
from django.conf import settings as django_settings

django_settings.configure(ROCKY_OUTGOING_REQUEST_TIMEOUT=30, USE_I18N=False)
django.setup()


class KatalogusSettings(BaseHTTPRequestHandler):
    """The one KATalogus call the runner's client makes itself: a boefje's settings (none)."""

    def do_GET(self) -> None:
        body = b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


katalogus = ThreadingHTTPServer(("127.0.0.1", 0), KatalogusSettings)
threading.Thread(target=katalogus.serve_forever, daemon=True).start()
os.environ["KATALOGUS_API"] = f"http://127.0.0.1:{katalogus.server_address[1]}"

import httpx  # noqa: E402
import pika  # noqa: E402
import structlog  # noqa: E402
from boefjes.clients.scheduler_client import SchedulerAPIClient  # noqa: E402
from boefjes.dependencies.plugins import PluginService  # noqa: E402
from boefjes.worker.interfaces import BoefjeHandler, NormalizerHandler, TaskStatus, WorkerManager  # noqa: E402
from boefjes.worker.job_models import BoefjeMeta, NormalizerMeta  # noqa: E402
from boefjes.worker.manager import SchedulerWorkerManager  # noqa: E402
from bytes.events.events import RawFileReceived  # noqa: E402
from bytes.models import Boefje as BytesBoefje  # noqa: E402
from bytes.models import BoefjeMeta as BytesBoefjeMeta  # noqa: E402
from bytes.models import MimeType, RawDataMeta  # noqa: E402
from django.http import QueryDict  # noqa: E402
from rocky import scheduler as rocky  # noqa: E402

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

API = os.environ["SCHEDULER_API"]
AMQP = os.environ["AMQP"]
ORG = os.environ.get("ORG", "acme")
failures: list[str] = []
T = TypeVar("T")


def check(name: str, condition: object, detail: object = "") -> None:
    print(("PASS " if condition else "FAIL ") + name + ("" if condition else f"  -- {detail}"), flush=True)
    if not condition:
        failures.append(name)


def scenario(function: Callable[..., T]) -> Callable[..., T | None]:
    """A failing scenario is reported, and the next one runs."""

    def run(*args: Any) -> T | None:
        try:
            return function(*args)
        except Exception as exc:
            traceback.print_exc()
            check(f"{function.__name__}: no exception", False, repr(exc))
            return None

    return run


def wait_for(description: str, predicate: Callable[[], T], timeout: float = 40.0) -> T | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    check(f"waited for {description}", False, f"not within {timeout} s")
    return None


# -- messages, as Octopoes and Bytes publish them --------------------------------------------------------


def publish_scan_profile(reference: str, level: int, operation: str = "create") -> None:
    """Octopoes' EventManager: ScanProfileMutation JSON on `scan_profile_mutations`, persistent."""
    value = None
    if operation != "delete":
        profile = {"scan_profile_type": "declared", "reference": reference, "level": level, "user_id": 1}
        value = {"primary_key": reference, "object_type": reference.split("|")[0], "scan_profile": profile}
    body = {"operation": operation, "primary_key": reference, "value": value, "client_id": ORG}
    with pika.BlockingConnection(pika.URLParameters(AMQP)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue="scan_profile_mutations", durable=True)
        properties = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        channel.basic_publish("", "scan_profile_mutations", json.dumps(body).encode(), properties=properties)


def publish_raw_file(boefje_job_id: uuid.UUID, input_ooi: str, mime_types: list[str]) -> RawFileReceived:
    """Bytes' RabbitMQEventManager: the event's JSON on the queue named by its event_id, no properties."""
    now = datetime.now(UTC)
    event = RawFileReceived(
        organization=ORG,
        raw_data=RawDataMeta(
            id=uuid.uuid4(),
            boefje_meta=BytesBoefjeMeta(
                id=boefje_job_id,
                started_at=now - timedelta(seconds=3),
                ended_at=now - timedelta(seconds=1),
                boefje=BytesBoefje(id="dns-records", version="1.0"),
                input_ooi=input_ooi,
                arguments={"oci_image": "ghcr.io/minvws/openkat/dns-records:latest", "input": {"name": "x"}},
                organization=ORG,
                runnable_hash="0" * 64,
                environment={"REMOTE_NS": "1.1.1.1"},
            ),
            mime_types={MimeType(value=mime) for mime in mime_types},
            secure_hash="sha512:00",
            hash_retrieval_link="https://example.com/proof",
        ),
    )
    with pika.BlockingConnection(pika.URLParameters(AMQP)) as connection:
        channel = connection.channel()
        channel.queue_declare(event.event_id, durable=True)
        channel.basic_publish("", event.event_id, event.model_dump_json().encode())
    return event


# -- clients -------------------------------------------------------------------------------------------------


def rocky_client(organisation: str | None = ORG) -> rocky.SchedulerClient:
    return rocky.SchedulerClient(API, organisation)


def runner(**filters: Any) -> SchedulerAPIClient:
    return SchedulerAPIClient(PluginService(), API, **filters)


ORG_FILTER = {"filters": [{"column": "organisation", "operator": "==", "value": ORG}]}


def tasks_of(task_type: str, status: str | None = None, **kwargs: Any) -> rocky.PaginatedTasksResponse:
    """As rocky's task list view asks (scheduler_id and task_type both the type, the organisation a filter)."""
    query = {"scheduler_id": task_type, "task_type": task_type, "status": status, "limit": 500, "filters": ORG_FILTER}
    return rocky_client().list_tasks(**(query | kwargs))


def finish(task_id: uuid.UUID, status: TaskStatus = TaskStatus.COMPLETED) -> None:
    runner().patch_task(task_id, TaskStatus.RUNNING)
    runner().patch_task(task_id, status)


class Boefjes(BoefjeHandler):
    """Runs nothing; a task whose object contains 'fail' fails."""

    def handle(self, task: Any) -> None:
        if "fail" in (task.data.input_ooi or ""):
            raise RuntimeError("boefje failed")


class Normalizers(NormalizerHandler):
    def handle(self, task: Any) -> None:
        return None


def worker_manager(pool_size: int = 2) -> SchedulerWorkerManager:
    return SchedulerWorkerManager(Boefjes(), runner(), pool_size, 0.5, 0.2, False)


# -- scenarios -----------------------------------------------------------------------------------------------


@scenario
def boefje_task_from_octopoes() -> uuid.UUID:
    publish_scan_profile("Hostname|internet|example.com", 2)
    wait_for("the boefje task of an Octopoes message", lambda: tasks_of("boefje", "queued").results)
    [task] = runner().pop_items(WorkerManager.Queue.BOEFJES)
    check("the runner reads it (scheduler_id boefje, data a BoefjeMeta)", task.scheduler_id == "boefje")
    check("data is a BoefjeMeta", isinstance(task.data, BoefjeMeta), type(task.data))
    check("data.id is the task's id", task.data.id == task.id, (task.data.id, task.id))
    check("the job was hydrated", "input" in task.data.arguments, task.data.arguments)
    runner().patch_task(task.id, TaskStatus.RUNNING)
    check("running", runner().get_task(task.id, hydrate=False).status is TaskStatus.RUNNING)
    runner().patch_task(task.id, TaskStatus.COMPLETED)
    check("completed", runner().get_task(task.id).status is TaskStatus.COMPLETED)
    return task.id


@scenario
def normalizer_task_from_bytes(boefje_job_id: uuid.UUID) -> None:
    event = publish_raw_file(boefje_job_id, "Hostname|internet|example.com", ["boefje/dns-records", "openkat/x"])
    listed = wait_for("the normalizer task of a Bytes message", lambda: tasks_of("normalizer", "queued").results)
    check("rocky reads it as a NormalizerTask", listed and isinstance(listed[0].data, rocky.NormalizerTask))
    [task] = runner().pop_items(WorkerManager.Queue.NORMALIZERS)
    check("data is a NormalizerMeta", isinstance(task.data, NormalizerMeta), type(task.data))
    check("data.id is the task's id", task.data.id == task.id)
    meta = task.data.raw_data.boefje_meta
    check("the whole boefje_meta", meta.id == boefje_job_id and meta.environment == {"REMOTE_NS": "1.1.1.1"}, meta)
    check("the raw file's id", task.data.raw_data.id == event.raw_data.id)
    finish(task.id, TaskStatus.FAILED)
    check("failed", runner().get_task(task.id).status is TaskStatus.FAILED)
    detail = rocky_client().get_task_details(str(task.id))
    check("rocky's task detail has ended_at", detail.data.raw_data.boefje_meta.ended_at is not None)


def run_boefje_manager() -> None:
    worker_manager().run(WorkerManager.Queue.BOEFJES)


@scenario
def worker_manager_runs_every_task() -> None:
    references = [f"Hostname|internet|host{n}.example.com" for n in range(4)] + ["Hostname|internet|fail.example.com"]
    for reference in references:
        publish_scan_profile(reference, 3, "update")
    wait_for("five boefje tasks", lambda: tasks_of("boefje", "queued").count >= 5)
    process = multiprocessing.get_context("fork").Process(target=run_boefje_manager)
    process.start()
    done = wait_for(
        "every boefje task finished",
        lambda: all(tasks_of("boefje", status).count == 0 for status in ("queued", "dispatched", "running")),
    )
    os.kill(process.pid or 0, signal.SIGTERM)
    process.join(20)
    check("the manager exits on SIGTERM", process.exitcode is not None, process.exitcode)
    if done:
        failed = {task.data.input_ooi for task in tasks_of("boefje", "failed").results}
        check("the failing boefje's task failed", references[-1] in failed, failed)
        completed = {task.data.input_ooi for task in tasks_of("boefje", "completed").results}
        check("the others completed", set(references[:-1]) <= completed, completed)


@scenario
def hand_back_on_shutdown() -> None:
    publish_scan_profile("Hostname|internet|handback.example.com", 3)
    wait_for("the task to hand back", lambda: tasks_of("boefje", "queued").count >= 1)
    manager = worker_manager(pool_size=1)
    manager._workers = []
    manager._fill_queue(WorkerManager.Queue.BOEFJES)  # one task popped into the local queue
    [held] = manager.task_queue.get()
    manager.task_queue.put([held])
    check("dispatched", rocky_client().get_task_details(str(held.id)).status is rocky.TaskStatus.DISPATCHED)
    answers: list[str] = []
    push_item = manager.scheduler_client.push_item

    def recorded(item: Any) -> None:
        try:
            push_item(item)
            answers.append("accepted")
        except httpx.HTTPStatusError as exc:
            answers.append(f"{exc.response.status_code} {exc.response.text}")
            raise

    manager.scheduler_client.push_item = recorded  # type: ignore[method-assign]
    manager.exit()  # pushes every task of its local queue back, the whole task, no Content-Type
    check("push_item of the whole task accepted", answers == ["accepted"], answers)
    after = rocky_client().get_task_details(str(held.id))
    check("queued again under its id", after.status is rocky.TaskStatus.QUEUED, after.status)
    again = runner().pop_items(WorkerManager.Queue.BOEFJES)
    check("and popped again", [task.id for task in again] == [held.id], again)
    finish(held.id)


@scenario
def dead_worker_clean_up() -> None:
    publish_scan_profile("Hostname|internet|dead.example.com", 3)
    wait_for("the dead worker's task", lambda: tasks_of("boefje", "queued").count >= 1)
    manager = worker_manager(pool_size=1)
    [task] = runner().pop_items(WorkerManager.Queue.BOEFJES)

    class DeadWorker:
        pid = 424242
        exitcode = -9

    manager.handling_tasks[DeadWorker.pid] = str(task.id)
    manager._cleanup_pending_worker_task(DeadWorker())  # type: ignore[arg-type]
    check("a dead worker's dispatched task is failed", runner().get_task(task.id).status is TaskStatus.FAILED)


@scenario
def runner_filters() -> None:
    publish_scan_profile("Hostname|internet|filtered.example.com", 3)
    wait_for("the task to filter", lambda: tasks_of("boefje", "queued").count >= 1)
    check(
        "a plugin filter passes other boefjes by",
        runner(plugins=["nmap"]).pop_items(WorkerManager.Queue.BOEFJES) == [],
    )
    elsewhere = runner(oci_images=["ghcr.io/other:1"]).pop_items(WorkerManager.Queue.BOEFJES)
    check("an image filter passes other images by", elsewhere == [], elsewhere)
    # The built-in catalogue gives dns-records the image of OpenKAT's manifest.
    popped = runner(oci_images=["ghcr.io/minvws/openkat/generic:latest"], plugins=["dns-records"]).pop_items(
        WorkerManager.Queue.BOEFJES, limit=5
    )
    check("an image and plugin filter match its boefje", len(popped) == 1, popped)
    for task in popped:
        finish(task.id)


@scenario
def manual_runs_from_rocky() -> None:
    client = rocky_client()
    boefje_task = rocky.BoefjeTask(
        boefje=rocky.Boefje(id="dns-records", name="DNS records"),
        input_ooi="Hostname|internet|manual.example.com",
        organization=ORG,
    )
    push = rocky.TaskPush(priority=1, data=boefje_task.model_dump(), scheduler_id="boefje", organisation=ORG)
    client.push_task(push)
    try:
        client.push_task(push)
        check("the same manual run again: SchedulerConflictError", False, "accepted")
    except rocky.SchedulerConflictError:
        check("the same manual run again: SchedulerConflictError", True)
    [queued] = tasks_of("boefje", "queued", input_ooi="Hostname|internet|manual.example.com").results
    check("priority 1", queued.priority == 1, queued.priority)
    check("task details", client.get_task_details(str(queued.id)).organization_id() == ORG)
    [popped] = runner().pop_items(WorkerManager.Queue.BOEFJES)
    check("the runner pops rocky's run", popped.id == queued.id and isinstance(popped.data, BoefjeMeta))
    finish(popped.id)
    # rescheduling, as rocky's SchedulerView.reschedule_task does it
    old = client.get_task_details(str(queued.id))
    new_id = uuid.uuid4()
    old.data.id = new_id
    data = old.data.model_dump()
    client.push_task(rocky.TaskPush(id=new_id, scheduler_id=old.scheduler_id, organisation=ORG, priority=1, data=data))
    check("rescheduled under rocky's new id", client.get_task_details(str(new_id)).status is rocky.TaskStatus.QUEUED)
    [popped] = runner().pop_items(WorkerManager.Queue.BOEFJES)
    finish(popped.id)
    # a manual normalizer run, as rocky's run_normalizer does it
    now = datetime.now(UTC)
    meta = rocky.BoefjeMeta(
        id=uuid.uuid4(),
        boefje=rocky.Boefje(id="dns-records"),
        arguments={},
        organization=ORG,
        started_at=now,
        ended_at=now,
    )
    raw = rocky.RawData(id=uuid.uuid4(), boefje_meta=meta, mime_types=[{"value": "boefje/dns-records"}])
    normalizer_task = rocky.NormalizerTask(normalizer=rocky.Normalizer(id="kat_dns_normalize"), raw_data=raw)
    data = normalizer_task.model_dump()
    client.push_task(rocky.TaskPush(priority=1, data=data, scheduler_id="normalizer", organisation=ORG))
    [popped] = runner().pop_items(WorkerManager.Queue.NORMALIZERS)
    check("the runner pops rocky's normalizer run", isinstance(popped.data, NormalizerMeta), popped.data)
    finish(popped.id)


@scenario
def task_lists_in_rocky() -> None:
    client = rocky_client()
    today = datetime.now(UTC).date().isoformat()
    # SchedulerView.get_task_filters with the filter form's fields, through LazyTaskList
    query = {
        "scheduler_id": "boefje",
        "task_type": "boefje",
        "plugin_id": None,
        "status": "completed",
        "min_created_at": today,
        "filters": ORG_FILTER,
    }
    tasks = rocky.LazyTaskList(client, **query)
    count = len(tasks)
    check("a task list counts", count >= 5, count)
    check("and pages", len(tasks[0:150]) == count)
    # as in mula, a date-only max_created_at is that day's midnight: today's tasks come after it
    check("max_created_at=today is midnight", client.list_tasks(**(query | {"max_created_at": today})).count == 0)
    # the list view passes every query parameter of its own page along (TaskFilterForm(request.GET).data)
    form = {key: value for key, value in QueryDict("page=2&status=pending&input_ooi=&sort=asc").dict().items() if value}
    check("page 2, status=pending", len(rocky.LazyTaskList(client, **(query | form))) == 0)
    # the object page: observed_at and ooi_id ride along, data.input_ooi is a filter
    on_object = [
        *ORG_FILTER["filters"],
        {"column": "data", "field": "input_ooi", "operator": "==", "value": "Hostname|internet|example.com"},
    ]
    extra = {"status": None, "observed_at": "2025-01-01 12:00", "ooi_id": "Hostname|internet|example.com"}
    check(
        "the object page's tasks", client.list_tasks(**(query | extra | {"filters": {"filters": on_object}})).count == 1
    )
    # the plugin page: data.boefje__id
    of_plugin = [
        *ORG_FILTER["filters"],
        {"column": "data", "field": "boefje__id", "operator": "==", "value": "dns-records"},
    ]
    check(
        "the plugin page's tasks",
        client.list_tasks(**(query | {"status": None, "filters": {"filters": of_plugin}})).count >= 5,
    )
    everyone = rocky_client(None)
    in_orgs = {"filters": {"filters": [{"column": "organisation", "operator": "in", "value": [ORG, "other"]}]}}
    check("the all-organisations list", rocky.LazyTaskList(everyone, task_type="boefje", **in_orgs).count >= 5)
    stats = client.get_task_stats("boefje")
    check("statistics", stats and all(isinstance(n, int) for hour in stats.values() for n in hour.values()), stats)
    merged = everyone.get_combined_schedulers_stats("boefje", [ORG, "other"])
    check("statistics summed over organisations", sum(hour["total"] for hour in merged.values()) >= 5, merged)
    check("statistics of all organisations", everyone.get_task_stats_for_all_organizations("normalizer"))
    health = client.health()
    check("health", health.service and health.healthy, health)
    check("a normalizer task list", client.list_tasks(scheduler_id="normalizer", task_type="normalizer").count >= 2)


@scenario
def report_schedules_in_rocky() -> None:
    client = rocky_client()
    recipe, once_recipe = str(uuid.uuid4()), str(uuid.uuid4())

    def report(recipe_id: str) -> dict[str, Any]:
        return rocky.ReportTask(organisation_id=ORG, report_recipe_id=recipe_id).model_dump()

    now = datetime.now(UTC)
    created = client.post_schedule(
        rocky.ScheduleRequest(
            scheduler_id="report",
            organisation=ORG,
            data=report(recipe),
            schedule="0 6 * * *",
            deadline_at=now.isoformat(),
        )
    )
    check("a cron report schedule", created.schedule == "0 6 * * *" and created.hash, created)
    once = client.post_schedule(
        rocky.ScheduleRequest(
            scheduler_id="report", organisation=ORG, data=report(once_recipe), deadline_at=now.date().isoformat()
        )
    )
    check("a one-off report schedule (date only)", once.schedule is None and once.deadline_at is not None, once)
    scheduled = {schedule["data"]["report_recipe_id"] for schedule in client.get_scheduled_reports()}
    check("get_scheduled_reports", scheduled >= {recipe, once_recipe}, scheduled)
    for operator in ("eq", "=="):
        by_recipe = {
            "filters": [{"column": "data", "field": "report_recipe_id", "operator": operator, "value": recipe}]
        }
        found = client.post_schedule_search(by_recipe)
        check(f"schedule search by recipe ({operator})", [s.id for s in found.results] == [created.id], found)
    check("schedule details", client.get_schedule_details(str(created.id)).id == created.id)
    client.patch_schedule(str(created.id), {"enabled": False})
    check("disabled", client.get_schedule_details(str(created.id)).enabled is False)
    client.patch_schedule(str(created.id), {"schedule": "0 7 L * *", "deadline_at": now.date().isoformat()})
    check("a new cron and deadline", client.get_schedule_details(str(created.id)).schedule == "0 7 L * *")
    client.patch_schedule(str(created.id), {"deadline_at": now.isoformat()})
    check("list_schedules", client.list_schedules(scheduler_id="report", organisation=ORG).count >= 2)
    on_objects = {
        "filters": [
            {"column": "data", "field": "boefje__id", "operator": "eq", "value": "dns-records"},
            {"column": "data", "field": "input_ooi", "operator": "in", "value": ["Hostname|internet|example.com"]},
        ]
    }
    check("the plugin page's schedule search", client.post_schedule_search(on_objects).count >= 0)
    # the report worker: pop, running, (shutdown: push the whole task back), completed
    task = wait_for("the due report task", lambda: client.pop_item("report"))
    if task is not None:
        check(
            "a rocky ReportTask", isinstance(task.data, rocky.ReportTask) and task.data.report_recipe_id == once_recipe
        )
        client.patch_task(task.id, rocky.TaskStatus.RUNNING)
        client.push_task(task)
        after = client.get_task_details(str(task.id)).status
        check("the report worker's hand-back is accepted", after is rocky.TaskStatus.QUEUED, after)
        again = client.pop_item("report")
        client.patch_task(again.id, rocky.TaskStatus.RUNNING)
        client.patch_task(again.id, rocky.TaskStatus.COMPLETED)
        check("report completed", client.get_task_details(str(again.id)).status is rocky.TaskStatus.COMPLETED)
    client.delete_schedule(str(created.id))
    client.delete_schedule(str(created.id))  # 204 again, as mula answers


def main() -> int:
    boefje_job = boefje_task_from_octopoes()
    normalizer_task_from_bytes(boefje_job or uuid.uuid4())
    worker_manager_runs_every_task()
    hand_back_on_shutdown()
    dead_worker_clean_up()
    runner_filters()
    manual_runs_from_rocky()
    task_lists_in_rocky()
    report_schedules_in_rocky()
    print(f"{len(failures)} failed: {failures}" if failures else "all passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
