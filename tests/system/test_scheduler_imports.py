"""A scheduler process (the process runner's child, a pod's `baton standalone`) imports only what a
scheduler uses: no web stack, no Kubernetes client, no migration tooling. Each of those costs
megabytes of resident memory in every one of thousands of scheduler processes.

The check runs the process runner's own command (`python -m baton standalone ...`) through a driver
that writes the names in sys.modules when the process exits, after it has run a few rounds and
stopped on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from baton.control.runners import ProcessRunner
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType
from baton.storage.control.organisations import create_organisation
from baton.storage.engine import Store
from baton.storage.tables import Scheduler as SchedulerRow
from harness.waiting import wait_until

# Top-level packages that only the API, the status page, the Kubernetes runner, migrations, the
# command line's help or the tests need.
NOT_IN_A_SCHEDULER = frozenset(
    {
        "fastapi",
        "starlette",
        "uvicorn",
        "granian",
        "httpx",
        "jinja2",
        "prometheus_client",
        "kubernetes",
        "alembic",
        "mako",
        "playwright",
        "harness",
        "rich",
        "pygments",
        "yaml",
        "croniter",
        "dateutil",
    }
)
# Baton's layers that a scheduler never calls: its process holds ingest, storage and core only.
BATON_LAYERS_NOT_IN_A_SCHEDULER = ("baton.api", "baton.ui", "baton.service", "baton.control", "baton.http_server")


# `python -c DRIVER <baton arguments>`: what `python -m baton <baton arguments>` does, and on exit
# the loaded modules' names written to $MODULES_FILE.
DRIVER = """
import atexit, os, runpy, sys

def write_modules():
    with open(os.environ["MODULES_FILE"], "w") as out:
        out.write("\\n".join(sorted(sys.modules)))

atexit.register(write_modules)
runpy.run_module("baton", run_name="__main__", alter_sys=True)
"""


def heartbeats(store: Store, scheduler_id: str) -> tuple[str | None, object]:
    with store.session() as session:
        row = session.get(SchedulerRow, scheduler_id)
        return (row.state, row.heartbeat_at) if row else (None, None)


def run_scheduler_process(store: Store, spec: SchedulerSpec, modules_file: Path) -> set[str]:
    """Run the process runner's child for `spec` until it has beaten twice; return what it imported."""
    python, flag, module, *arguments = ProcessRunner(store, store.url).command(spec)
    assert [flag, module] == ["-m", "baton"]
    env = {
        **os.environ,
        "BATON_DATABASE_URL": store.url,
        "BATON_RETRY_PERIOD_SECONDS": "0.2",  # leases and with them heartbeats: a second one soon
        "BATON_POLL_INTERVAL_SECONDS": "0.05",
        "BATON_LOG_LEVEL": "warning",
        "MODULES_FILE": str(modules_file),
    }
    command = [python, "-c", DRIVER, *arguments]
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: heartbeats(store, spec.id)[0] == SchedulerState.RUNNING.value, 60)
        first = heartbeats(store, spec.id)[1]
        assert wait_until(lambda: heartbeats(store, spec.id)[1] != first, 30), "no second heartbeat"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr[-2000:]
    return set(modules_file.read_text().split())


@pytest.mark.parametrize("scheduler_type", list(SchedulerType))
def test_a_scheduler_process_imports_only_what_a_scheduler_needs(
    store: Store, scheduler_type: SchedulerType, tmp_path: Path
) -> None:
    with store.session() as session:
        create_organisation(session, "lean", "lean", maxsize=10)
    modules = run_scheduler_process(store, SchedulerSpec("lean", scheduler_type), tmp_path / "modules.txt")

    assert "baton.ingest.scheduler" in modules and "sqlalchemy" in modules  # the log is complete
    assert sorted(NOT_IN_A_SCHEDULER & {name.split(".")[0] for name in modules}) == []
    assert sorted(name for name in modules if name.startswith(BATON_LAYERS_NOT_IN_A_SCHEDULER)) == []


# What the process runner's fork server has imported, and rehearsed, when it forks a child: every
# forked scheduler process starts with these modules (cli/forkserver.py).
FORK_SERVER_MODULES = """
import sys
from baton.cli.forkserver import preload
preload()
print("\\n".join(sorted(sys.modules)))
"""


def test_the_fork_server_imports_only_what_a_scheduler_needs(store: Store) -> None:
    env = {**os.environ, "BATON_DATABASE_URL": store.url}
    done = subprocess.run(
        [sys.executable, "-c", FORK_SERVER_MODULES], env=env, capture_output=True, text=True, check=True
    )
    modules = set(done.stdout.split())

    assert {"baton.runtime", "baton.ingest.registry", "sqlalchemy.orm", "psycopg"} <= modules
    assert sorted(NOT_IN_A_SCHEDULER & {name.split(".")[0] for name in modules}) == []
    assert sorted(name for name in modules if name.startswith(BATON_LAYERS_NOT_IN_A_SCHEDULER)) == []
