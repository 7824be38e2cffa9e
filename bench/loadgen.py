"""The load generator: clients in a tight loop for a fixed time, cheap enough to measure Baton, not
itself. HTTP clients are `http.client` keep-alive connections; SQL clients are psycopg connections in
autocommit; store clients call Baton's store-level pop (`baton.storage.queues.operations.pop`) on a SQLAlchemy
connection, as the API's SQLite executor does. Clients run as threads spread over a few processes
(threads of one process share a GIL).

Every measurement returns data (`Rate`); scenarios decide what to compare it with.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

# task: a JSON task or null; results: {"results": [...]}; created: a 200/201 answer (pushes); ok: any 2xx
# answer (reads); rows: rows a statement returned or changed.
Counting = Literal["task", "results", "created", "ok", "rows"]


@dataclass(frozen=True)
class Request:
    """One operation a client repeats: an HTTP call, a SQL statement or a store-level pop, and how to
    count what it moved."""

    kind: Literal["http", "sql", "store"]
    target: str  # base URL, a libpq connection string, or (store) a SQLAlchemy database URL
    counting: Counting
    method: str = "POST"
    path: str = ""
    body: bytes | None = None
    sql: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    # A body per call (e.g. pushes that must not be deduplicated): `{n}` is replaced by a counter,
    # `{client}` by a token of this client's own, so that clients in different processes differ too, and
    # `{uuid}` by a fresh UUID (every `{uuid}` of one call by the same one).
    templated: bool = False
    # Stop this client at the first answer that moved nothing (a queue ran dry: the rate is then not
    # a rate). False: keep asking, as a job runner polls an empty queue.
    stop_when_dry: bool = True
    # The path of the n-th call (n from 1, the warm-up included) instead of `path`: a picklable callable
    # (a module-level function or a functools.partial of one), e.g. a distinct task to PATCH each call.
    path_of: Callable[[int], str] | None = None


@dataclass
class Rate:
    operations: int
    moved: int
    seconds: float
    latencies_ms: list[float]
    ran_dry: bool
    # CPU-seconds the server's process tree used over the measurement (a scenario's `with_server_cpu`).
    server_cpu_s: float | None = None
    # CPU-seconds the PostgreSQL server (postmaster and every child) used meanwhile (`with_database_cpu`).
    database_cpu_s: float | None = None

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
    if counting == "ok":
        return int(200 <= status < 300)
    document = json.loads(payload)
    if counting == "task":
        return int(document is not None)
    return len(document["results"])


class _Gate:
    """The clients of one process get ready (connected, one warm-up call made), then all start at the
    time the parent announces once every process is ready: spawned processes that import or connect
    slowly on a loaded machine neither shorten the measurement nor let others start early."""

    def __init__(self, clients: int) -> None:
        self.ready = threading.Barrier(clients + 1)
        self.go = threading.Event()
        self.start_at = 0.0
        self.deadline = 0.0

    def wait(self) -> tuple[float, float]:
        """Called by a client when it is ready; returns (start, deadline) once the run begins."""
        self.ready.wait()
        self.go.wait()
        while time.time() < self.start_at:
            time.sleep(0.001)
        return self.start_at, self.deadline


def _timed(request: Request, gate: _Gate, once: Callable[[], int]) -> tuple[int, int, list[float], bool]:
    """Call `once` (one operation; how many items it moved) from the gate's start until its deadline,
    or until the target runs dry when the request says so: (operations, moved, latencies ms, dry)."""
    operations = moved = 0
    latencies: list[float] = []
    dry = False
    once()  # warm-up, not counted
    _, deadline = gate.wait()
    while time.time() < deadline:
        began = time.perf_counter()
        got = once()
        latencies.append((time.perf_counter() - began) * 1000)
        operations += 1
        if not got:
            dry = True
            if request.stop_when_dry:
                break
        moved += got
    return operations, moved, latencies, dry


def _http_loop(request: Request, gate: _Gate, out: list[Any]) -> None:
    parts = urlsplit(request.target)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
    headers = {"Content-Type": "application/json"} if request.body is not None else {}
    counter = 0
    token = uuid.uuid4().hex[:12].encode()

    def body() -> bytes | None:
        nonlocal counter
        if request.templated and request.body is not None:
            counter += 1
            made = request.body.replace(b"{n}", str(counter).encode()).replace(b"{client}", token)
            return made.replace(b"{uuid}", str(uuid.uuid4()).encode()) if b"{uuid}" in made else made
        return request.body

    calls = 0

    def path() -> str:
        nonlocal calls
        calls += 1
        return request.path if request.path_of is None else request.path_of(calls)

    def once() -> int:
        conn.request(request.method, path(), body=body(), headers=headers)
        response = conn.getresponse()
        payload = response.read()
        if response.status >= 300 and request.counting != "created":
            raise RuntimeError(f"{request.method} {request.path} answered {response.status}: {payload[:200]!r}")
        return _moved(request.counting, response.status, payload)

    conn.connect()
    out.append(_timed(request, gate, once))
    conn.close()


def _sql_loop(request: Request, gate: _Gate, out: list[Any]) -> None:
    import psycopg

    counter = 0

    def params() -> dict[str, Any]:
        nonlocal counter
        if not request.templated:
            return request.params
        counter += 1
        return {key: (value(counter) if callable(value) else value) for key, value in request.params.items()}

    with psycopg.connect(request.target, autocommit=True) as conn:

        def once() -> int:
            cursor = conn.execute(request.sql, params())
            return cursor.rowcount if cursor.description is None else len(cursor.fetchall())

        out.append(_timed(request, gate, once))


def _store_loop(request: Request, gate: _Gate, out: list[Any]) -> None:
    """Baton's store-level pop of one queue (`params["queue"]`), each in its own transaction, as the
    API's thread executor runs it (SQLite's baseline: the same statement and work without HTTP; the
    API's SQLite executor builds the statement once, `queues.pop` per call)."""
    from baton.core.model import utcnow
    from baton.core.queueing import PopTarget
    from baton.storage.engine import Store
    from baton.storage.queues import operations as queues

    store = _shared_store(request.target, Store)
    target = PopTarget(queue=request.params["queue"])
    limit = int(request.params.get("limit", 1))

    def pop() -> int:
        with store.engine.begin() as conn:
            return len(queues.pop(conn, target, limit=limit, now=utcnow(), raw_data=True))

    out.append(_timed(request, gate, pop))


_stores: dict[str, Any] = {}
_stores_lock = threading.Lock()


def _shared_store(url: str, factory: Any) -> Any:
    """One Store (engine, connection pool) per process and URL, shared by its client threads, as the
    API process shares one."""
    with _stores_lock:
        if url not in _stores:
            _stores[url] = factory(url)
        return _stores[url]


LOOPS = {"http": "_http_loop", "sql": "_sql_loop", "store": "_store_loop"}
READY_TIMEOUT = 120.0


def _client(request: Request, gate: _Gate, out: list[Any], errors: list[str]) -> None:
    try:
        globals()[LOOPS[request.kind]](request, gate, out)
    except BaseException as exc:
        errors.append(f"{request.kind} {request.path or request.sql[:60]}: {exc!r}")
        gate.ready.abort()  # nobody waits for a client that is gone
        gate.go.set()


def _process(requests: list[Request], ready: Any, start: Any, start_at: Any, duration: float, results: Any) -> None:
    out: list[Any] = []
    errors: list[str] = []
    gate = _Gate(len(requests))
    threads = [threading.Thread(target=_client, args=(request, gate, out, errors)) for request in requests]
    for thread in threads:
        thread.start()
    try:
        gate.ready.wait(READY_TIMEOUT)
    except threading.BrokenBarrierError:
        errors.append("a client failed or did not get ready in time")
    ready.put(not errors)
    start.wait(READY_TIMEOUT + 60)
    gate.start_at = start_at.value
    gate.deadline = gate.start_at + duration
    gate.go.set()
    for thread in threads:
        thread.join()
    results.put((out, errors))


def measure(
    requests: list[Request],
    duration: float,
    processes: int = 4,
    warmup: float = 0.5,
    on_start: Callable[[float], None] | None = None,
) -> Rate:
    """Run one client per request for `duration` seconds; tasks moved per second over all of them.

    Every client first connects and makes one uncounted call (so connection pools on both sides are
    grown); once all are ready, they start together `warmup` seconds later, and `on_start` is told
    that time (for work that must run alongside, such as a profiler or a feeder).

    `ran_dry`: some client found nothing to move (a queue emptied): the rate is then not a rate (unless
    the requests say `stop_when_dry=False`: then it only says some answer was empty)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ready = context.Queue()
    start = context.Event()
    start_at = context.Value("d", 0.0)
    count = max(1, min(processes, len(requests)))
    shares = [requests[index::count] for index in range(count)]
    workers = [
        context.Process(target=_process, args=(share, ready, start, start_at, duration, results)) for share in shares
    ]
    for worker in workers:
        worker.start()
    all_ready = all([ready.get(timeout=READY_TIMEOUT + 30) for _ in workers])
    start_at.value = time.time() + warmup
    start.set()
    if on_start is not None and all_ready:
        on_start(start_at.value)
    gathered: list[Any] = []
    errors: list[str] = []
    for _ in workers:
        out, failed = results.get(timeout=duration + warmup + READY_TIMEOUT + 120)
        gathered += out
        errors += failed
    for worker in workers:
        worker.join()
    if errors:
        raise RuntimeError("load generator: " + "; ".join(errors))
    return Rate(
        operations=sum(item[0] for item in gathered),
        moved=sum(item[1] for item in gathered),
        seconds=duration,
        latencies_ms=[latency for item in gathered for latency in item[2]],
        ran_dry=any(item[3] for item in gathered),
    )
