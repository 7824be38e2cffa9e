"""The processes of a soak run and the faults done to them: a PostgreSQL cluster of the run's own (it
is restarted), a RabbitMQ virtual host of its own on the broker scripts/services.sh started (the
broker is restarted: everything on it comes back), two `baton serve --no-director` API replicas,
two `baton worker`s, and the stand-ins' process.

Every Baton process logs JSON lines (`BATON_LOG_JSON=true`, level info, as OpenKAT runs it) to a
file of its own. A process killed or restarted keeps its file; the one started in its place (the
same slot, as Kubernetes would start it) writes a new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit, urlunsplit

from bench.soak.standins import BYTES_USER, Outside
from harness.servers import ThrowawayPostgres, rabbitmqctl, wait_ready
from harness.waiting import free_port

POSTGRES_SETTINGS = {"max_connections": "400"}


@dataclass
class Member:
    """One Baton process: its role, its slot (api-0, worker-1...), and which start of the slot it is."""

    role: str
    slot: int
    generation: int
    process: subprocess.Popen[bytes]
    log: Path
    started: float  # on the run's clock
    port: int | None = None
    ended: float | None = None

    @property
    def name(self) -> str:
        return f"{self.role}-{self.slot}" + (f" (start {self.generation + 1})" if self.generation else "")

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.ended is None and self.process.poll() is None


class Stack:
    def __init__(self, work: Path, amqp_url: str, clock: Callable[[], float]) -> None:
        self.work = work
        self.clock = clock
        (work / "logs").mkdir(parents=True, exist_ok=True)
        # A folder of its own: the server runs as the postgres user, who cannot enter the run's folder.
        self.postgres = ThrowawayPostgres(Path(tempfile.mkdtemp(prefix="baton-soak-pg-")), POSTGRES_SETTINGS)
        self.vhost = f"soak-{uuid.uuid4().hex[:8]}"
        self.amqp_url = with_vhost(amqp_url, self.vhost)
        self.members: list[Member] = []
        self.outside: Outside | None = None
        self._standins: subprocess.Popen[str] | None = None
        self.env: dict[str, str] = {}

    @property
    def database_url(self) -> str:
        return self.postgres.url

    @property
    def standins_pid(self) -> int | None:
        return None if self._standins is None else self._standins.pid

    # -- the servers ---------------------------------------------------------------------------------

    def start_servers(self, spec: dict[str, Any]) -> None:
        self.postgres.init()
        self.postgres.start()
        rabbitmqctl("add_vhost", self.vhost)
        rabbitmqctl("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")
        self._standins = subprocess.Popen(
            [sys.executable, "-m", "bench.soak.standins", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(self.work / "logs" / "standins.log").open("wb"),
            text=True,
        )
        assert self._standins.stdout is not None
        line = self._standins.stdout.readline()
        if not line:
            raise RuntimeError(f"the stand-ins did not start: {(self.work / 'logs' / 'standins.log').read_text()}")
        self.outside = Outside(json.loads(line))

    def baton_env(self, settings: dict[str, str]) -> None:
        """Every Baton process's environment: the run's settings, and no BATON_* of this process."""
        assert self.outside is not None
        urls = self.outside.urls
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("BATON_") or k.startswith("BATON_TEST")}
        self.env = {
            **inherited,
            "BATON_DATABASE_URL": self.database_url,
            "BATON_AMQP_URL": self.amqp_url,
            "BATON_AMQP_ENABLED": "true",
            "BATON_KATALOGUS_URL": urls["katalogus"],
            "BATON_OCTOPOES_URL": urls["octopoes"],
            "BATON_BYTES_URL": urls["bytes"],
            "BATON_BYTES_USERNAME": BYTES_USER[0],
            "BATON_BYTES_PASSWORD": BYTES_USER[1],
            "BATON_AUTH": "off",
            "BATON_LOG_JSON": "true",
            "BATON_LOG_LEVEL": "info",
            **settings,
        }

    # -- Baton's processes ---------------------------------------------------------------------------

    def start(self, role: str, slot: int, port: int | None = None) -> Member:
        generation = sum(1 for member in self.members if member.role == role and member.slot == slot)
        log = self.work / "logs" / f"{role}-{slot}-{generation}.log"
        command = [sys.executable, "-m", "baton", "serve", "--no-director", "--port", str(port)]
        if role == "worker":
            command = [sys.executable, "-m", "baton", "worker"]
        handle: IO[bytes] = log.open("wb")
        process = subprocess.Popen(command, env=self.env, stdout=handle, stderr=subprocess.STDOUT)
        handle.close()
        member = Member(role, slot, generation, process, log, self.clock(), port)
        self.members.append(member)
        return member

    def start_api(self, slot: int, port: int | None = None) -> Member:
        member = self.start("api", slot, port or free_port())
        wait_ready([member.url], timeout=180)
        return member

    def live(self, role: str | None = None) -> list[Member]:
        return [m for m in self.members if m.alive and (role is None or m.role == role)]

    def api_urls(self) -> list[str]:
        return [member.url for member in sorted(self.live("api"), key=lambda m: m.slot)]

    def member(self, role: str, slot: int) -> Member:
        return next(m for m in self.members if m.role == role and m.slot == slot and m.ended is None)

    def kill(self, member: Member) -> None:
        member.process.send_signal(signal.SIGKILL)
        member.process.wait(30)
        member.ended = self.clock()

    # -- faults --------------------------------------------------------------------------------------

    def kill_worker(self, slot: int) -> dict[str, Any]:
        """SIGKILL a worker; its replacement starts at once (a Deployment's next pod)."""
        victim = self.member("worker", slot)
        self.kill(victim)
        replacement = self.start("worker", slot)
        return {"killed_pid": victim.pid, "replacement_pid": replacement.pid}

    def restart_api(self, slot: int) -> dict[str, Any]:
        """SIGKILL an API replica mid-traffic and start it again on its port (a crashed pod)."""
        victim = self.member("api", slot)
        self.kill(victim)
        started = time.monotonic()
        replacement = self.start_api(slot, victim.port)
        return {
            "killed_pid": victim.pid,
            "replacement_pid": replacement.pid,
            "ready_after_s": time.monotonic() - started,
        }

    def restart_rabbitmq(self) -> dict[str, Any]:
        started = time.monotonic()
        rabbitmqctl("stop_app")
        rabbitmqctl("start_app")
        return {"down_s": time.monotonic() - started}

    def restart_postgres(self) -> dict[str, Any]:
        started = time.monotonic()
        self.postgres.restart()
        return {"down_s": time.monotonic() - started}

    # -- the end -------------------------------------------------------------------------------------

    def stop(self) -> None:
        live = self.live()
        for member in live:
            member.process.send_signal(signal.SIGTERM)
        for member in live:
            try:
                member.process.wait(30)
            except subprocess.TimeoutExpired:
                member.process.kill()
                member.process.wait(10)
            member.ended = self.clock()
        if self.outside is not None:
            self.outside.close()
        if self._standins is not None:
            assert self._standins.stdin is not None
            self._standins.stdin.close()
            try:
                self._standins.wait(30)
            except subprocess.TimeoutExpired:
                self._standins.kill()
        with contextlib.suppress(subprocess.CalledProcessError):
            self.postgres.stop()
        shutil.rmtree(self.postgres.directory, ignore_errors=True)
        with contextlib.suppress(subprocess.CalledProcessError):
            rabbitmqctl("delete_vhost", self.vhost)


def with_vhost(amqp_url: str, vhost: str) -> str:
    parts = urlsplit(amqp_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(vhost, safe=""), parts.query, parts.fragment))
