"""The director's cost: time of the first reconcile round (starting every scheduler), time until every
scheduler has written a `running` heartbeat, a steady round with nothing to do, and memory, for the
thread runner (schedulers as threads of the director) and the process runner (a `baton standalone`
child per scheduler). The process runner's children are forked from its fork server (control/
forking.py) and, for comparison in the same run, started as fresh interpreters (`fork_server=False`,
what a pod runs): for each child its unique memory (USS: what it adds, issue #33's target: at most
15 MiB), its proportional share of the shared pages (PSS) and its resident memory (VmRSS, RssAnon,
VmHWM), from psutil and /proc/<pid>/status; and where a forked child's unique memory comes from,
step by step (bench/fork_probe.py)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from baton.control.director import Director
from baton.control.runners import ProcessRunner, Runner, ThreadRunner
from baton.core.logging import configure_logging
from baton.core.settings import Settings
from baton.runtime import scheduler_context
from baton.storage.engine import Store
from bench.scenarios.common import Context, add_organisations, connect, fresh_database
from harness.writelog import install

# Idle schedulers poll rarely, so the machine measures the director, not 3,000 pollers. Lease
# renewals (every retry period, one statement for all) keep their defaults: the retry period must
# stay below the renew deadline.
SLOW: dict[str, Any] = {"poll_interval_seconds": 30}
SLOW_ENV = {"BATON_POLL_INTERVAL_SECONDS": "30", "BATON_LOG_LEVEL": "warning"}
TIMEOUT = 600.0


def running(ctx: Context) -> int:
    with connect(ctx) as conn:
        row = conn.execute("SELECT count(*) FROM schedulers WHERE state = 'running'").fetchone()
    return int(row[0]) if row else 0


def status_mib(pid: int) -> dict[str, float] | None:
    """VmRSS (resident now), VmHWM (its peak) and RssAnon (the part not backed by files: not shared with
    other processes, unlike the libraries' pages) of a process, in MiB; None once it has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon"):
            values[key] = int(rest.split()[0]) / 1024  # kB
    return values


def full_memory_mib(pid: int) -> dict[str, float] | None:
    """USS (pages only this process maps: what it adds) and PSS (its share of every page it maps, a
    shared page divided among the processes mapping it), in MiB; None once it has gone."""
    try:
        info = psutil.Process(pid).memory_full_info()
    except psutil.Error:
        return None
    return {"uss": info.uss / 2**20, "pss": info.pss / 2**20}


def scheduler_processes(runner: ProcessRunner) -> dict[str, Any]:
    """Each child's own memory: one scheduler process as the process runner (or a pod) runs it; and
    the fork server's, whose pages its children share."""
    pids = [pid for spec in runner.list() if (pid := runner.pid(spec.id)) is not None]
    memory = [{**status, **full} for pid in pids if (status := status_mib(pid)) and (full := full_memory_mib(pid))]
    server_pid = runner.fork_server.pid if runner.fork_server is not None else None
    server = full_memory_mib(server_pid) if server_pid is not None else None
    server_rss = status_mib(server_pid) if server_pid is not None else None

    def median(key: str) -> float | None:
        return statistics.median(entry[key] for entry in memory) if memory else None

    def largest(key: str) -> float | None:
        return max((entry[key] for entry in memory), default=None)

    total_pss = sum(entry["pss"] for entry in memory) + (server["pss"] if server else 0.0)
    return {
        "forked": runner.fork_server is not None,
        "processes": len(memory),
        "uss_median_mib": median("uss"),
        "uss_max_mib": largest("uss"),
        "pss_median_mib": median("pss"),
        "rss_median_mib": median("VmRSS"),
        "rss_max_mib": largest("VmRSS"),
        "hwm_max_mib": largest("VmHWM"),
        "anon_median_mib": median("RssAnon"),
        "server_uss_mib": server["uss"] if server else None,
        "server_rss_mib": server_rss["VmRSS"] if server_rss else None,
        # Every page of the children and their server counted once: what N schedulers cost in all.
        "total_pss_mib": total_pss,
        "pss_per_scheduler_mib": total_pss / len(memory) if memory else None,
    }


# What a scheduler process imports, library by library, in the order `baton standalone` needs them:
# each step is a fresh interpreter importing everything up to it (the standards' libraries first,
# then Baton's own modules), so the steps show what each adds and where the floor lies.
IMPORT_STEPS: list[tuple[str, list[str]]] = [
    ("Python interpreter (site only)", []),
    ("+ asyncio (psycopg imports it)", ["asyncio"]),
    ("+ psycopg", ["psycopg"]),
    ("+ SQLAlchemy (Core and ORM)", ["sqlalchemy", "sqlalchemy.orm"]),
    ("+ pydantic, pydantic-settings", ["pydantic", "pydantic_settings"]),
    ("+ structlog, typer (logging, the CLI)", ["structlog", "typer"]),
    ("+ Baton's modules a scheduler runs", ["baton.cli", "baton.runtime", "baton.ingest.registry"]),
]
MEASURE_RSS = (
    "import importlib, sys\n"
    "for name in sys.argv[1:]: importlib.import_module(name)\n"
    "line = next(l for l in open('/proc/self/status') if l.startswith('VmRSS:'))\n"
    "print(int(line.split()[1]))"
)


def import_floor() -> list[dict[str, Any]]:
    """Resident memory of a fresh interpreter after each cumulative step of IMPORT_STEPS (median of 3)."""
    steps: list[dict[str, Any]] = []
    modules: list[str] = []
    for label, more in IMPORT_STEPS:
        modules = [*modules, *more]
        samples = [
            int(subprocess.run([sys.executable, "-c", MEASURE_RSS, *modules], check=True, capture_output=True).stdout)
            / 1024
            for _ in range(3)
        ]
        steps.append({"step": label, "modules": modules, "rss_mib": statistics.median(samples)})
    return steps


def one_case(
    ctx: Context,
    runner_kind: str,
    organisations: int,
    overrides: dict[str, Any] | None = None,
    audit: bool = False,
    schedulers: int | None = None,
) -> dict[str, Any]:
    """`audit`: with the write audit's triggers (harness.writelog), as the workers are measured.
    `runner_kind`: thread, process (children forked from the fork server) or process-exec (each a
    fresh interpreter). `schedulers`: keep only that many of the organisations' schedulers (all three
    types, in turn), for a process count that is not a multiple of three."""
    fresh_database(ctx)
    if audit:
        install(ctx.database_url)
    with connect(ctx) as conn:
        add_organisations(conn, [f"dir-{n:05d}" for n in range(organisations)])
        if schedulers is not None:
            conn.execute(
                "DELETE FROM schedulers WHERE id NOT IN"
                " (SELECT id FROM schedulers ORDER BY organisation, type LIMIT %s)",
                (schedulers,),
            )
    store = Store(ctx.database_url)
    settings = Settings(database_url=ctx.database_url, **{**SLOW, **(overrides or {})})
    runner: Runner
    if runner_kind == "thread":
        runner = ThreadRunner(scheduler_context(store, settings, "thread"))
    else:
        runner = ProcessRunner(store, ctx.database_url, extra_env=SLOW_ENV, fork_server=runner_kind == "process")
    director = Director(store, settings, runner)
    me = psutil.Process()
    rss_before = me.memory_info().rss
    started = time.perf_counter()
    director.reconcile()
    reconcile_seconds = time.perf_counter() - started
    expected = organisations * 3 if schedulers is None else schedulers
    while running(ctx) < expected and time.perf_counter() - started < TIMEOUT:
        time.sleep(0.2)
    converged = time.perf_counter() - started
    all_running = running(ctx) == expected
    children = me.children(recursive=True) if isinstance(runner, ProcessRunner) else []
    rss = me.memory_info().rss - rss_before + sum(child.memory_info().rss for child in children)
    # Steady: once every scheduler has had its first tick (spread over one poll interval after start).
    time.sleep(max(0.0, settings.timing.poll_interval_seconds - (time.perf_counter() - started)))
    # A child's unique memory grows with what it has run: measured once every one has ticked.
    per_process = scheduler_processes(runner) if isinstance(runner, ProcessRunner) else None
    second = time.perf_counter()
    director.reconcile()  # idempotent: nothing to start
    steady = time.perf_counter() - second
    director.stop(timeout=60)
    store.dispose()
    return {
        "runner": runner_kind,
        "organisations": organisations,
        "schedulers": expected,
        "reconcile_s": reconcile_seconds,
        "converged_s": converged,
        "all_running": all_running,
        "steady_reconcile_ms": steady * 1000,
        "memory_mib": rss / 2**20,
        "per_scheduler_mib": rss / 2**20 / expected,
        "scheduler_process": per_process,
    }


# Process-runner children: forked, 10 and 50 of them; fresh interpreters, 10, for comparison.
PROCESS_CASES = (("process", 10), ("process", 50), ("process-exec", 10))
QUICK_PROCESS_CASES = (("process", 4), ("process-exec", 4))


def fork_probe(ctx: Context) -> dict[str, Any]:
    """bench/fork_probe.py on the last case's organisations (their schedulers stopped): a forked
    child's USS step by step, and what it allocated itself."""
    seconds = SLOW["poll_interval_seconds"] + 2  # after its first tick, as the children above
    env = {**os.environ, **SLOW_ENV, "BATON_DATABASE_URL": ctx.database_url}
    command = [sys.executable, "-m", "bench.fork_probe", "dir-00000", "dir-00001", str(seconds)]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True, timeout=seconds + 120)
    return {"seconds": seconds, "uss_mib": json.loads(done.stdout.strip().splitlines()[-1])}


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    threads = [("thread", 10)] if ctx.quick else [("thread", 100), ("thread", 1000)]
    results = [one_case(ctx, kind, organisations) for kind, organisations in threads]
    for kind, count in QUICK_PROCESS_CASES if ctx.quick else PROCESS_CASES:
        results.append(one_case(ctx, kind, -(-count // 3), schedulers=count))
    forked = [case for case in results if case["runner"] == "process"]
    largest = max(forked, key=lambda case: case["schedulers"])
    fresh = next(case for case in results if case["runner"] == "process-exec")
    return {
        "cases": results,
        # The target's measurement: forked children, the largest number of them.
        "scheduler_process": largest["scheduler_process"],
        "fresh_interpreter_process": fresh["scheduler_process"],
        "import_floor": import_floor(),
        "fork_probe": fork_probe(ctx),
    }
