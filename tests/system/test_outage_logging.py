"""A database outage, as the processes log and survive it: one warning when it begins, one line when
it ends, no traceback, per process; events become tasks again within a second or two of the
database taking writes (the schedulers' back-off is 1 s, not 5 s)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from baton.storage.urls import database_address
from harness.servers import ThrowawayPostgres, stop_processes, wait_ready
from harness.standins import KatalogusStandin, StandinServer
from harness.waiting import free_port, wait_until

HOSTNAME_EVENT = {
    "type": "scan_profile_mutation",
    "object": {"primary_key": "Hostname|internet|{name}.example", "object_type": "Hostname", "scan_level": 1},
}


class Process:
    """A Baton command whose log (JSON lines) goes to a file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], directory: Path) -> None:
        self.name = name
        self.log = directory / f"{name}.log"
        self._file = self.log.open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "baton", *args], env=env, stdout=self._file, stderr=subprocess.STDOUT
        )

    def lines(self, since: int = 0) -> list[dict[str, Any]]:
        """The JSON lines logged after byte `since` (anything else, a traceback's lines, as text)."""
        parsed: list[dict[str, Any]] = []
        with self.log.open("rb") as log:
            log.seek(since)
            for raw in log.read().decode(errors="replace").splitlines():
                try:
                    parsed.append(json.loads(raw))
                except ValueError:
                    parsed.append({"text": raw})
        return parsed

    def offset(self) -> int:
        return self.log.stat().st_size


def tasks_for(url: str, marker: str) -> int:
    with psycopg.connect(database_address(url).conninfo, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM tasks WHERE data::text LIKE %s", (f"%{marker}%",)).fetchone()
        return int(row[0]) if row else 0


def post_event(api: httpx.Client, name: str) -> None:
    event = json.loads(json.dumps(HOSTNAME_EVENT).replace("{name}", name))
    assert wait_until(lambda: _accepted(api, event), 30), "the event was not accepted after the outage"


def _accepted(api: httpx.Client, event: dict[str, Any]) -> bool:
    try:
        return api.post("/organisations/acme/events", json=event).status_code == 202
    except httpx.HTTPError:
        return False


def outage_lines(process: Process, since: int) -> dict[str, Any]:
    lines = process.lines(since)
    return {
        "warnings": [line for line in lines if line.get("level") == "warning"],
        "unavailable": [line for line in lines if line.get("event") == "database unavailable"],
        "back": [line for line in lines if line.get("event") == "database available again"],
        "tracebacks": [line for line in lines if "Traceback" in json.dumps(line)],
    }


def assert_one_outage(process: Process, since: int) -> None:
    seen = outage_lines(process, since)
    assert not seen["tracebacks"], (process.name, seen["tracebacks"][:3])
    assert len(seen["unavailable"]) == 1, (process.name, seen["warnings"])
    assert seen["unavailable"][0]["reason"], process.name
    assert [line["event"] for line in seen["warnings"]] == ["database unavailable"], (process.name, seen["warnings"])
    assert len(seen["back"]) == 1 and seen["back"][0]["level"] == "info", (process.name, seen["back"])
    assert seen["back"][0]["after_seconds"] > 0, process.name


def start_processes(url: str, directory: Path, extra: dict[str, str], second: list[str]) -> tuple[list[Process], str]:
    port = free_port()
    env = {**os.environ, "BATON_DATABASE_URL": url, "BATON_LOG_JSON": "true", **extra}
    api = Process("api", ["serve", "--no-director", "--port", str(port)], env, directory)
    other = Process(second[0], second, env, directory)
    return [api, other], f"http://127.0.0.1:{port}"


def run_outage(
    database: ThrowawayPostgres, tmp_path: Path, extra: dict[str, str], second: list[str], down_seconds: float
) -> tuple[list[Process], float]:
    """API + `second`; an organisation; an outage of `down_seconds` met by a client's pops; an event
    posted once the database is back. Returns the processes and how long that event took to become
    a task after the database took connections again."""
    processes, base = start_processes(database.url, tmp_path, extra, second)
    api = httpx.Client(base_url=base, timeout=30)
    try:
        wait_ready([base])
        made = api.post("/organisations", json={"id": "acme", "name": "Acme"})
        assert made.status_code in (201, 409), made.text  # 409: KATalogus' listing made it first
        post_event(api, "before")
        assert wait_until(lambda: tasks_for(database.url, "before.example") >= 1, 60), "no task before the outage"
        since = [process.offset() for process in processes]

        database.stop()
        ended = time.monotonic() + down_seconds
        while time.monotonic() < ended:  # a job runner meets the outage: 503s, never a hang
            with contextlib.suppress(httpx.HTTPError):
                assert api.post("/queues/boefje-acme/pop").status_code in (200, 503)
            time.sleep(0.2)
        database.start()  # returns once the server takes connections
        back = time.monotonic()
        post_event(api, "after")
        assert wait_until(lambda: tasks_for(database.url, "after.example") >= 1, 60), "no task after the outage"
        event_to_task = time.monotonic() - back
        assert api.post("/queues/boefje-acme/pop").status_code == 200
        time.sleep(1.0)  # every process's next round: any late line is in the logs
        for process, offset in zip(processes, since, strict=True):
            assert_one_outage(process, offset)
        return processes, event_to_task
    finally:
        stop_processes([process.popen for process in processes])


def test_an_outage_is_one_warning_and_one_recovery_line_per_process(
    private_postgres: ThrowawayPostgres, tmp_path: Path
) -> None:
    """The API and a director running the schedulers (threads) on the default timings: a 4 s outage
    is one warning and one info line in each, and an event posted when the database is back becomes
    a task within a second or two (the schedulers retry every second, not every 5 s)."""
    _, event_to_task = run_outage(private_postgres, tmp_path, {}, ["director", "--runner", "thread"], down_seconds=4)
    print(f"an event posted after the outage became a task {event_to_task:.2f} s after the database was back")
    # 1 s back-off, a poll interval of 1 s, the API's own reconnect: about 1-2 s on an idle machine
    # (the back-off was 5 s before); generous, for busy CI machines.
    assert event_to_task < 10.0


def test_an_outage_past_the_renew_deadline_is_still_one_warning_per_process(
    private_postgres: ThrowawayPostgres, tmp_path: Path
) -> None:
    """Leases shorter than the outage: a worker's schedulers lose their leases and are claimed again
    afterwards. What that costs is logged as information: the outage is the one warning. The worker
    reads its organisations and catalogue from KATalogus, as in OpenKAT: its organisation sync, which
    tries a round every retry period, says nothing of the outage either (it said it every round)."""
    katalogus = KatalogusStandin()
    katalogus.add_organisation("acme")
    katalogus.add_boefje("dns-records", ["Hostname"], scan_level=1, enabled=True)
    short_leases = {
        "BATON_LEASE_SECONDS": "3",
        "BATON_RENEW_DEADLINE_SECONDS": "2",
        "BATON_RETRY_PERIOD_SECONDS": "0.5",
    }
    with StandinServer(katalogus.app) as server:
        extra = {**short_leases, "BATON_KATALOGUS_URL": server.url}
        _, event_to_task = run_outage(private_postgres, tmp_path, extra, ["worker"], down_seconds=5)
    print(f"an event posted after the outage became a task {event_to_task:.2f} s after the database was back")
    assert event_to_task < 10.0
