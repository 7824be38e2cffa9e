"""Throw-away servers: a private PostgreSQL cluster (from the binaries scripts/services.sh found),
the RabbitMQ broker scripts/services.sh started or a private one, and Baton API replicas as real
processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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


def rabbitmqctl(*args: str, env: dict[str, str] | None = None) -> None:
    """Run rabbitmqctl against the throw-away broker that scripts/services.sh started (or, given the
    environment of another node, that node). Each call starts an Erlang VM: seconds of CPU."""
    env = env or {**os.environ, "HOME": os.environ["BATON_TEST_RABBITMQ_HOME"]}
    command = [os.environ["BATON_TEST_RABBITMQCTL"], *args]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)


def add_rabbitmq_vhost(name: str, user: str = "guest") -> None:
    """A virtual host on the shared test broker, with every permission for `user`: one rabbitmqctl
    call (add_vhost and set_permissions would be two)."""
    definitions = {
        "vhosts": [{"name": name}],
        "permissions": [{"user": user, "vhost": name, "configure": ".*", "write": ".*", "read": ".*"}],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:  # from stdin, it may never return
        json.dump(definitions, file)
        file.flush()
        rabbitmqctl("import_definitions", file.name)


class ThrowawayRabbitMQ:
    """A private RabbitMQ node (for tests that stop or restart the broker), configured as
    scripts/services.sh configures the shared one: its own ports, node name, files and Erlang cookie."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.env = {
            **os.environ,
            "HOME": str(directory),  # the Erlang cookie
            "RABBITMQ_NODENAME": f"baton-private-{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(directory / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq"),
            "RABBITMQ_PID_FILE": str(directory / "rabbitmq.pid"),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def ctl(self, *args: str) -> None:
        rabbitmqctl(*args, env=self.env)

    def start(self) -> None:
        (self.directory / "enabled_plugins").write_text("[].\n")
        (self.directory / "rabbitmq.conf").write_text(f"loopback_users = none\nlisteners.tcp.default = {self.port}\n")
        server = Path(os.environ["BATON_TEST_RABBITMQCTL"]).with_name("rabbitmq-server")
        with (self.directory / "server.log").open("wb") as log:
            self.process = subprocess.Popen(
                [str(server)], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        # The AMQP listener opens once the node has booted; polling it costs no rabbitmqctl VM.
        deadline = time.monotonic() + 120
        while not self.accepts():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"RabbitMQ did not start: {self.directory / 'server.log'}")
            time.sleep(0.2)

    def accepts(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), 1).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()  # the script stops its Erlang VM cleanly on SIGTERM
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)  # the script and its VM
            self.process.wait()


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
