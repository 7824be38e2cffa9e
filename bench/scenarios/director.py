"""The director's cost: time of the first reconcile round (starting every scheduler), time until every
scheduler has written a `running` heartbeat, a steady round with nothing to do, and memory, for the
thread runner (schedulers as threads of the director) and the process runner (a `baton standalone`
child per scheduler), whose children's own resident memory (VmRSS, and its peak VmHWM, from
/proc/<pid>/status) is what one scheduler process costs (issue #16's target: under 40 MiB)."""

from __future__ import annotations

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


def scheduler_processes(runner: ProcessRunner) -> dict[str, Any]:
    """Each child's own memory: one scheduler process as the process runner (or a pod) runs it."""
    pids = [pid for spec in runner.list() if (pid := runner.pid(spec.id)) is not None]
    memory = [entry for pid in pids if (entry := status_mib(pid))]
    rss = [entry["VmRSS"] for entry in memory]
    peaks = [entry["VmHWM"] for entry in memory]
    return {
        "processes": len(memory),
        "rss_median_mib": statistics.median(rss) if rss else None,
        "rss_max_mib": max(rss, default=None),
        "hwm_max_mib": max(peaks, default=None),
        "anon_median_mib": statistics.median(entry["RssAnon"] for entry in memory) if memory else None,
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
) -> dict[str, Any]:
    """`audit`: with the write audit's triggers (harness.writelog), as the workers are measured."""
    fresh_database(ctx)
    if audit:
        install(ctx.database_url)
    with connect(ctx) as conn:
        add_organisations(conn, [f"dir-{n:05d}" for n in range(organisations)])
    store = Store(ctx.database_url)
    settings = Settings(database_url=ctx.database_url, **{**SLOW, **(overrides or {})})
    runner: Runner
    if runner_kind == "thread":
        runner = ThreadRunner(scheduler_context(store, settings, "thread"))
    else:
        runner = ProcessRunner(store, ctx.database_url, extra_env=SLOW_ENV)
    director = Director(store, settings, runner)
    me = psutil.Process()
    rss_before = me.memory_info().rss
    started = time.perf_counter()
    director.reconcile()
    reconcile_seconds = time.perf_counter() - started
    expected = organisations * 3
    while running(ctx) < expected and time.perf_counter() - started < TIMEOUT:
        time.sleep(0.2)
    converged = time.perf_counter() - started
    all_running = running(ctx) == expected
    children = me.children(recursive=True) if runner_kind == "process" else []
    per_process = scheduler_processes(runner) if isinstance(runner, ProcessRunner) else None
    rss = me.memory_info().rss - rss_before + sum(child.memory_info().rss for child in children)
    # Steady: once every scheduler has had its first tick (spread over one poll interval after start).
    time.sleep(max(0.0, settings.timing.poll_interval_seconds - (time.perf_counter() - started)))
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


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    cases = [("thread", 10), ("process", 2)] if ctx.quick else [("thread", 100), ("thread", 1000), ("process", 10)]
    results = [one_case(ctx, kind, organisations) for kind, organisations in cases]
    process_case = next(case for case in results if case["runner"] == "process")
    return {
        "cases": results,
        "scheduler_process": process_case["scheduler_process"],
        "import_floor": import_floor(),
    }
