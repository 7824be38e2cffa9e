"""The soak run (issue #42): a day of OpenKAT in an hour, every part of Baton working at once, faults on a
timetable, a sample every minute, and the checks at the end (bench/soak/ says what each part does).

    python -m bench.run --only soak [--soak-minutes 60]     # the record: an hour
    python -m bench.run --quick --only soak                 # the smoke run: a minute, a small estate

The run: start the servers and the stand-ins; start two API replicas and two workers; wait until every
organisation KATalogus lists runs its schedulers with its catalogue read; give Octopoes the estate's
objects and write their boefje schedules (due over the run, as after a day of OpenKAT) through
`POST /schedules` while the run warms up; the load, the observer and the timetable's faults for the
run's length; then stop the events, let the runners finish what is queued, and check.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import pika
import pika.exceptions
import psycopg

from baton.core.jobs import boefje_job, job_document
from baton.core.logging import configure_logging
from baton.core.settings import LeaseSettings
from baton.ingest.rabbitmq import OPENKAT_QUEUES
from baton.storage.urls import libpq_conninfo
from bench.scenarios.common import Context
from bench.soak.checks import Evidence, every_check, window_p99s
from bench.soak.load import Backfills, Bytes, Load, Octopoes, Outbox, Recorder, Rocky, Runner
from bench.soak.observe import Observer
from bench.soak.plan import BOEFJES, Fault, Plan, plan, retention_setting
from bench.soak.stack import Stack
from bench.soak.standins import IMAGE, hostname, twin_pairs

READY_TIMEOUT = 300.0
DRAIN_TIMEOUT = 180.0
STEADY_LOOKS = 3  # the drain ends after this many looks in a row found nothing left (2 s apart)


class Clock:
    """Seconds on the run's clock: from its start (negative before it)."""

    def __init__(self) -> None:
        self.origin = time.monotonic() + 10**6

    def __call__(self) -> float:
        return time.monotonic() - self.origin

    def begin(self) -> float:
        self.origin = time.monotonic()
        return time.time()

    def sleep_until(self, at: float) -> None:
        time.sleep(max(0.0, at - self()))


def estate_ready(stack: Stack, organisations: int) -> bool:
    """Every organisation KATalogus lists exists, its catalogue read (the backfills of the boefjes it
    found enabled done), its three schedulers running."""
    with psycopg.connect(libpq_conninfo(stack.database_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM organisations WHERE catalogue_synced_at IS NOT NULL),"
            " (SELECT count(*) FROM schedulers WHERE state = 'running'),"
            " (SELECT count(*) FROM boefje_backfills)"
        ).fetchone()
    return row is not None and row[0] >= organisations and row[1] >= 3 * organisations and row[2] == 0


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout:.0f} s")
        time.sleep(1)


SEED_LEAD = 10.0  # seconds between the start of the writes and the run's (its first deadlines)


class Seeding(threading.Thread):
    """Each Hostname boefje's schedule for each organisation's objects, due over the run as after a day
    of OpenKAT, written through `POST /schedules` in deadline order while the run warms up: writing is
    many times faster than the schedules come due, so each is written before its deadline (one written
    after it would fire at once: it is not timed)."""

    def __init__(self, stack: Stack, soak: Plan, organisations: list[str], start: float) -> None:
        super().__init__(name="soak-seeding", daemon=True)
        rng = random.Random(42)
        self.wanted = sorted(
            (
                (organisation, boefje.id, hostname(organisation, n), start + rng.uniform(0, soak.seconds))
                for organisation in organisations
                for boefje in BOEFJES
                if boefje.enabled and boefje.consumes == "Hostname"
                for n in range(soak.hostnames)
            ),
            key=lambda item: item[3],
        )
        self.urls = stack.api_urls()
        self.deadlines: dict[str, float] = {}  # read by the observer as they are written
        self.late: set[str] = set()
        self.failure: BaseException | None = None
        self._local = threading.local()
        self._clients: list[httpx.Client] = []

    def _http(self) -> httpx.Client:
        if not hasattr(self._local, "http"):  # each thread its replica, in turn
            self._local.http = httpx.Client(base_url=self.urls[len(self._clients) % len(self.urls)], timeout=60)
            self._clients.append(self._local.http)
        client: httpx.Client = self._local.http
        return client

    def _write(self, item: tuple[str, str, str, float]) -> None:
        organisation, boefje, reference, deadline = item
        job = boefje_job(uuid.uuid4(), boefje, boefje.replace("-", " ").title(), None, IMAGE.format(id=boefje),
                         reference, organisation)  # fmt: skip
        body = {"scheduler_id": "boefje", "organisation": organisation, "data": job_document(job)}
        answer = self._http().post("/schedules", json={**body, "deadline_at": moment(deadline)})
        answer.raise_for_status()
        schedule_id = str(answer.json()["id"])
        self.deadlines[schedule_id] = deadline
        if time.time() > deadline:
            self.late.add(schedule_id)

    def run(self) -> None:
        try:
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(self._write, self.wanted))
        except BaseException as exc:  # the run's checks fail with it
            self.failure = exc
        finally:
            for client in self._clients:
                client.close()


def moment(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def broker_backlog(amqp_url: str) -> int:
    """Messages waiting in OpenKAT's queues."""
    try:
        connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    except pika.exceptions.AMQPError:
        return -1
    try:
        channel = connection.channel()
        return sum(channel.queue_declare(name, passive=True).method.message_count for name in OPENKAT_QUEUES)
    except pika.exceptions.AMQPError:
        return -1
    finally:
        if connection.is_open:
            connection.close()


def nothing_left(stack: Stack, load: Load, before: float) -> bool:
    """Every message published and routed, every event consumed, every task made before `before`
    (epoch s) finished. Rescans coming due after the run may queue more: they stay queued."""
    if not load.outbox.idle or load.ledger.holding or broker_backlog(stack.amqp_url) != 0:
        return False
    try:
        with psycopg.connect(libpq_conninfo(stack.database_url), autocommit=True, connect_timeout=3) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM tasks WHERE status IN ('queued', 'dispatched', 'running')"
                "   AND created_at < to_timestamp(%s)),"
                " (SELECT count(*) FROM events WHERE consumed_at IS NULL)",
                (before,),
            ).fetchone()
    except psycopg.Error:
        return False
    return row is not None and row[0] == 0 and row[1] == 0


def drain(stack: Stack, load: Load) -> float:
    """After the run: no new events; the runners take what is left. Seconds it took."""
    load.feeding.set()
    started, steady, ended = time.monotonic(), 0, time.time()
    while time.monotonic() - started < DRAIN_TIMEOUT and steady < STEADY_LOOKS:
        steady = steady + 1 if nothing_left(stack, load, ended) else 0
        time.sleep(2)
    return time.monotonic() - started


def do_fault(stack: Stack, fault: Fault) -> dict[str, Any]:
    assert stack.outside is not None
    if fault.kind == "outside_service_down":
        stack.outside.down("katalogus")
        time.sleep(fault.length)
        stack.outside.up("katalogus")
        return {"service": "katalogus"}
    if fault.kind == "worker_sigkill":
        return stack.kill_worker(1)
    if fault.kind == "api_restart":
        return stack.restart_api(1)
    if fault.kind == "rabbitmq_restart":
        return stack.restart_rabbitmq()
    if fault.kind == "postgres_restart":
        return stack.restart_postgres()
    raise ValueError(fault.kind)


def fault_at(stack: Stack, clock: Clock, fault: Fault, done: list[dict[str, Any]]) -> None:
    clock.sleep_until(fault.at)
    began = clock()
    try:
        detail = do_fault(stack, fault)
    except Exception as exc:  # the fault's record says so; the checks see its effects
        detail = {"error": repr(exc)}
    done.append({"kind": fault.kind, "at": began, "ended": clock(), **detail})


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    soak = plan(ctx.soak_minutes or (1.0 if ctx.quick else 60.0), ctx.quick)
    retention, horizon = retention_setting(soak.retention_horizon)
    organisations = [f"soak-{n:03d}" for n in range(soak.organisations)]
    twins = twin_pairs(organisations, soak.twin_organisations)
    clock = Clock()
    stack = Stack(ctx.work_dir / "soak", ctx.amqp_url, clock)
    load_start = os.getloadavg()
    spec = {
        "organisations": organisations,
        "hostnames": soak.hostnames,
        "addresses": soak.addresses,
        "twin_organisations": soak.twin_organisations,
    }
    try:
        stack.start_servers(spec)
        stack.baton_env(soak.settings(retention))
        setup_started = time.monotonic()
        stack.start_api(0)  # the first migrates the database
        stack.start_api(1)
        for slot in (0, 1):
            stack.start("worker", slot)
        wait(lambda: estate_ready(stack, soak.organisations), READY_TIMEOUT, "the estate was not running")
        # The objects of the estate's schedules, held by Octopoes only now: the backfills of the boefjes
        # enabled at the start found none, so their schedules (below), not a backfill, make their tasks.
        assert stack.outside is not None
        stack.outside.add_objects(
            [
                {"organisation": org, "reference": hostname(org, n)}
                for org in organisations
                for n in range(soak.hostnames)
            ]
        )
        begins = time.time() + SEED_LEAD
        seeding = Seeding(stack, soak, organisations, begins)
        seeding.start()
        setup_seconds = time.monotonic() - setup_started
        time.sleep(max(0.0, begins - time.time()))
        start_wall = clock.begin()
        for member in stack.members:
            member.started = 0.0
        return soaked(ctx, soak, stack, clock, start_wall, organisations, twins, seeding) | {
            "retention": {**retention_summary(retention, horizon, soak)},
            "settings": soak.settings(retention),
            "setup_s": setup_seconds,
            "load_start": load_start,
        }
    finally:
        stack.stop()


def retention_summary(retention: dict[str, str], horizon: float, soak: Plan) -> dict[str, Any]:
    return {
        "setting": retention,
        "wanted_horizon_s": soak.retention_horizon,
        "horizon_s": horizon,
        "acts_within_run": horizon < soak.seconds,
    }


def soaked(
    ctx: Context,
    soak: Plan,
    stack: Stack,
    clock: Clock,
    start_wall: float,
    organisations: list[str],
    twins: dict[str, str],
    seeding: Seeding,
) -> dict[str, Any]:
    assert stack.outside is not None
    outbox = Outbox(stack.amqp_url)
    load = Load(soak, stack.api_urls, stack.outside, outbox, Recorder(clock))
    bytes_client = Bytes(stack.outside.urls["bytes"])
    runners = [Runner(load, "boefje", n, bytes_client) for n in range(soak.boefje_runners)]
    runners += [Runner(load, "normalizer", n, bytes_client) for n in range(soak.normalizer_runners)]
    feeders = [
        Octopoes(load, organisations, twins),
        Rocky(load, organisations),
        Backfills(load, organisations, soak.backfills, soak.seconds),
    ]
    observer = Observer(stack, load, clock, soak.sample_every)
    observer.deadlines = seeding.deadlines
    outbox.start()
    for client in [*runners, *feeders]:
        client.start()
    observer.start()
    faults: list[dict[str, Any]] = []
    timetable = [threading.Thread(target=fault_at, args=(stack, clock, fault, faults)) for fault in soak.faults]
    try:
        for thread in timetable:  # each at its time, whatever the others take (an API replica's start)
            thread.start()
        clock.sleep_until(soak.seconds)
        end_wall = time.time()
        for thread in timetable:
            thread.join()
        seeding.join()
        drained = drain(stack, load)
    finally:
        load.feeding.set()
        load.popping.set()
        for client in [*runners, *feeders]:
            client.join(soak.long_poll_seconds + 60)
        outbox.close()
        bytes_client.close()
    time.sleep(3 * LeaseSettings().retry_period_seconds)  # a housekeeping round settles what a lost pop left
    observer.stop()
    final = observer.query(observer.tasks.final)
    observer.close()
    if final is None:
        raise RuntimeError("could not read the tasks at the end")
    killed = {member.pid for member in stack.members if member.ended is not None}
    members = [
        {
            "name": m.name,
            "role": m.role,
            "slot": m.slot,
            "generation": m.generation,
            "started": m.started,
            "ended": m.ended,
            "killed": m.pid in killed,
        }
        for m in stack.members
    ]
    failures = [*load.failures, *observer.failures]
    if seeding.failure is not None:
        failures.append(f"seeding: {seeding.failure!r}")
    if outbox.failure is not None:
        failures.append(f"outbox: {outbox.failure!r}")
    evidence = Evidence(
        plan=soak,
        seen=observer.tasks.rows,
        final=final,
        ledger=load.ledger,
        published=load.published,
        deadlines=seeding.deadlines,
        seeded_late=seeding.late,
        start_wall=start_wall,
        faults=faults,
        outages=observer.logs.outages,
        tracebacks=observer.logs.tracebacks,
        log_kinds=observer.logs.kinds,
        samples=observer.samples,
        latencies=dict(load.recorder.latencies),
        failures=failures,
        retention_acts=retention_setting(soak.retention_horizon)[1] < soak.seconds,
        hand_over_s=LeaseSettings().lease_seconds,
        members=members,
    )
    checks = [check.as_dict() for check in every_check(evidence)]
    return {
        "plan": soak.describe(),
        "started_wall": start_wall,
        "ended_wall": end_wall,
        "drain_s": drained,
        "faults": faults,
        "members": members,
        "samples": observer.samples,
        "windows": window_p99s(evidence),
        "checks": checks,
        "judged": {c["key"]: c["value"] if c["passed"] is not None else None for c in checks},
        "passed": all(c["passed"] is not False for c in checks),
        "outages": observer.logs.outages,
        "tracebacks": observer.logs.tracebacks[:20],
        "log_kinds": dict(observer.logs.kinds.most_common(40)),
        "calls": stack.outside.calls(),
        "tasks": {"seen": len(observer.tasks.rows), "at_end": len(final)},
        "load_end": os.getloadavg(),
        "logs": str(stack.work / "logs"),
    }
