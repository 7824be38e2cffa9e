"""Pop throughput on the embedded SQLite default: store-level (the pop statement through Baton's
store, no HTTP) as the baseline, and through `baton serve`, with 1 and 8 clients, in one run.

    python -m bench.sqlite        # prints a Markdown table (docs/benchmarks.md quotes it)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

from baton import queue
from baton.models import Task
from baton.store import Store, create_organisation
from bench.replication import free_port
from bench.run import QUEUE, measure_rate

DURATION = 5.0
FILL = 60_000


def fill(path: Path) -> str:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    store = Store(url)
    store.migrate()
    with store.session() as session:
        create_organisation(session, "bench", "Bench", maxsize=0)
    with store.session() as session:
        session.add_all(
            Task(id=uuid.uuid4(), scheduler_id=QUEUE, organisation="bench", type="boefje", priority=n % 50, data={})
            for n in range(FILL)
        )
    store.dispose()
    return url


def store_level(url: str, clients: int) -> float:
    store = Store(url)
    counts = [0] * clients
    deadline = time.time() + DURATION

    def work(index: int) -> None:
        while time.time() < deadline:
            with store.session() as session:
                counts[index] += len(queue.pop(session, scheduler_id=QUEUE))

    threads = [threading.Thread(target=work, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.dispose()
    return sum(counts) / DURATION


def over_http(url: str, clients: int) -> float:
    port = free_port()
    env = {**os.environ, "BATON_DATABASE_URL": url, "BATON_LOG_LEVEL": "warning"}
    server = subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        return measure_rate("http_pop", [base], "", clients, DURATION)
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    path = Path(tempfile.mkdtemp(prefix="baton-sqlite-bench-")) / "baton.db"
    print("| clients | store-level pops/s (baseline) | HTTP pops/s | ratio |")
    print("|---:|---:|---:|---:|")
    for clients in (1, 8):
        baseline = store_level(fill(path), clients)
        http = over_http(fill(path), clients)
        print(f"| {clients} | {baseline:,.0f} | {http:,.0f} | {http / baseline:.2f} |")


if __name__ == "__main__":
    main()
