"""Baton's benchmarks: every performance claim comes from here, as a ratio against a baseline
measured in the same run on the same machine (these machines are noisy, so absolute numbers are
only indicative). Run with `bash bench/run.sh`; results go to docs/benchmarks.md and a plot to
docs/benchmarks.png.

Measured:
1. pop throughput through the HTTP API (1, 8, 32 clients; 1 and 3 API replicas) against the same
   pop statement sent straight to PostgreSQL by as many clients;
2. pushes through the API against a raw INSERT, and RabbitMQ events → queued tasks against the same
   raw INSERT;
3. pop latency p50/p99 with 10k, 100k and 1M queued tasks;
4. director reconcile time and memory for the thread and process runners.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import platform
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
from tqdm import tqdm

from bench.replication import api_replicas

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "boefje-bench"
BATCH = 10  # tasks per request in the batched-pop series
NO_AUTH = {"BATON_AUTH": "off"}
ORG = "bench"

# The statement baton/queue.py::pop sends on PostgreSQL, written out: the raw-SQL baseline.
POP_SQL = """
WITH claimed AS MATERIALIZED (
  SELECT seq FROM tasks WHERE status = 'queued' AND scheduler_id = %(queue)s
  ORDER BY priority, seq LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE tasks SET status = 'dispatched', modified_at = now()
WHERE seq IN (SELECT seq FROM claimed) AND status = 'queued'
RETURNING id, scheduler_id, organisation, type, priority, status, hash, data, created_at, modified_at
"""
INSERT_SQL = """
INSERT INTO tasks (id, scheduler_id, organisation, type, priority, status, data, attempts, created_at, modified_at)
VALUES (%(id)s, %(queue)s, %(org)s, 'boefje', %(priority)s, 'queued', %(data)s, 0, now(), now())
"""
FILL_SQL = """
INSERT INTO tasks (id, scheduler_id, organisation, type, priority, status, data, attempts, created_at, modified_at)
SELECT gen_random_uuid(), %(queue)s, %(org)s, 'boefje', (random() * 100)::int, 'queued',
       jsonb_build_object('n', n), 0, now(), now()
FROM generate_series(1, %(count)s) AS n
"""


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


# -- load generation ---------------------------------------------------------------------------------


def _make_operation(kind: str, target: str, database_url: str) -> Callable[[], int]:
    """One client's operation; returns how many tasks it moved (0: the queue ran dry, run invalid)."""
    if kind.startswith("http"):
        client = httpx.Client(base_url=target, timeout=30)
        if kind == "http_pop":
            return lambda: int(client.post(f"/queues/{QUEUE}/pop").json() is not None)
        if kind == "http_pop_batch":
            return lambda: len(client.post(f"/schedulers/{QUEUE}/pop", params={"limit": BATCH}).json()["results"])
        if kind != "http_push":
            raise ValueError(f"unknown load kind {kind!r}")
        counter = iter(range(10**9))
        return lambda: int(
            client.post(f"/queues/{QUEUE}/push", json={"priority": next(counter) % 100, "data": {"n": 1}}).status_code
            == 201
        )
    conn = psycopg.connect(libpq_url(database_url), autocommit=True)
    if kind == "raw_pop":
        return lambda: len(conn.execute(POP_SQL, {"queue": QUEUE}).fetchall())
    if kind != "raw_insert":
        raise ValueError(f"unknown load kind {kind!r}")
    counter = iter(range(10**9))
    return lambda: (
        conn.execute(
            INSERT_SQL,
            {"id": uuid.uuid4(), "queue": QUEUE, "org": ORG, "priority": next(counter) % 100, "data": '{"n": 1}'},
        ).rowcount
    )


def _load_process(
    kind: str, targets: list[str], database_url: str, threads: int, start_at: float, duration: float, results: Any
) -> None:
    counts = [0] * threads
    dry = [False] * threads

    def run(index: int) -> None:
        operation = _make_operation(kind, targets[index % len(targets)], database_url)
        while time.time() < start_at:
            time.sleep(0.001)
        deadline = start_at + duration
        while time.time() < deadline:
            moved = operation()
            if not moved:
                dry[index] = True
                return
            counts[index] += moved

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put((sum(counts), any(dry)))


def measure_rate(kind: str, targets: list[str], database_url: str, clients: int, duration: float) -> float:
    """Operations per second over `duration`, with `clients` concurrent clients spread over processes
    (Python threads share a GIL; several processes keep the load generator from being the limit)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes_count = min(clients, 4)
    shares = [clients // processes_count + (1 if i < clients % processes_count else 0) for i in range(processes_count)]
    start_at = time.time() + 3.0  # time for the spawned processes to import and connect
    processes = [
        context.Process(target=_load_process, args=(kind, targets, database_url, share, start_at, duration, results))
        for share in shares
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=duration + 120) for _ in processes]
    for process in processes:
        process.join()
    if any(dry for _, dry in outcomes):
        raise RuntimeError(f"{kind}: the queue ran dry during the measurement; fill more tasks")
    return sum(count for count, _ in outcomes) / duration


# -- servers and data ---------------------------------------------------------------------------------


def reset(database_url: str, fill: int = 0) -> None:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute("TRUNCATE tasks, events, boefje_runs RESTART IDENTITY")
        if fill:
            conn.execute(FILL_SQL, {"queue": QUEUE, "org": ORG, "count": fill})
            conn.execute("VACUUM ANALYZE tasks")


def prepare_database(database_url: str) -> None:
    from baton.plugins import seed_catalogue
    from baton.store import Store, create_organisation, get_organisation

    store = Store(database_url)
    store.migrate()
    with store.session() as session:
        seed_catalogue(session, None)
        try:
            get_organisation(session, ORG)
        except LookupError:
            create_organisation(session, ORG, "Bench", maxsize=0)
    with store.session() as session:
        from baton.models import Scheduler

        for row in session.query(Scheduler).filter(Scheduler.organisation == ORG):
            row.maxsize = 0
    store.dispose()


# -- the benchmarks ---------------------------------------------------------------------------------


@dataclass
class Results:
    started: str
    quick: bool
    pop: dict[tuple[str, int], float] = field(default_factory=dict)  # (series, clients) -> ops/s
    push: dict[str, float] = field(default_factory=dict)
    latency: dict[int, dict[str, float]] = field(default_factory=dict)
    director: list[dict[str, Any]] = field(default_factory=list)


def bench_pop(results: Results, url: str, clients_list: list[int], duration: float, bar: tqdm) -> None:
    fill = 250_000 if not results.quick else 30_000
    for replicas in (1, 3):
        with api_replicas(url, replicas, NO_AUTH) as targets:
            for clients in clients_list:
                reset(url, fill)
                bar.set_description(f"pop: HTTP, {replicas} replica(s), {clients} clients")
                results.pop[(f"HTTP API, {replicas} replica{'s' if replicas > 1 else ''}", clients)] = measure_rate(
                    "http_pop", targets, url, clients, duration
                )
                bar.update()
    with api_replicas(url, 1, NO_AUTH) as targets:
        reset(url, fill)
        bar.set_description(f"pop: HTTP, limit={BATCH} per request, 8 clients")
        results.pop[(f"HTTP API, 1 replica, {BATCH} tasks per request", 8)] = measure_rate(
            "http_pop_batch", targets, url, 8, duration
        )
        bar.update()
    for clients in clients_list:
        reset(url, fill)
        bar.set_description(f"pop: raw SQL, {clients} clients")
        results.pop[("raw SQL (same statement)", clients)] = measure_rate("raw_pop", [""], url, clients, duration)
        bar.update()


def bench_push(results: Results, url: str, amqp_url: str, duration: float, events: int, bar: tqdm) -> None:
    reset(url)
    bar.set_description("push: raw INSERT, 8 clients")
    results.push["raw INSERT, 8 clients"] = measure_rate("raw_insert", [""], url, 8, duration)
    bar.update()
    reset(url)
    with api_replicas(url, 1, NO_AUTH) as targets:
        bar.set_description("push: HTTP API, 8 clients")
        results.push["HTTP push, 8 clients"] = measure_rate("http_push", targets, url, 8, duration)
    bar.update()
    reset(url)
    bar.set_description("push: raw INSERT, 1 client")
    results.push["raw INSERT, 1 client"] = measure_rate("raw_insert", [""], url, 1, duration)
    bar.update()
    bar.set_description(f"ingest: {events} RabbitMQ events")
    results.push["RabbitMQ events → tasks, 1 scheduler"] = bench_ingest(url, amqp_url, events)
    bar.update()


def bench_ingest(url: str, amqp_url: str, events: int) -> float:
    """Events per second from a RabbitMQ queue into queued tasks by one normalizer scheduler."""
    from baton.config import Settings
    from baton.events import RawFileReceived
    from baton.messaging import Publisher, RabbitMQSource, event_queue
    from baton.models import SchedulerType
    from baton.schedulers import NormalizerScheduler, SchedulerContext, SchedulerSpec
    from baton.store import Store

    reset(url)
    org = ORG
    queue_name = event_queue(org, SchedulerType.NORMALIZER)
    publisher = Publisher(amqp_url)
    publisher.publish(queue_name, {"type": "raw_file_received", "raw_file": {"id": "warm-up", "mime_types": ["x"]}})
    channel_purge(amqp_url, queue_name)
    run_id = uuid.uuid4().hex[:8]
    for n in range(events):
        publisher.publish_event(
            org,
            RawFileReceived.model_validate(
                {"type": "raw_file_received", "raw_file": {"id": f"{run_id}-{n}", "mime_types": ["boefje/dns-records"]}}
            ),
        )
    publisher.close()
    store = Store(url)
    settings = Settings(database_url=url, poll_interval_seconds=0.01, heartbeat_interval_seconds=5)
    context = SchedulerContext(
        store=store,
        settings=settings,
        runner="bench",
        location="bench",
        source_factory=lambda spec: RabbitMQSource(amqp_url, queue_name, prefetch=500),
    )
    scheduler = NormalizerScheduler(SchedulerSpec(org, SchedulerType.NORMALIZER), context)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    started = time.perf_counter()
    thread.start()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM tasks WHERE organisation = %s", (org,)).fetchone()[0] < events:  # type: ignore[index]
            time.sleep(0.05)
    elapsed = time.perf_counter() - started
    scheduler.stop()
    thread.join(10)
    store.dispose()
    return events / elapsed


def channel_purge(amqp_url: str, queue_name: str) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    connection.channel().queue_purge(queue_name)
    connection.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


def bench_latency(results: Results, url: str, sizes: list[int], pops: int, bar: tqdm) -> None:
    with api_replicas(url, 1, NO_AUTH) as targets:
        client = httpx.Client(base_url=targets[0], timeout=30)
        for size in sizes:
            bar.set_description(f"latency: filling {size:,} queued tasks")
            reset(url, size)
            http, raw = [], []
            with psycopg.connect(libpq_url(url), autocommit=True) as conn:
                for _ in range(20):  # warm caches and connections
                    client.post(f"/queues/{QUEUE}/pop")
                    conn.execute(POP_SQL, {"queue": QUEUE}).fetchall()
                bar.set_description(f"latency: {pops} pops at {size:,} queued")
                for _ in range(pops):
                    started = time.perf_counter()
                    assert client.post(f"/queues/{QUEUE}/pop").json() is not None
                    http.append((time.perf_counter() - started) * 1000)
                    started = time.perf_counter()
                    assert conn.execute(POP_SQL, {"queue": QUEUE}).fetchall()
                    raw.append((time.perf_counter() - started) * 1000)
            results.latency[size] = {
                "http_p50": statistics.median(http),
                "http_p99": percentile(http, 0.99),
                "raw_p50": statistics.median(raw),
                "raw_p99": percentile(raw, 0.99),
            }
            bar.update()


def bench_director(results: Results, url: str, cases: list[tuple[str, int]], bar: tqdm) -> None:
    from sqlalchemy import delete, func, select

    from baton.config import Settings
    from baton.director import Director
    from baton.models import Organisation, Scheduler, SchedulerState
    from baton.runners import ProcessRunner, Runner, ThreadRunner
    from baton.schedulers import SchedulerContext
    from baton.store import Store, create_organisation

    cleanup = Store(url)
    with cleanup.session() as session:  # only the organisations made here may run schedulers
        session.execute(delete(Organisation))
    cleanup.dispose()
    for runner_kind, organisations in cases:
        bar.set_description(f"director: {runner_kind} runner, {organisations} organisations")
        store = Store(url)
        with store.session() as session:
            session.execute(delete(Organisation).where(Organisation.id.like("dir-%")))
        with store.session() as session:
            for n in range(organisations):
                create_organisation(session, f"dir-{n:05d}", "d", maxsize=0)
        settings = Settings(database_url=url, heartbeat_interval_seconds=30, poll_interval_seconds=30)
        runner: Runner
        if runner_kind == "thread":
            runner = ThreadRunner(SchedulerContext(store=store, settings=settings, runner="thread", location="bench"))
        else:
            runner = ProcessRunner(
                store,
                url,
                extra_env={
                    "BATON_HEARTBEAT_INTERVAL_SECONDS": "30",
                    "BATON_POLL_INTERVAL_SECONDS": "30",
                    "BATON_LOG_LEVEL": "warning",
                },
            )
        director = Director(store, settings, runner)
        me = psutil.Process()
        rss_before = me.memory_info().rss
        started = time.perf_counter()
        director.reconcile()
        reconcile_seconds = time.perf_counter() - started
        expected = organisations * 3

        def running(store: Store = store) -> int:
            with store.session() as session:
                return (
                    session.scalar(
                        select(func.count())
                        .select_from(Scheduler)
                        .where(Scheduler.organisation.like("dir-%"), Scheduler.state == SchedulerState.RUNNING.value)
                    )
                    or 0
                )

        deadline = time.perf_counter() + 600
        while running() < expected and time.perf_counter() < deadline:
            time.sleep(0.2)
        converged = time.perf_counter() - started
        children = me.children(recursive=True) if runner_kind == "process" else []
        rss = me.memory_info().rss - rss_before + sum(child.memory_info().rss for child in children)
        second = time.perf_counter()
        director.reconcile()  # idempotent: nothing to start
        steady = time.perf_counter() - second
        results.director.append(
            {
                "runner": runner_kind,
                "organisations": organisations,
                "schedulers": expected,
                "reconcile_s": reconcile_seconds,
                "converged_s": converged,
                "all_running": running() == expected,
                "steady_reconcile_ms": steady * 1000,
                "memory_mib": rss / 2**20,
                "per_scheduler_mib": rss / 2**20 / expected,
            }
        )
        director.stop(timeout=30)
        with store.session() as session:
            session.execute(delete(Organisation).where(Organisation.id.like("dir-%")))
        store.dispose()
        bar.update()


# -- report ------------------------------------------------------------------------------------------


def write_plot(results: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    series = sorted({name for name, _ in results.pop})
    for name in series:
        if "per request" in name:
            continue
        points = sorted((clients, rate) for (n, clients), rate in results.pop.items() if n == name)
        left.plot([c for c, _ in points], [r for _, r in points], marker="o", label=name)
    left.set_xscale("log", base=2)
    left.set_xlabel("concurrent clients")
    left.set_ylabel("pops per second")
    left.set_title("Pop throughput (same run, same machine)")
    left.legend()
    sizes = sorted(results.latency)
    for key, label in (
        ("http_p50", "HTTP p50"),
        ("http_p99", "HTTP p99"),
        ("raw_p50", "SQL p50"),
        ("raw_p99", "SQL p99"),
    ):
        right.plot(sizes, [results.latency[s][key] for s in sizes], marker="o", label=label)
    right.set_xscale("log")
    right.set_xlabel("queued tasks")
    right.set_ylabel("pop latency (ms)")
    right.set_title("Pop latency against queue size")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def write_report(results: Results, path: Path) -> None:
    raw = {clients: rate for (name, clients), rate in results.pop.items() if name.startswith("raw")}
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `bash bench/run.sh{' --quick' if results.quick else ''}` on {results.started} "
        f"({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        "PostgreSQL and RabbitMQ on the same machine as the load generator).",
        "Every claim is a ratio against a baseline measured in the same run: the machines are noisy, "
        "so the absolute numbers only indicate an order of magnitude.",
        "",
        "![throughput and latency](benchmarks.png)",
        "",
        "## Pop throughput: HTTP API against the raw-SQL limit",
        "",
        "The baseline sends the very statement `baton/queue.py::pop` uses straight to PostgreSQL (psycopg, "
        "autocommit), with as many clients as the HTTP run.",
        "",
        "| series | clients | pops/s | ratio to raw SQL at the same clients |",
        "|---|---:|---:|---:|",
    ]
    for (name, clients), rate in sorted(results.pop.items(), key=lambda item: (item[0][0], item[0][1])):
        lines.append(f"| {name} | {clients} | {rate:,.0f} | {rate / raw[clients]:.2f} |")
    http8 = max(
        rate
        for (name, clients), rate in results.pop.items()
        if clients == 8 and name.startswith("HTTP") and "per request" not in name
    )
    batched = next(rate for (name, _), rate in results.pop.items() if "per request" in name)
    target_met = http8 >= 0.5 * raw[8]
    lines += [
        "",
        f"**Target** (HTTP pop at 8 clients ≥ 50% of the raw-SQL limit, one task per request): the best HTTP "
        f"series reaches {http8 / raw[8]:.0%} — {'met' if target_met else 'missed'}. Popping {BATCH} tasks per "
        f"request (`POST /schedulers/{{id}}/pop?limit={BATCH}`) moves {batched / raw[8]:.0%} of the single-task "
        "raw-SQL rate in tasks per second.",
        "",
        "## Push and ingest against a raw INSERT",
        "",
        "| what | per second | ratio to raw INSERT (same clients) |",
        "|---|---:|---:|",
    ]
    for name, rate in results.push.items():
        baseline = (
            results.push["raw INSERT, 1 client"]
            if ("1 client" in name or "RabbitMQ" in name)
            else results.push["raw INSERT, 8 clients"]
        )
        lines.append(f"| {name} | {rate:,.0f} | {rate / baseline:.2f} |")
    lines += [
        "",
        "The RabbitMQ ingest rate is one scheduler turning pre-published `raw_file_received` events into tasks "
        "(validate, match normalizers, dedup check, insert, ack after commit), compared with one client's raw INSERT.",
        "",
        "## Pop latency against queue size",
        "",
        "| queued tasks | HTTP p50 ms | HTTP p99 ms | SQL p50 ms | SQL p99 ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    for size in sorted(results.latency):
        row = results.latency[size]
        lines.append(
            f"| {size:,} | {row['http_p50']:.2f} | {row['http_p99']:.2f} | {row['raw_p50']:.2f} | "
            f"{row['raw_p99']:.2f} |"
        )
    sizes = sorted(results.latency)
    smallest, largest = sizes[0], sizes[-1]
    ratio = results.latency[largest]["http_p99"] / results.latency[smallest]["http_p99"]
    lines += [
        "",
        f"**Target** (p99 at {largest:,} within 2x of p99 at {smallest:,}): HTTP p99 ratio {ratio:.2f} — "
        f"{'met' if ratio <= 2 else 'missed'}; SQL p99 ratio "
        f"{results.latency[largest]['raw_p99'] / results.latency[smallest]['raw_p99']:.2f}.",
        "",
        "## Director: reconcile time and memory",
        "",
        "`reconcile` is the first round (starting every scheduler); `converged` is until every scheduler has "
        "written a `running` heartbeat; memory is the resident-set growth of the director (thread runner) or "
        "the director plus its children (process runner).",
        "",
        "| runner | organisations | schedulers | reconcile s | converged s | all running | steady round ms | "
        "memory MiB | MiB per scheduler |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for row in results.director:
        lines.append(
            f"| {row['runner']} | {row['organisations']} | {row['schedulers']} | {row['reconcile_s']:.2f} | "
            f"{row['converged_s']:.1f} | {'yes' if row['all_running'] else 'NO'} | {row['steady_reconcile_ms']:.1f} | "
            f"{row['memory_mib']:.0f} | {row['per_scheduler_mib']:.2f} |"
        )
    lines.append("")
    path.write_text("\n".join(lines) + "\n" + ANALYSIS_MARKER + "\n")


ANALYSIS_MARKER = "<!-- measured above; discussion of these numbers follows in the next section -->"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--quick", action="store_true", help="Small sizes and short runs: a smoke test.")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()

    from baton.logs import configure_logging

    configure_logging("warning")
    quick = args.quick
    duration = 1.5 if quick else 5.0
    clients_list = [1, 8, 32] if not quick else [1, 8]
    sizes = [10_000, 100_000, 1_000_000] if not quick else [1_000, 10_000]
    director_cases = (
        [("thread", 100), ("thread", 1000), ("process", 10), ("process", 30)]
        if not quick
        else [("thread", 10), ("process", 2)]
    )
    results = Results(started=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), quick=quick)
    prepare_database(args.database_url)
    steps = len(clients_list) * 3 + 5 + len(sizes) + len(director_cases)
    with tqdm(total=steps, unit="step") as bar:
        bench_pop(results, args.database_url, clients_list, duration, bar)
        bench_push(results, args.database_url, args.amqp_url, duration, 500 if quick else 5000, bar)
        bench_latency(results, args.database_url, sizes, 100 if quick else 300, bar)
        bench_director(results, args.database_url, director_cases, bar)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    previous_analysis = ""
    if output.exists() and ANALYSIS_MARKER in output.read_text():
        previous_analysis = output.read_text().split(ANALYSIS_MARKER, 1)[1]
    write_report(results, output)
    if previous_analysis.strip():
        output.write_text(output.read_text() + previous_analysis)
    write_plot(results, output.with_suffix(".png"))
    print(f"wrote {output} and {output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
