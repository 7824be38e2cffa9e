"""What every stand-in has: faults the test injects (an error status, added latency), a counter of calls
per endpoint, endpoints held (their calls wait until the test releases them), and a server on a free
loopback port in a thread that can go down (connections refused) and come back on the same port."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from dataclasses import dataclass
from types import TracebackType

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request


@dataclass
class Faults:
    status: int | None = None  # every call answers this status (500: the service is broken)
    latency_ms: float = 0.0  # every call waits this long first

    def clear(self) -> None:
        self.status = None
        self.latency_ms = 0.0


class Calls:
    """Calls per endpoint, keyed "METHOD /route/{template}" (as the real router declares it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def hit(self, endpoint: str) -> None:
        with self._lock:
            self._counts[endpoint] += 1

    def __getitem__(self, endpoint: str) -> int:
        with self._lock:
            return self._counts[endpoint]

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


class Holds:
    """Endpoints (keyed as Calls keys them) whose calls, once received, wait until the test releases
    them: a client caught inside a call at the moment the test chooses (to kill its process there, say).

        standin.holds.hold("GET /object-clients")
        wait_until(lambda: standin.holds.waiting("GET /object-clients") == 1)   # the client is inside it
        ...
        standin.holds.release()                                            # every held call goes on
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Event] = {}
        self._waiting: Counter[str] = Counter()

    def hold(self, endpoint: str) -> None:
        with self._lock:
            self._gates.setdefault(endpoint, threading.Event())

    def release(self, endpoint: str | None = None) -> None:
        """Let the held calls of `endpoint` (of every endpoint: None) go on, and later ones pass."""
        with self._lock:
            endpoints = list(self._gates) if endpoint is None else [endpoint]
            for name in endpoints:
                gate = self._gates.pop(name, None)
                if gate is not None:
                    gate.set()

    def waiting(self, endpoint: str) -> int:
        """Calls of `endpoint` waiting now."""
        with self._lock:
            return self._waiting[endpoint]

    async def wait_if_held(self, endpoint: str) -> None:
        """Returns at once unless `endpoint` is held; then when it is released. Polls the gate (rather
        than blocking a thread on it) so that a server going down is never kept up by a held call."""
        with self._lock:
            gate = self._gates.get(endpoint)
            if gate is None:
                return
            self._waiting[endpoint] += 1
        try:
            while not gate.is_set():
                await asyncio.sleep(0.01)
        finally:
            with self._lock:
                self._waiting[endpoint] -= 1


class Standin:
    """A FastAPI app whose every route first counts the call, waits while its endpoint is held and
    applies the injected faults."""

    def __init__(self, title: str) -> None:
        self.lock = threading.RLock()  # the state, shared by the test's thread and the server's
        self.faults = Faults()
        self.calls = Calls()
        self.holds = Holds()
        self.app = FastAPI(title=title, dependencies=[Depends(self._gate)])

    async def _gate(self, request: Request) -> None:
        route = request.scope.get("route")
        endpoint = f"{request.method} {getattr(route, 'path', request.url.path)}"
        self.calls.hit(endpoint)
        await self.holds.wait_if_held(endpoint)
        if self.faults.latency_ms > 0:
            await asyncio.sleep(self.faults.latency_ms / 1000)
        if self.faults.status is not None:
            raise HTTPException(self.faults.status, "injected fault")


class StandinServer:
    """Serves an app with uvicorn on 127.0.0.1 in a thread. `down()` closes the listening socket, so calls
    are refused; `up()` listens again on the same port."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port: int = probe.getsockname()[1]
        probe.close()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        if self._server is not None:
            return
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=1
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"stand-in server on port {self.port} did not start")
            thread.join(0.01)
        self._server, self._thread = server, thread

    def down(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(10)
        self._server = self._thread = None

    def __enter__(self) -> StandinServer:
        self.up()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.down()
