"""The load generator: clients in a tight loop for a fixed time, cheap enough to measure Baton, not
itself. HTTP clients are `http.client` keep-alive connections; SQL clients are psycopg connections in
autocommit. Clients run as threads spread over a few processes (threads of one process share a GIL).

Every measurement returns data (`Rate`); scenarios decide what to compare it with.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

Counting = Literal["task", "results", "created", "rows"]


@dataclass(frozen=True)
class Request:
    """One operation a client repeats: an HTTP call or a SQL statement, and how to count what it moved."""

    kind: Literal["http", "sql"]
    target: str  # base URL, or a libpq connection string
    counting: Counting
    method: str = "POST"
    path: str = ""
    body: bytes | None = None
    sql: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    # A body per call (e.g. pushes that must not be deduplicated): `{n}` is replaced by a counter.
    templated: bool = False


@dataclass
class Rate:
    operations: int
    moved: int
    seconds: float
    latencies_ms: list[float]
    ran_dry: bool

    @property
    def per_second(self) -> float:
        return self.moved / self.seconds

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else 0.0

    @property
    def p99_ms(self) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _moved(counting: Counting, status: int, payload: bytes) -> int:
    if counting == "created":
        return int(status in (200, 201))
    document = json.loads(payload)
    if counting == "task":
        return int(document is not None)
    return len(document["results"])


def _http_loop(request: Request, start_at: float, deadline: float, out: list[Any]) -> None:
    parts = urlsplit(request.target)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
    headers = {"Content-Type": "application/json"} if request.body is not None else {}
    operations = moved = 0
    latencies: list[float] = []
    dry = False
    counter = 0
    while time.time() < start_at:
        time.sleep(0.001)
    while time.time() < deadline:
        body = request.body
        if request.templated and body is not None:
            counter += 1
            body = body.replace(b"{n}", str(counter).encode())
        began = time.perf_counter()
        conn.request(request.method, request.path, body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        latencies.append((time.perf_counter() - began) * 1000)
        if response.status >= 300 and request.counting != "created":
            raise RuntimeError(f"{request.method} {request.path} answered {response.status}: {payload[:200]!r}")
        got = _moved(request.counting, response.status, payload)
        operations += 1
        if not got:
            dry = True
            break
        moved += got
    conn.close()
    out.append((operations, moved, latencies, dry))


def _sql_loop(request: Request, start_at: float, deadline: float, out: list[Any]) -> None:
    import psycopg

    operations = moved = 0
    latencies: list[float] = []
    dry = False
    with psycopg.connect(request.target, autocommit=True) as conn:
        while time.time() < start_at:
            time.sleep(0.001)
        counter = 0
        while time.time() < deadline:
            params = request.params
            if request.templated:
                counter += 1
                params = {key: (value(counter) if callable(value) else value) for key, value in params.items()}
            began = time.perf_counter()
            cursor = conn.execute(request.sql, params)
            got = cursor.rowcount if cursor.description is None else len(cursor.fetchall())
            latencies.append((time.perf_counter() - began) * 1000)
            operations += 1
            if not got:
                dry = True
                break
            moved += got
    out.append((operations, moved, latencies, dry))


def _process(requests: list[Request], start_at: float, duration: float, results: Any) -> None:
    out: list[Any] = []
    deadline = start_at + duration
    threads = [
        threading.Thread(
            target=_http_loop if request.kind == "http" else _sql_loop, args=(request, start_at, deadline, out)
        )
        for request in requests
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(out)


def measure(requests: list[Request], duration: float, processes: int = 4, warmup: float = 3.0) -> Rate:
    """Run one client per request for `duration` seconds; tasks moved per second over all of them.

    `ran_dry`: some client found nothing to move (a queue emptied): the rate is then not a rate."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    count = max(1, min(processes, len(requests)))
    shares = [requests[index::count] for index in range(count)]
    start_at = time.time() + warmup  # time for the spawned processes to import and connect
    workers = [context.Process(target=_process, args=(share, start_at, duration, results)) for share in shares]
    for worker in workers:
        worker.start()
    gathered = [item for _ in workers for item in results.get(timeout=duration + warmup + 120)]
    for worker in workers:
        worker.join()
    return Rate(
        operations=sum(item[0] for item in gathered),
        moved=sum(item[1] for item in gathered),
        seconds=duration,
        latencies_ms=[latency for item in gathered for latency in item[2]],
        ran_dry=any(item[3] for item in gathered),
    )
