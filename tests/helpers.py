"""Helpers shared by tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(condition: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Poll `condition` until it holds or `timeout` passes; the caller asserts on the result."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def rabbitmqctl(*args: str) -> None:
    """Run rabbitmqctl against the throw-away broker that scripts/test.sh started."""
    import os
    import subprocess

    env = {**os.environ, "HOME": os.environ["BATON_TEST_RABBITMQ_HOME"]}
    subprocess.run([os.environ["BATON_TEST_RABBITMQCTL"], *args], env=env, check=True, capture_output=True, timeout=120)


class ThrowawayPostgres:
    """A private PostgreSQL cluster (for tests that stop the server), from the binaries scripts/test.sh found."""

    def __init__(self, directory: Path) -> None:
        import os

        self.bin = Path(os.environ["BATON_TEST_PG_BIN"])
        self.directory = directory
        self.data = directory / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        import os
        import subprocess

        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        import os
        import shutil

        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "log"), "-w", "-o", options, "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
