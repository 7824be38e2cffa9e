"""Periodic rescans at scale (issue #30): 100,000 due boefje schedules over 100 organisations become tasks
through Baton's own rescan rounds, against KATalogus and Octopoes stand-ins that answer after a few
milliseconds each, on PostgreSQL.

The schedules are written due (their deadlines just passed) for objects Octopoes holds at a sufficient
level, with the boefje enabled for every organisation in KATalogus. Each organisation's boefje scheduler
(BoefjeScheduler, as a worker runs it) reads its KATalogus listing once, then its rounds read every due
schedule oldest first a page at a time, check the page in bulk (the catalogue in the database, one
Octopoes `load_bulk` per 500 references, the grace period in `boefje_runs`) and queue the tasks through the
planner's admission path. A few threads share the schedulers, as the thread runner's tick pool does.

The rounds run twice, each on a freshly written set of the same due schedules (the tasks, runs and
schedules of the first removed, the listing written a poll before again): with deduplication on
(BATON_DEDUPLICATE, OpenKAT's default), so every task gets its twin check (planners/twins.py: one Octopoes
`GET /object-clients` per task here, every organisation sharing the boefje's settings), and with it off,
the rounds alone. The top-level figures are the run with twin checks, `without_twin_checks` the other;
`complete` says whether every schedule became a task in both.

Measured: schedules turned into tasks per second, against a raw INSERT of the same tasks (one statement
per task from one connection, what a minimal scheduler would do without any check) in the same run, before,
between and after the two rounds (their mean); the lateness of each task after its schedule's deadline
(counted from the start of its rounds for schedules due before it); the calls KATalogus and Octopoes
received per 1,000 schedules (mula: ~3,000, one KATalogus, one Octopoes and one Bytes call per schedule).
The stand-ins run in a process of their own.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from baton.core.catalogue import ListedPlugin
from baton.core.jobs import boefje_job, job_document, job_hash
from baton.core.logging import configure_logging
from baton.core.model import SchedulerSpec, SchedulerType, utcnow
from baton.core.settings import OpenKatSettings, Settings
from baton.ingest.catalogue.lookups import KatalogusCatalogue
from baton.ingest.outside_links import OutsideLinks
from baton.ingest.planners.boefje import BoefjeScheduler
from baton.ingest.scheduler import SchedulerContext
from baton.openkat import KatalogusClient, OctopoesClient
from baton.openkat.http import ServiceClient
from baton.storage.engine import Store
from baton.storage.scheduling.catalogue_sync import apply_plugin_listing
from bench.scenarios.common import Context, add_organisations, connect, fresh_database, percentile, ratio

BOEFJE = "dns-records"
LATENCY_MS = 3.0
IMAGE = "ghcr.io/minvws/openkat/dns:1"
THREADS = 4
ORGANISATIONS = 100


def reference(org: int, n: int) -> str:
    return f"Hostname|internet|h{n}.o{org}.example"


def organisation(org: int) -> str:
    return f"org{org:03}"


def serve_standins(organisations: int, per_org: int, latency_ms: float, ports: Any, orders: Any, calls: Any) -> None:
    """The child process: KATalogus and Octopoes stand-ins with every organisation's objects; their ports out,
    then, at each "calls" order, the calls they received since the last one, until the "stop" order."""
    from harness.standins import KatalogusStandin, OctopoesStandin, StandinServer

    katalogus, octopoes = KatalogusStandin(), OctopoesStandin()
    katalogus.add_boefje(BOEFJE, ["Hostname"], scan_level=1, oci_image=IMAGE)
    for org in range(organisations):
        katalogus.add_organisation(organisation(org))
        katalogus.set_enabled(organisation(org), BOEFJE, True)
        octopoes.add_organisation(organisation(org))
        for n in range(per_org):
            octopoes.add_object(organisation(org), reference(org, n), level=2)
    katalogus.faults.latency_ms = octopoes.faults.latency_ms = latency_ms
    with StandinServer(katalogus.app) as katalogus_server, StandinServer(octopoes.app) as octopoes_server:
        ports.put((katalogus_server.url, octopoes_server.url))
        while orders.get() == "calls":
            calls.put({"katalogus": katalogus.calls.snapshot(), "octopoes": octopoes.calls.snapshot()})
            katalogus.calls.reset()
            octopoes.calls.reset()


def write_schedules(ctx: Context, organisations: int, per_org: int) -> dict[str, float]:
    """The due schedules, in one statement per organisation, after removing the tasks, runs and schedules
    of a previous round; each schedule's deadline by its id (epoch s)."""
    now = utcnow()
    deadlines: dict[str, float] = {}
    with connect(ctx) as conn:
        conn.execute("TRUNCATE tasks, boefje_runs, queue_counters, schedules CASCADE")  # and what refers to tasks
        for org in range(organisations):
            rows = []
            for n in range(per_org):
                job = boefje_job(uuid.uuid4(), BOEFJE, "Dns Records", None, None, reference(org, n), organisation(org))
                schedule_id = uuid.uuid4()
                deadline = now - timedelta(seconds=(per_org - n) * 0.001)  # just passed, a millisecond apart
                deadlines[str(schedule_id)] = deadline.timestamp()
                rows.append((schedule_id, organisation(org), job_hash(job), job_document(job), deadline))
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO schedules (id, scheduler_id, organisation, hash, data, enabled, deadline_at,"
                    " created_at, modified_at) VALUES (%s, 'boefje', %s, %s, %s::jsonb, true, %s, now(), now())",
                    [(i, o, h, json.dumps(d), t) for i, o, h, d, t in rows],
                )
        conn.execute("VACUUM ANALYZE schedules")
        conn.execute("VACUUM ANALYZE tasks")
    return deadlines


def catalogue_known(store: Store, organisations: int) -> None:
    """The state a running Baton has: each organisation's listing written a poll ago with the boefje enabled
    (so its first poll reads the listing again and finds nothing new: no backfill of every object)."""
    plugin = ListedPlugin(
        id=BOEFJE,
        type="boefje",
        name="Dns Records",
        enabled=True,
        consumes=("Hostname",),
        scan_level=1,
        oci_image=IMAGE,
    )
    synced = utcnow() - timedelta(seconds=OpenKatSettings().katalogus_poll_seconds)
    with store.session() as session:
        for org in range(organisations):
            apply_plugin_listing(session, organisation(org), [plugin], synced)


def raw_insert_rate(ctx: Context, count: int) -> float:
    """Tasks per second inserted one statement at a time from one connection (the same tasks: a boefje job
    each), into a queue of their own, removed afterwards."""
    with connect(ctx) as conn:
        add_organisations(conn, ["rawinsert"])
        documents = [
            json.dumps(
                job_document(boefje_job(uuid.uuid4(), BOEFJE, "Dns Records", None, None, reference(0, n), "rawinsert"))
            )
            for n in range(count)
        ]
        started = time.perf_counter()
        for n, document in enumerate(documents):
            conn.execute(
                "INSERT INTO tasks (id, scheduler_id, organisation, type, priority, status, hash, data, attempts,"
                " created_at, modified_at, fair_key) VALUES (gen_random_uuid(), 'boefje-rawinsert', 'rawinsert',"
                " 'boefje', 3, 'queued', %s, %s::jsonb, 0, now(), now(), 0)",
                (f"raw-{n}", document),
            )
        seconds = time.perf_counter() - started
        conn.execute("DELETE FROM organisations WHERE id = 'rawinsert'")
    return count / seconds


def run_schedulers(store: Store, settings: Settings, link: OutsideLinks, organisations: int) -> float:
    """Every organisation's boefje scheduler ticked until idle, shared by THREADS threads, then stopped;
    seconds until idle."""
    context = SchedulerContext(store, settings, "bench", "here", catalogue=KatalogusCatalogue(), links=link)
    schedulers = [
        BoefjeScheduler(SchedulerSpec(organisation(org), SchedulerType.BOEFJE), context) for org in range(organisations)
    ]
    for scheduler in schedulers:
        scheduler.setup()
    failures: list[BaseException] = []

    def work(share: list[BoefjeScheduler]) -> None:
        try:
            busy = list(share)
            while busy:
                busy = [scheduler for scheduler in busy if scheduler.tick()]
        except BaseException as exc:  # reported by the caller
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(schedulers[n::THREADS],)) for n in range(THREADS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    context.leases().release_all("stopped")  # as a leaving worker does: the next rounds' schedulers claim them
    if failures:
        raise failures[0]
    return seconds


@dataclass(frozen=True)
class Estate:
    """What both rounds share: the database, the stand-ins' addresses and how to read their calls."""

    ctx: Context
    organisations: int
    per_org: int
    katalogus_url: str
    octopoes_url: str
    standin_calls: Callable[[], dict[str, dict[str, int]]]  # the calls received since the last reading


def rescan_rounds(estate: Estate, deduplicate: bool) -> dict[str, Any]:
    """Freshly written due schedules turned into tasks by every organisation's boefje scheduler, with
    deduplication (twin checks) on or off: how fast, how late, and the calls the stand-ins received."""
    ctx, organisations = estate.ctx, estate.organisations
    total = organisations * estate.per_org
    deadlines = write_schedules(ctx, organisations, estate.per_org)
    openkat = OpenKatSettings(
        katalogus_url=estate.katalogus_url, octopoes_url=estate.octopoes_url, deduplicate=deduplicate
    )
    settings = Settings(database_url=ctx.database_url, openkat=openkat)
    link = OutsideLinks(
        KatalogusClient(ServiceClient("katalogus", estate.katalogus_url, timeout=10.0)),
        OctopoesClient(ServiceClient("octopoes", estate.octopoes_url, timeout=10.0)),
        openkat.katalogus_poll_seconds,
    )
    store = Store(ctx.database_url)
    try:
        catalogue_known(store, organisations)
        estate.standin_calls()  # counted from here: these rounds' calls only
        run_started = time.time()
        seconds = run_schedulers(store, settings, link, organisations)
    finally:
        store.dispose()
        link.katalogus.http.close()
        if link.octopoes is not None:
            link.octopoes.http.close()
    received = estate.standin_calls()
    with connect(ctx) as conn:
        rows = conn.execute(
            "SELECT schedule_id, extract(epoch FROM created_at) FROM tasks"
            " WHERE type = 'boefje' AND schedule_id IS NOT NULL"
        ).fetchall()
        left_due = conn.execute("SELECT count(*) FROM schedules WHERE deadline_at <= now() AND enabled").fetchone()
    lateness = [float(created) - max(deadlines[str(schedule_id)], run_started) for schedule_id, created in rows]
    outside = sum(sum(counts.values()) for counts in received.values())
    return {
        "deduplicate": deduplicate,
        "tasks": len(rows),
        "complete": len(rows) == total,
        "left_due": int(left_due[0]) if left_due else None,
        "seconds": seconds,
        "per_second": len(rows) / seconds,
        "lateness_s": {
            "p50": percentile(lateness, 0.50),
            "p99": percentile(lateness, 0.99),
            "max": max(lateness) if lateness else float("nan"),
        },
        "calls": received,
        "outside_calls": outside,
    }


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    organisations = ctx.size(ORGANISATIONS, 10)
    per_org = ctx.size(1000, 100)
    total = organisations * per_org
    raw_count = ctx.size(10_000, 1_000)
    fresh_database(ctx)
    with connect(ctx) as conn:
        add_organisations(conn, [organisation(org) for org in range(organisations)])
    spawn = multiprocessing.get_context("spawn")
    ports, orders, calls = spawn.Queue(), spawn.Queue(), spawn.Queue()
    child = spawn.Process(target=serve_standins, args=(organisations, per_org, LATENCY_MS, ports, orders, calls))
    child.start()

    def standin_calls() -> dict[str, dict[str, int]]:
        orders.put("calls")
        received: dict[str, dict[str, int]] = calls.get(timeout=60)
        return received

    try:
        katalogus_url, octopoes_url = ports.get(timeout=300)
        estate = Estate(ctx, organisations, per_org, katalogus_url, octopoes_url, standin_calls)
        # The baseline before, between and after the rounds (the load of a shared machine drifts).
        raw_runs = [raw_insert_rate(ctx, raw_count)]
        with_checks = rescan_rounds(estate, deduplicate=True)
        raw_runs.append(raw_insert_rate(ctx, raw_count))
        without_checks = rescan_rounds(estate, deduplicate=False)
        raw_runs.append(raw_insert_rate(ctx, raw_count))
    finally:
        orders.put("stop")
        child.join(30)
        if child.is_alive():
            child.terminate()
    raw_rate = sum(raw_runs) / len(raw_runs)
    for series in (with_checks, without_checks):
        series["ratios"] = {
            "tasks_to_raw_insert": ratio(series["per_second"], raw_rate),
            "calls_per_1000": 1000 * series["outside_calls"] / total,
        }
    return {
        "organisations": organisations,
        "schedules": total,
        **with_checks,
        "complete": with_checks["complete"] and without_checks["complete"],
        "threads": THREADS,
        "latency_ms": LATENCY_MS,
        "raw_insert_per_second": raw_rate,
        "raw_insert_runs": raw_runs,
        "without_twin_checks": without_checks,
    }
