"""Where a pop's time goes (issue 14): py-spy samples one `baton serve` process while 8 clients pop
one task per request, "after" on this code and "before" on the code before the restructure (commit
8064103, in a worktree of its own with its own .venv; skipped when that is missing). Each version
gets a fresh database of its own on the same PostgreSQL server, migrated by its own `baton migrate`.

    python -m bench.run --profile        # re-run just this
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from baton.storage.urls import libpq_conninfo
from bench.loadgen import Rate, measure
from bench.scenarios.common import (
    ORG,
    Context,
    add_organisations,
    bench_queue,
    database_of_its_own,
    fill,
    http_pop,
    serve,
)

OLD_COMMIT = "8064103"
CLIENTS = 8
SECONDS = 10
RATE = 200
FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def py_spy() -> str:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else "py-spy"


def record(ctx: Context, url: str, pid: int, label: str) -> tuple[Rate, Path]:
    """Load the server with CLIENTS poppers and record it with py-spy for SECONDS in the middle."""
    output = ctx.work_dir / f"profile-{label}.txt"
    result: list[Rate] = []
    started: list[float] = []
    running = threading.Event()

    def on_start(start_at: float) -> None:
        started.append(start_at)
        running.set()

    load = threading.Thread(
        target=lambda: result.append(measure([http_pop(url)] * CLIENTS, SECONDS + 4, on_start=on_start)), daemon=True
    )
    load.start()
    if not running.wait(300):
        raise RuntimeError("the load generator did not start")
    time.sleep(max(0.0, started[0] + 1.5 - time.time()))
    command = [py_spy(), "record", "-p", str(pid), "-d", str(SECONDS), "-r", str(RATE), "-f", "raw"]
    subprocess.run([*command, "-o", str(output)], check=True, capture_output=True, timeout=SECONDS + 60)
    load.join(SECONDS + 120)
    return result[0], output


def component(path: str) -> str:
    """Which library a frame's file belongs to: baton's package (`baton.api`), another distribution
    (`fastapi`), or the standard library. py-spy names files relative to their sys.path entry."""
    if path.startswith("<frozen"):
        return "stdlib"
    for marker in ("site-packages/", "/src/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    parts = path.split("/")
    top = parts[0].removesuffix(".py")
    if top == "baton" and len(parts) > 1:
        return "baton." + parts[1].removesuffix(".py")
    if top in sys.stdlib_module_names:
        return "stdlib"
    return top


def short(frame: str) -> str:
    match = FRAME.match(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/src/", "/lib/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match['function']} ({path})"


# Leaf frames of a thread that is blocked, not running Python: a pool thread waiting for work, a
# thread waiting on a lock, a synchronous psycopg connection waiting for PostgreSQL's answer. py-spy
# does not always recognise these as idle; they are counted apart and left out of the tables.
WAITING = (
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
    "Thread.join (threading.py)",
    "_worker (concurrent/futures/thread.py)",
    "Queue.get (queue.py)",
    "Connection.wait (psycopg/connection.py)",
    "BaseSelector.select (selectors.py)",
    "EpollSelector.select (selectors.py)",
)


def summarise(path: Path, top: int = 12) -> dict[str, Any]:
    """Top frames by self and inclusive samples, and self samples per component, from py-spy's raw
    (collapsed stack) output; samples whose leaf is a blocked wait are counted apart."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    components: Counter[str] = Counter()
    waiting: Counter[str] = Counter()
    callees: dict[str, Counter[str]] = {}
    total = busy = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        raw_frames = [frame for frame in stack.split(";") if not frame.startswith(("process ", "thread "))]
        if not raw_frames:
            continue
        count = int(count_text)
        frames = [short(frame) for frame in raw_frames]
        total += count
        if frames[-1] in WAITING:
            waiting[frames[-1]] += count
            continue
        busy += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
        for caller, callee in itertools.pairwise(frames):
            if caller != callee:
                callees.setdefault(caller, Counter())[callee] += count
        match = FRAME.match(raw_frames[-1])
        components[component(match["file"] if match else raw_frames[-1])] += count
    busy = busy or 1

    def passes_through(frame: str) -> bool:
        """Nearly all of the frame's time is in one callee (a middleware calling the next, a wrapper)."""
        below = callees.get(frame)
        return bool(below) and below.most_common(1)[0][1] >= 0.95 * inclusive[frame]

    # Pass-through frames (the server's trunk, the middleware chain) say nothing: show where work branches.
    branches = [(frame, n) for frame, n in inclusive.most_common() if not passes_through(frame)]
    return {
        "samples": total,
        "busy_samples": busy,
        "waiting_share": sum(waiting.values()) / total if total else 0.0,
        "waiting": [[frame, n / total] for frame, n in waiting.most_common()],
        "top_self": [[frame, n / busy] for frame, n in own.most_common(top)],
        "top_inclusive": [[frame, n / busy] for frame, n in branches[:top]],
        "by_component": [[name, n / busy] for name, n in components.most_common(top)],
    }


def profile_server(ctx: Context, url: str, pid: int, label: str) -> dict[str, Any]:
    """Pops/s with 8 clients without the profiler, then the profiled run."""
    plain = measure([http_pop(url)] * CLIENTS, ctx.duration)
    rate, output = record(ctx, url, pid, label)
    return {
        "pops_per_second_unprofiled": plain.per_second,
        "pops_per_second": rate.per_second,
        "p50_ms": rate.p50_ms,
        "raw": str(output),
        **summarise(output),
    }


def profile_current(ctx: Context) -> dict[str, Any]:
    bench_queue(ctx, ctx.size(300_000, 60_000))
    with serve(ctx.database_url, log_dir=ctx.work_dir) as server:
        return profile_server(ctx, server.url, server.process.pid, "after")


def profile_old(ctx: Context, worktree: Path) -> dict[str, Any]:
    python = worktree / ".venv" / "bin" / "python"
    with database_of_its_own(ctx, "baton_profile_old") as url:
        env = {"BATON_DATABASE_URL": url, "PATH": str(python.parent)}
        subprocess.run(
            [str(python), "-m", "baton", "migrate", "--database-url", url],
            check=True,
            capture_output=True,
            timeout=300,
            env=env,
            cwd=worktree,
        )
        with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
            add_organisations(conn, [ORG])
            fill(conn, [ORG], ctx.size(300_000, 60_000))
        with serve(url, python=str(python), log_dir=ctx.work_dir) as server:
            profiled = profile_server(ctx, server.url, server.process.pid, "before")
    commit = subprocess.run(
        ["git", "-C", str(worktree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {"commit": commit, **profiled}


def profile_ingest(ctx: Context) -> dict[str, Any]:
    """py-spy on this very process while one normalizer scheduler (a thread here, as in the ingest
    scenario) turns RabbitMQ events into tasks: where an event's time goes."""
    from bench.scenarios.ingest import ingest_once

    output = ctx.work_dir / "profile-ingest.txt"
    command = [py_spy(), "record", "-p", str(os.getpid()), "-r", "100", "-f", "raw", "-o", str(output)]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # let py-spy attach
        run = ingest_once(ctx, ctx.size(3_000, 1_000))
    finally:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
        recorder.wait(120)
    return {**run, "raw": str(output), **summarise(output, top=15)}


def run(ctx: Context) -> dict[str, Any]:
    result: dict[str, Any] = {"clients": CLIENTS, "seconds": SECONDS, "rate_hz": RATE, "old_commit": OLD_COMMIT}
    result["after"] = profile_current(ctx)
    result["ingest"] = profile_ingest(ctx)
    worktree = ctx.old_worktree
    if worktree is not None and (worktree / ".venv" / "bin" / "python").exists():
        result["before"] = profile_old(ctx, worktree)
    else:
        result["before"] = None
        result["before_skipped"] = f"no worktree with a .venv at {worktree} (git worktree add PATH {OLD_COMMIT})"
    return result
