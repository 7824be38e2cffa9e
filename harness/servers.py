"""Throw-away servers: a private PostgreSQL cluster (from the binaries scripts/services.sh found),
the RabbitMQ broker scripts/services.sh started, and Baton API replicas as real processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx

from harness.waiting import free_port


class ThrowawayPostgres:
    """A private PostgreSQL cluster (for tests that stop the server)."""

    def __init__(self, directory: Path, settings: dict[str, str] | None = None) -> None:
        self.bin = Path(os.environ["BATON_TEST_PG_BIN"])
        self.directory = directory
        self.data = directory / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self.settings = settings or {}  # server settings (`-c name=value`), e.g. max_connections

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust")

    def _options(self) -> str:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        return options + "".join(f" -c {name}={value}" for name, value in self.settings.items())

    def start(self) -> None:
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.directory / "log"), "-w", "-o", self._options(), "start"
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        """`pg_ctl -m fast restart`: every connection is terminated, the server back when it returns."""
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.directory / "log"), "-m", "fast", "-w", "-o",
            self._options(), "restart",
        )  # fmt: skip


def rabbitmqctl(*args: str) -> None:
    """Run rabbitmqctl against the throw-away broker that scripts/services.sh started."""
    env = {**os.environ, "HOME": os.environ["BATON_TEST_RABBITMQ_HOME"]}
    subprocess.run([os.environ["BATON_TEST_RABBITMQCTL"], *args], env=env, check=True, capture_output=True, timeout=120)


def start_api_replica(env: dict[str, str], port: int, stdout: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)],
        env=env,
        stdout=stdout,
        stderr=subprocess.STDOUT,
    )


def wait_ready(urls: list[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    for url in urls:
        while True:
            with suppress(httpx.HTTPError):
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"API replica at {url} did not become ready")
            time.sleep(0.2)


def stop_processes(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


@contextmanager
def api_replicas(database_url: str, count: int, extra_env: dict[str, str] | None = None) -> Iterator[list[str]]:
    """`count` real `baton serve --no-director` processes on one database; yields their URLs once ready."""
    env = {**os.environ, "BATON_LOG_LEVEL": "warning", **(extra_env or {}), "BATON_DATABASE_URL": database_url}
    ports = [free_port() for _ in range(count)]
    processes = [start_api_replica(env, port) for port in ports]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        wait_ready(urls)
        yield urls
    finally:
        stop_processes(processes)
