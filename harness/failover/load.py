"""What runs against the formation: Baton's processes, the clients' push/pop/patch load with a record
of every answer, and a probe that records when the database takes writes and when the director renews.

Times are wall-clock seconds (`time.time()`), comparable with the database's own clock on loopback.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

from harness.servers import stop_processes, wait_ready
from harness.waiting import free_port

CLIENT_TIMEOUT = 30.0  # longer than any answer Baton promises; a request still open then is "no answer"


@dataclass(frozen=True)
class Answer:
    replica: str
    op: str  # push, pop, patch
    started: float
    ended: float
    status: int  # 0: no answer (connection error or client timeout)
    task: str | None = None
    marker: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == 0 or self.status >= 500


class Baton:
    """`replicas` API processes (`baton serve --no-director`) and optionally one `baton director`, each
    logging to its own file."""

    def __init__(self, url: str, log_dir: Path, replicas: int, director: bool, env: dict[str, str]) -> None:
        self.env = {**os.environ, "BATON_LOG_LEVEL": "info", "BATON_AUTH": "off", **env, "BATON_DATABASE_URL": url}
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.urls: dict[str, str] = {}
        migrated = subprocess.run(
            [sys.executable, "-m", "baton", "migrate"], env=self.env, capture_output=True, text=True, check=False
        )
        if migrated.returncode != 0:
            raise RuntimeError(f"baton migrate failed: {migrated.stderr.strip()}")
        for n in range(1, replicas + 1):
            port = free_port()
            self.urls[f"api{n}"] = f"http://127.0.0.1:{port}"
            self._start(f"api{n}", "serve", "--no-director", "--port", str(port))
        if director:
            self._start("director", "director")
        wait_ready(list(self.urls.values()))

    def _start(self, name: str, *args: str) -> None:
        log = (self.log_dir / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "baton", *args], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )

    def log_sizes(self) -> dict[str, int]:
        return {name: (self.log_dir / f"{name}.log").stat().st_size for name in self.processes}

    def log_lines(self, since: dict[str, int]) -> dict[str, list[str]]:
        lines = {}
        for name in self.processes:
            with (self.log_dir / f"{name}.log").open("rb") as log:
                log.seek(since.get(name, 0))
                lines[name] = log.read().decode(errors="replace").splitlines()
        return lines

    def stop(self) -> None:
        stop_processes(list(self.processes.values()))


class Clients:
    """`per_replica` client threads per replica, each pushing a task, popping one and finishing it
    (PATCH completed) in a loop, `pause` seconds apart. Every answer is recorded."""

    def __init__(self, urls: dict[str, str], queue: str, per_replica: int = 2, pause: float = 0.02) -> None:
        self.queue = queue
        self.pause = pause
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._markers = itertools.count()
        self._threads = [
            threading.Thread(target=self._loop, args=(name, url), daemon=True, name=f"client-{name}-{n}")
            for name, url in urls.items()
            for n in range(per_replica)
        ]

    def __enter__(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(CLIENT_TIMEOUT + 5)

    def _record(self, answer: Answer) -> None:
        with self._lock:
            self.answers.append(answer)

    def _call(self, http: httpx.Client, replica: str, op: str, method: str, path: str, **kwargs: object) -> Answer:
        started = time.time()
        try:
            response = http.request(method, path, **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError:
            return Answer(replica, op, started, time.time(), 0)
        body = response.json() if response.status_code < 300 and response.content else None
        task = body.get("id") if isinstance(body, dict) else None
        marker = body.get("data", {}).get("m") if isinstance(body, dict) else None
        return Answer(replica, op, started, time.time(), response.status_code, task, marker)

    def _loop(self, replica: str, url: str) -> None:
        with httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT) as http:
            while not self._stop.is_set():
                marker = f"{self.queue}:{next(self._markers)}"
                body = {"priority": 1, "data": {"m": marker}}
                self._record(self._call(http, replica, "push", "POST", f"/queues/{self.queue}/push", json=body))
                popped = self._call(http, replica, "pop", "POST", f"/queues/{self.queue}/pop")
                self._record(popped)
                if popped.task is not None:
                    patch = {"status": "completed"}
                    self._record(self._call(http, replica, "patch", "PATCH", f"/tasks/{popped.task}", json=patch))
                self._stop.wait(self.pause)


@dataclass
class ProbeRecord:
    writes: list[tuple[float, bool]] = field(default_factory=list)  # (time, the insert committed)
    renewals: list[tuple[float, int]] = field(default_factory=list)  # director's renewed_at (db clock), term


class WriteProbe:
    """Every `every` seconds: one insert on a connection to whichever node takes writes (the same
    multi-host URI, target_session_attrs=read-write), and a look at the director's lease."""

    def __init__(self, conninfo: str, every: float = 0.05) -> None:
        self.conninfo = conninfo
        self.every = every
        self.record = ProbeRecord()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="write-probe")
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def __enter__(self) -> WriteProbe:
        with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS failover_probe (at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        if self._conn is not None:
            self._conn.close()

    def _tick(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=1, options="-c statement_timeout=1000"
            )
        self._conn.execute("INSERT INTO failover_probe DEFAULT VALUES")
        row = self._conn.execute(
            "SELECT extract(epoch FROM renewed_at)::float8, term FROM leaders WHERE role = 'director'"
        ).fetchone()
        if row is not None and (not self.record.renewals or self.record.renewals[-1][0] != row[0]):
            self.record.renewals.append((float(str(row[0])), int(str(row[1]))))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
                ok = True
            except psycopg.Error:
                ok = False
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
            self.record.writes.append((time.time(), ok))
            self._stop.wait(self.every)
