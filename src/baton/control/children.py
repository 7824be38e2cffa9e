"""The process runner's children: `baton standalone`, forked from a server that imported Baton once.

A child started as a fresh interpreter (`python -m baton standalone ...`) spends a second or more
of CPU importing Python's libraries, psycopg, SQLAlchemy and pydantic before it claims its row. A
director taking over nine of them at once on two busy cores (a container beside API replicas under
load) had them all running only after 22.6 s. multiprocessing's forkserver imports them once, in a
server the runner starts as soon as it is made (a standby director has it ready before it leads),
and forks every child from it: the child runs the same command line as a pod, without the imports.

A child gets SIGTERM when its parent, the fork server, ends, and the fork server ends with the
director: no child outlives its director. `ps`/`top` show a child by its scheduler's id.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import signal
import sys
import threading
from multiprocessing.process import BaseProcess

# What `baton standalone` imports (tests/system/test_scheduler_imports.py keeps that list short).
PRELOAD = [
    "baton.cli",
    "baton.runtime",
    "baton.ingest.registry",
    "baton.ingest.event_driven",
    "baton.ingest.rabbitmq",
    "baton.storage.engine",
]
PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1

_context = multiprocessing.get_context("forkserver")
_preparing = threading.Lock()
_ready = False


def prepare() -> None:
    """Start the fork server and wait until it has imported Baton (it forks a first child, which
    exits at once, only then): a director does this before it competes for the lead, so that a
    reconcile round never waits for those imports (and a leadership renewal for that round)."""
    global _ready
    with _preparing:
        if _ready:
            return
        _context.set_forkserver_preload(PRELOAD)
        first = _context.Process(target=_exit_at_once, daemon=True)
        first.start()
        first.join()
        _ready = True


def prepare_in_background() -> None:
    """`prepare()` in a thread: the fork server imports while the director migrates the database
    (the runner's own `prepare()` then waits for what is left of it)."""
    threading.Thread(target=prepare, name="fork-server", daemon=True).start()


def start_child(args: list[str], env: dict[str, str], name: str) -> BaseProcess:
    """Fork `baton <args>` with exactly `env` as its environment; `name` is what ps shows."""
    prepare()
    child = _context.Process(target=_run, args=(args, env, name), name=name, daemon=True)
    child.start()
    return child


def stop_child(child: BaseProcess, timeout: float) -> None:
    """SIGTERM (a graceful stop: the scheduler gives its row up), SIGKILL after `timeout`."""
    if not child.is_alive():
        return
    child.terminate()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()


def _exit_at_once() -> None:
    return None


def _run(args: list[str], env: dict[str, str], name: str) -> None:
    """In the child: `python -m baton <args>`, in the environment it was given (the same command
    line a fresh interpreter ran, so the layers above this one are not imported here by name)."""
    _name_and_tie_to_parent(name)
    _let_the_fork_server_end()
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["baton", *args]
    runpy.run_module("baton", run_name="__main__", alter_sys=True)


def _name_and_tie_to_parent(name: str) -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except OSError:
        pass


def _let_the_fork_server_end() -> None:
    """The fork server ends when the last holder of its "alive" pipe closes it: the director, and
    every child, to which multiprocessing hands a copy (so that a child may fork through it too).
    A scheduler never does: it closes its copy, so that the server ends with the director and the
    children then get their SIGTERM."""
    server = multiprocessing.forkserver._forkserver
    alive = server._forkserver_alive_fd  # type: ignore[attr-defined]
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]
