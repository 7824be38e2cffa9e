"""How soon a restarted API replica serves (issue #41: within 2 s of its process starting): the time
from starting `baton serve --no-director` to its first answered `/health` and its first answered pop,
several times, on a quiet machine and while 8 clients pop from another replica on the same database
(the load a replica restarts into). The floor in the same run: the smallest ASGI app under the same
uvicorn (bench/minimal_asgi.py's `pop_app`: the interpreter, uvicorn and psycopg, nothing of Baton's)
started and asked the same way."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.loadgen import measure
from bench.scenarios.common import (
    QUEUE,
    SERVER_ENV,
    Context,
    bench_queue,
    http_pop,
    pop_app_env,
    serve,
)
from harness.servers import stop_processes
from harness.waiting import free_port

STARTS = 5
LOAD_CLIENTS = 8
TIMEOUT_S = 120.0


def baton_command(port: int) -> list[str]:
    return [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)]


def minimal_command(port: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", "bench.minimal_asgi:pop_app", "--port", str(port),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip


def time_to_serve(command: list[str], env: dict[str, str], port: int, log: Path) -> dict[str, float]:
    """Seconds from starting `command` to its first 200 on /health, then to its first answered pop."""
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as output:
        started = time.monotonic()
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(timeout=5.0) as client:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"{command[2:5]} exited with {process.returncode}: {log.read_text()[-2000:]}")
                if time.monotonic() - started > TIMEOUT_S:
                    raise RuntimeError(f"{command[2:5]} did not answer within {TIMEOUT_S:.0f} s")
                try:
                    if client.get(f"{url}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.005)
            health = time.monotonic() - started
            answered = client.post(f"{url}/queues/{QUEUE}/pop", content=b"{}")
            answered.raise_for_status()
            return {"health_s": health, "pop_s": time.monotonic() - started}
    finally:
        stop_processes([process])


def starts(ctx: Context, label: str, loaded: bool) -> list[dict[str, float]]:
    environment = {
        **os.environ,
        **SERVER_ENV,
        "BATON_DATABASE_URL": ctx.database_url,
        "BENCH_QUEUE": QUEUE,
        **pop_app_env(1),
    }
    found = []
    for n in range(STARTS):
        port = free_port()
        command = baton_command(port) if label == "baton serve" else minimal_command(port)
        log = ctx.work_dir / f"startup-{label.replace(' ', '-')}-{'loaded' if loaded else 'idle'}-{n}.log"
        found.append(time_to_serve(command, environment, port, log))
    return found


def summary(times: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "starts": times,
        "health_median_s": statistics.median(t["health_s"] for t in times),
        "health_max_s": max(t["health_s"] for t in times),
        "pop_median_s": statistics.median(t["pop_s"] for t in times),
        "pop_max_s": max(t["pop_s"] for t in times),
    }


def run(ctx: Context) -> dict[str, Any]:
    bench_queue(ctx, ctx.size(200_000, 50_000))
    result: dict[str, Any] = {"starts_per_series": STARTS, "load_clients": LOAD_CLIENTS, "series": {}}
    for label in ("baton serve", "minimal ASGI app"):
        result["series"][f"{label}, idle"] = summary(starts(ctx, label, loaded=False))
    with serve(ctx.database_url, log_dir=ctx.work_dir) as busy:
        stop = threading.Event()

        def pop_until_stopped() -> None:
            while not stop.is_set():
                measure([http_pop(busy.url)] * LOAD_CLIENTS, 5.0)

        load = threading.Thread(target=pop_until_stopped, daemon=True)
        load.start()
        try:
            time.sleep(2.0)
            for label in ("baton serve", "minimal ASGI app"):
                result["series"][f"{label}, loaded"] = summary(starts(ctx, label, loaded=True))
            load_average = os.getloadavg()[0]  # the last minute's: the loaded starts and their load
        finally:
            stop.set()
            load.join(60)
    result["load_average_loaded"] = load_average
    series = result["series"]
    result["serving_s"] = max(series["baton serve, idle"]["pop_max_s"], series["baton serve, loaded"]["pop_max_s"])
    result["ratios"] = {
        f"baton_to_minimal_{context}": series[f"baton serve, {context}"]["pop_median_s"]
        / series[f"minimal ASGI app, {context}"]["pop_median_s"]
        for context in ("idle", "loaded")
    }
    return result
