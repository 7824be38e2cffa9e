"""The process runner's fork server, run for real: children are forked from a server that imported
what they run (no second interpreter start), which holds no connection and runs no thread; a server
that dies takes its children with it and the runner starts both again; without the fork server the
runner starts fresh interpreters as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil

from baton.control.runners import ProcessRunner
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType
from baton.storage.engine import Store
from baton.storage.tables import Scheduler as SchedulerRow
from harness.waiting import wait_until
from tests.system.test_runners import FAST, add_org, scheduler_processes, state_of

SPEC = SchedulerSpec("acme", SchedulerType.BOEFJE)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_children_are_forked_from_a_server_that_holds_no_connection_and_no_thread(store: Store) -> None:
    add_org(store, "acme")
    runner = ProcessRunner(store, store.url, extra_env=FAST)
    try:
        runner.start(SPEC)
        child_pid = runner.pid(SPEC.id)
        assert runner.fork_server is not None and runner.fork_server.pid is not None and child_pid is not None
        server, child = psutil.Process(runner.fork_server.pid), psutil.Process(child_pid)
        assert child.ppid() == server.pid and server.ppid() == os.getpid()
        assert server.cmdline()[1:3] == ["-m", "baton.cli.forkserver"]
        # What `ps` shows for the child, once it has titled itself: its own command line.
        title = ["baton", "standalone", "--organisation", "acme", "--scheduler", "boefje"]
        assert wait_until(lambda: child.cmdline()[:6] == title, 30), child.cmdline()
        assert scheduler_processes("acme") == [child_pid]
        assert wait_until(lambda: state_of(store, SPEC.id) == SchedulerState.RUNNING.value, 30)
        assert (location(store) or "").endswith(f":{child_pid}")  # it reports itself under its own pid

        # Forking after a thread or a connection was started is unsafe: the server has neither.
        assert server.num_threads() == 1
        assert server.net_connections(kind="inet") == []
        assert not any(opened.path.endswith(".db") for opened in server.open_files())
    finally:
        runner.shutdown()
    assert gone(child.pid) and wait_until(lambda: gone(server.pid), 10)
    assert state_of(store, SPEC.id) == SchedulerState.STOPPED.value


def location(store: Store) -> str | None:
    with store.session() as session:
        row = session.get(SchedulerRow, SPEC.id)
        return row.location if row else None


def test_a_dead_fork_server_takes_its_children_along_and_both_start_again(store: Store) -> None:
    add_org(store, "acme")
    runner = ProcessRunner(store, store.url, extra_env=FAST)
    try:
        runner.start(SPEC)
        first_child = runner.pid(SPEC.id)
        assert runner.fork_server is not None and first_child is not None
        first_server = runner.fork_server.pid
        assert first_server is not None
        assert wait_until(lambda: state_of(store, SPEC.id) == SchedulerState.RUNNING.value, 30)

        os.kill(first_server, signal.SIGKILL)
        assert wait_until(lambda: gone(first_child), 30), "the child outlived its fork server"
        assert wait_until(lambda: runner.status(SPEC.id) == SchedulerState.FAILED, 10)
        assert wait_until(lambda: bool(runner.supervise()), 15)  # after its back-off

        second_child = runner.pid(SPEC.id)
        assert second_child not in (None, first_child)
        assert runner.fork_server.pid not in (None, first_server)
        assert psutil.Process(second_child).ppid() == runner.fork_server.pid
        assert wait_until(lambda: state_of(store, SPEC.id) == SchedulerState.RUNNING.value, 30)
    finally:
        runner.shutdown()


def test_without_the_fork_server_each_child_is_a_fresh_interpreter(store: Store) -> None:
    add_org(store, "acme")
    runner = ProcessRunner(store, store.url, extra_env=FAST, fork_server=False)
    try:
        runner.start(SPEC)
        child_pid = runner.pid(SPEC.id)
        assert runner.fork_server is None and child_pid is not None
        child = psutil.Process(child_pid)
        assert child.ppid() == os.getpid()
        assert child.cmdline()[:4] == [sys.executable, "-m", "baton", "standalone"]
        assert wait_until(lambda: state_of(store, SPEC.id) == SchedulerState.RUNNING.value, 30)
    finally:
        runner.shutdown()
    assert gone(child_pid)


def test_the_fork_server_exits_when_its_parent_is_killed() -> None:
    """The director SIGKILLed: its fork server gets its parent-death signal and exits, and with it
    every child (tests/system/test_runners.py runs the real director for this; here the server
    alone, started by a throw-away parent)."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from baton.control.forking import ForkServer\n"
            "server = ForkServer(lambda: dict(__import__('os').environ))\n"
            "server.fork(['--version'])\n"
            "print(server.pid, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        # The forked `baton --version` shares the parent's stdout: its line may come first.
        lines = iter(parent.stdout.readline, "")
        server_pid = int(next(line for line in lines if line.strip().isdigit()))
        assert not gone(server_pid)
        parent.kill()
        parent.wait()
        assert wait_until(lambda: gone(server_pid), 10), "the fork server outlived its parent"
    finally:
        parent.kill()
