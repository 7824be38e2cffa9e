"""What every scenario needs: the context it runs in, a fresh database with organisations and queued
tasks, `baton serve` processes, and measurements summarised as plain data.

Scenarios build their own state from scratch (a fresh database content), so they run in any order
and alone (`python -m bench.run --only depth`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from baton.core.fairness import FAIR_UNIT
from baton.core.queueing import PopShape
from baton.storage.queues import pops, statements
from baton.storage.urls import libpq_conninfo
from bench.loadgen import Rate, Request, measure
from harness.cputime import parent_of, stat, tree_seconds
from harness.servers import stop_processes, wait_ready
from harness.waiting import free_port

ORG = "bench"
QUEUE = f"boefje-{ORG}"
# What a boefje task carries in OpenKAT, roughly: which boefje, on which object.
TASK_DATA_SQL = (
    "jsonb_build_object('boefje', jsonb_build_object('id', 'dns-records'),"
    " 'input_ooi', 'Hostname|internet|host-' || n || '.example.com')"
)
TASK_DATA_JSON = '{"boefje": {"id": "dns-records"}, "input_ooi": "Hostname|internet|host.example.com"}'
SERVER_ENV = {"BATON_AUTH": "off", "BATON_LOG_LEVEL": "warning", "BATON_QUEUE_MAXSIZE": "0"}


@dataclass(frozen=True)
class Context:
    """Where and how big: the database and broker to use, and whether this is a quick smoke run."""

    database_url: str
    amqp_url: str
    quick: bool = False
    # A checkout of the code before the restructure (with its own .venv), for the profile's "before".
    old_worktree: Path | None = None
    # The soak run's length (None: an hour, or a minute with --quick).
    soak_minutes: float | None = None
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="baton-bench-")))

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    @property
    def duration(self) -> float:
        """Seconds each throughput measurement runs."""
        return 2.0 if self.quick else 5.0

    @property
    def rounds(self) -> int:
        """Each series is measured this many times, interleaved with the others (the machine is noisy)."""
        return 1 if self.quick else 3

    @property
    def libpq(self) -> str:
        return libpq_conninfo(self.database_url)


def now() -> datetime:
    return datetime.now(UTC)


# -- the database ----------------------------------------------------------------------------------------


def connect(ctx: Context) -> psycopg.Connection[Any]:
    return psycopg.connect(ctx.libpq, autocommit=True)


def fresh_database(ctx: Context) -> None:
    """Current schema, the plugin catalogue, and nothing else: no organisations, tasks or counters,
    and no write audit left by an earlier scenario (its triggers would slow every push measured)."""
    from baton.core.settings import Settings
    from baton.runtime import prepare_store
    from harness.writelog import uninstall

    prepare_store(Settings(database_url=ctx.database_url)).dispose()
    uninstall(ctx.database_url)
    with connect(ctx) as conn:
        conn.execute("TRUNCATE organisations, tasks, events, boefje_runs, leaders, queue_counters CASCADE")


def has_column(conn: psycopg.Connection[Any], table: str, column: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = %s AND column_name = %s", (table, column)
    ).fetchone()
    return bool(row and row[0])


def add_organisations(conn: psycopg.Connection[Any], ids: Sequence[str], maxsize: int = 0) -> None:
    """Organisations and their three queues in two statements (plain SQL: works on older schemas too)."""
    conn.execute(
        "INSERT INTO organisations (id, name, created_at) SELECT o, o, now() FROM unnest(%s::text[]) AS o",
        (list(ids),),
    )
    conn.execute(
        "INSERT INTO schedulers (id, organisation, type, maxsize, enabled, state, created_at)"
        " SELECT t || '-' || o, o, t, %s, true, 'stopped', now()"
        " FROM unnest(%s::text[]) AS o, unnest(ARRAY['boefje', 'normalizer', 'report']) AS t",
        (maxsize, list(ids)),
    )


def fill(
    conn: psycopg.Connection[Any],
    organisations: Sequence[str],
    per_organisation: int,
    priority: str = "(random() * 100)::int",
    vacuum: bool = True,
) -> None:
    """Queue `per_organisation` boefje tasks for each organisation in one statement (the counter
    triggers are statement-level: one counter update). Fair tags n * FAIR_UNIT per organisation, so
    organisations interleave as if each had pushed its tasks one by one."""
    fair = has_column(conn, "tasks", "fair_key")
    columns = "id, scheduler_id, organisation, type, priority, status, data, attempts, created_at, modified_at"
    values = f"gen_random_uuid(), 'boefje-' || o, o, 'boefje', {priority}, 'queued', {TASK_DATA_SQL}, 0, now(), now()"
    if fair:
        columns += ", fair_key"
        values += f", n::bigint * {FAIR_UNIT}"
    conn.execute(
        f"INSERT INTO tasks ({columns}) SELECT {values}"
        " FROM unnest(%s::text[]) AS o, generate_series(1, %s) AS n ORDER BY n, o",
        (list(organisations), per_organisation),
    )
    if vacuum:
        conn.execute("VACUUM ANALYZE tasks")


@contextmanager
def database_of_its_own(ctx: Context, name: str) -> Iterator[str]:
    """A new, empty database `name` on the run's PostgreSQL server (one left by an interrupted run is
    dropped first), its URL; dropped afterwards: for a version of Baton whose schema is not this one."""
    admin = libpq_conninfo(ctx.database_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(ctx.database_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_queue(ctx: Context, tasks: int) -> None:
    """The single-queue set-up most scenarios use: organisation `bench` (unbounded) with `tasks` queued."""
    fresh_database(ctx)
    with connect(ctx) as conn:
        add_organisations(conn, [ORG])
        if tasks:
            fill(conn, [ORG], tasks)


def wal_position(conn: Any) -> dict[str, float]:
    """The WAL written so far (bytes) and the checkpoints made so far (full-page images follow each)."""
    checkpointer = conn.execute("SELECT to_regclass('pg_catalog.pg_stat_checkpointer') IS NOT NULL").fetchone()[0]
    counted = (
        "(SELECT num_timed + num_requested FROM pg_stat_checkpointer)"  # PostgreSQL 17 on
        if checkpointer
        else "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)"
    )
    row = conn.execute(f"SELECT pg_current_wal_lsn()::text, {counted}").fetchone()
    return {"wal": _lsn_bytes(row[0]), "checkpoints": int(row[1])}


def _lsn_bytes(lsn: str) -> int:
    high, low = lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def postgres_version(ctx: Context) -> str:
    with connect(ctx) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


# -- servers ---------------------------------------------------------------------------------------------


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def serve(
    database_url: str,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    log_dir: Path | None = None,
) -> Iterator[Server]:
    """One `baton serve --no-director` process (auth off, unbounded queues), ready when yielded."""
    port = free_port()
    log = Path(log_dir or tempfile.mkdtemp(prefix="baton-bench-")) / f"serve-{port}.log"
    environment = {**os.environ, **SERVER_ENV, **(env or {}), "BATON_DATABASE_URL": database_url}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [python, "-m", "baton", "serve", "--no-director", "--port", str(port)],
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_ready([url])
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; its log: {log.read_text()[-2000:]}") from exc
        yield Server(url, process, log)
    finally:
        stop_processes([process])


@contextmanager
def minimal_app(url: str, log_dir: Path, app: str = "app", env: dict[str, str] | None = None) -> Iterator[str]:
    """bench/minimal_asgi.py's `app` (or another of its apps) under uvicorn, as `baton serve` runs
    (one process, no access log): its URL."""
    with minimal_server(url, log_dir, app, env) as server:
        yield server.url


@contextmanager
def minimal_server(url: str, log_dir: Path, app: str = "app", env: dict[str, str] | None = None) -> Iterator[Server]:
    """`minimal_app`, with its process (to read its CPU)."""
    port = free_port()
    environment = {**os.environ, "BATON_DATABASE_URL": url, "BENCH_QUEUE": QUEUE, "BENCH_ORG": ORG, **(env or {})}
    command = [sys.executable, "-m", "uvicorn", f"bench.minimal_asgi:{app}", "--port", str(port)]
    with (log_dir / f"minimal-{port}.log").open("wb") as log:
        process = subprocess.Popen(
            [*command, "--log-level", "warning", "--no-access-log"],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready([base])
        yield Server(base, process, log_dir / f"minimal-{port}.log")
    finally:
        stop_processes([process])


# -- requests ----------------------------------------------------------------------------------------------


def pop_statement(by_type: bool = False, fair: bool = True) -> tuple[str, dict[str, Any]]:
    """Baton's own pop statement as the server sends it, with its compiled default parameters."""
    shape = PopShape(together=False, by_queue=not by_type, fair=fair, caps=False)
    compiled = pops.build_pop(shape, "postgresql").compile(dialect=statements.dialect_of("postgresql"))
    sql = pops.pop_sql("postgresql", by_type, fair)
    assert sql == str(compiled)
    return sql, dict(compiled.params)


def pop_app_env(connections: int) -> dict[str, str]:
    """What bench/minimal_asgi.py's `pop_app` reads: Baton's pop statement for the bench queue, one task
    a pop, and its connections (as many as its clients)."""
    sql, defaults = pop_statement()
    return {
        "BENCH_POP_SQL": sql,
        "BENCH_POP_PARAMS": json.dumps({**defaults, "limit_": 1, "queue_": QUEUE}),
        "BENCH_CONNECTIONS": str(connections),
    }


def sql_pop(ctx: Context, queue: str | None = QUEUE, limit: int = 1, fair: bool = True) -> Request:
    """The raw-SQL baseline: Baton's pop statement via psycopg in autocommit (by type when queue is None)."""
    sql, defaults = pop_statement(by_type=queue is None, fair=fair)
    params = {**defaults, "limit_": limit, "now_": now()}
    params.update({"queue_": queue} if queue is not None else {"type_": "boefje"})
    return Request(kind="sql", target=ctx.libpq, counting="rows", sql=sql, params=params)


def http_pop(url: str, queue: str = QUEUE) -> Request:
    return Request(kind="http", target=url, counting="task", path=f"/queues/{queue}/pop")


def http_pop_many(url: str, scheduler: str, limit: int = 1, stop_when_dry: bool = True) -> Request:
    return Request(
        kind="http",
        target=url,
        counting="results",
        path=f"/schedulers/{scheduler}/pop?limit={limit}",
        stop_when_dry=stop_when_dry,
    )


# -- measuring ---------------------------------------------------------------------------------------------


def summarise(rates: Sequence[Rate]) -> dict[str, Any]:
    """Several runs of one series: the median rate (and each run's), median latencies, and where the
    server's CPU was read, its CPU per operation over all runs."""
    summary = {
        "per_second": statistics.median(rate.per_second for rate in rates),
        "runs": [round(rate.per_second, 1) for rate in rates],
        "operations": sum(rate.operations for rate in rates),
        "p50_ms": statistics.median(rate.p50_ms for rate in rates),
        "p99_ms": statistics.median(rate.p99_ms for rate in rates),
        "ran_dry": any(rate.ran_dry for rate in rates),
    }
    for kind in ("server", "database"):
        cpu = [getattr(rate, f"{kind}_cpu_s") for rate in rates]
        if all(seconds is not None for seconds in cpu) and summary["operations"]:
            summary[f"{kind}_cpu_ms_per_op"] = 1000 * sum(cpu) / summary["operations"]
    return summary


def with_server_cpu(run: Callable[[], Rate], pid: int) -> Callable[[], Rate]:
    """`run`, recording the CPU-seconds the server process (and its children) used meanwhile: the
    clients' warm-up call and the gate are inside, a few operations' worth against thousands."""
    return with_tree_cpu(run, pid, "server_cpu_s")


def with_database_cpu(run: Callable[[], Rate], postmaster: int) -> Callable[[], Rate]:
    """`run`, recording the CPU-seconds the PostgreSQL server (`postmaster_of`, its every process) used
    meanwhile: what the operations cost the database, which other work on its server would distort."""
    return with_tree_cpu(run, postmaster, "database_cpu_s")


def with_tree_cpu(run: Callable[[], Rate], root: int, field: str) -> Callable[[], Rate]:
    """`run`, setting the Rate's `field` to the CPU-seconds the process tree of `root` used meanwhile."""

    def measured() -> Rate:
        before = tree_seconds(root)
        rate = run()
        setattr(rate, field, tree_seconds(root) - before)
        return rate

    return measured


def postmaster_of(conn: Any) -> int:
    """The PostgreSQL server's postmaster: the parent of this connection's backend, on this machine."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    backend = int(row[0])
    if stat(backend) is None:
        raise RuntimeError("PostgreSQL does not run on this machine: its CPU time cannot be read from /proc")
    return parent_of(backend)


def interleaved(series: dict[str, Callable[[], Rate]], rounds: int) -> dict[str, dict[str, Any]]:
    """Measure every series once per round, in turn, so drift in the machine's load hits them alike."""
    rates: dict[str, list[Rate]] = {name: [] for name in series}
    for _ in range(rounds):
        for name, run in series.items():
            rates[name].append(run())
    return {name: summarise(runs) for name, runs in rates.items()}


def clients(request: Request, count: int, duration: float, processes: int = 4) -> Callable[[], Rate]:
    """A measurement to run later: `count` clients repeating `request` for `duration` seconds."""
    return lambda: measure([request] * count, duration, processes=processes)


def rows_against(measured: dict[str, dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """One row per measured `name|clients` series, with its ratio to `baseline|clients`."""
    rows = []
    for key, summary in measured.items():
        name, count = key.split("|")
        base = measured[f"{baseline}|{count}"]["per_second"]
        rows.append({"series": name, "clients": int(count), **summary, "ratio": ratio(summary["per_second"], base)})
    return rows


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def ratios_by_clients(
    measured: dict[str, dict[str, Any]], label: str, name: str, baseline: str, counts: Sequence[int]
) -> dict[str, float | None]:
    """`label_N`: the rate of series `name|N` over that of `baseline|N`, for each client count N."""
    return {
        f"{label}_{count}": ratio(
            measured[f"{name}|{count}"]["per_second"], measured[f"{baseline}|{count}"]["per_second"]
        )
        for count in counts
    }


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]
