"""The process runner's fork server: one interpreter that has imported what a scheduler process
imports, and forks a `baton standalone` child for each request, so that its children share those
pages instead of each importing them anew (a fresh interpreter's 50 MiB of its own).

The director's process runner (control/forking.py) starts it as `python -m baton.cli.forkserver FD`,
FD being its end of a socket pair, with the environment its children get. A request is the `baton`
arguments of one child (one message); the answer is the child's pid, with a pidfd for it attached,
through which the director watches and signals that child whoever reaps it. The server reaps its
children, and exits when its socket reads end-of-file: the director closed it, or died.

It imports, and nothing else: fork after a thread or a connection has been started is unsafe
(the child would inherit a lock held by a thread that no longer exists, or share a socket). Its
objects are then frozen (`gc.freeze`): a collection in a child never touches them, so their pages
stay shared. A child is the command line run in-process: `baton standalone ...` exactly as on its
own (same options, logs, exit codes, SIGTERM handling), titled so in `ps`, and it gets SIGTERM when
the server dies, as the server does when the director dies.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import NoReturn

from setproctitle import setproctitle

from baton.core.processes import die_with_parent
from baton.core.settings import AmqpSettings

# What a scheduler process imports (tests/system/test_scheduler_imports.py keeps the list lean):
# the command line, the runtime, every planner, the store and the database dialects it loads lazily.
PRELOAD = (
    "baton.cli",
    "baton.runtime",
    "baton.ingest.registry",
    "baton.ingest.events",
    "baton.ingest.scheduler",
    "baton.storage.engine",
    "baton.storage.tables",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.sqlite.pysqlite",
)
RABBITMQ = "baton.ingest.rabbitmq"
REAP_EVERY_SECONDS = 1.0
MESSAGE_BYTES = 64 * 1024


def preload() -> list[str]:
    """Import what a scheduler process imports (RabbitMQ's client only when enabled), rehearse its
    first steps, then freeze every object made so far out of the collector's reach; the modules."""
    modules = [*PRELOAD, RABBITMQ] if AmqpSettings().enabled else list(PRELOAD)
    for name in modules:
        importlib.import_module(name)
    rehearse()
    gc.collect()
    gc.freeze()
    return modules


def rehearse() -> None:
    """The first steps of every child, up to its first connection: parsing its command line, its
    settings, building its store's engines (which connect only when used) and the ORM's mappers.

    Python 3.11 rewrites a function's bytecode in place while it warms up (the specialising
    interpreter) and fills caches on first use: done here, once, those pages are the server's and
    stay shared; done in each child, each copies them (measured: parsing the command line alone
    costs a child 3.8 MiB unrehearsed, 0.7 MiB rehearsed)."""
    from baton.cli import command
    from baton.core.settings import Settings
    from baton.storage.engine import Store, head_revision
    from baton.storage.tables import configure_orm

    options = ["--organisation", "rehearsal", "--scheduler", "boefje"]
    group = command()
    context = group.make_context("baton", ["standalone", *options])
    standalone = group.get_command(context, "standalone")
    if standalone is not None:
        standalone.make_context("standalone", options, parent=context)
    settings = Settings()
    Store(settings.database_url, settings.database_schema).dispose()
    configure_orm()
    head_revision()


def serve(channel: socket.socket) -> None:
    """Fork a child per request until the director closes its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the director's to act on
    server = os.getpid()
    while True:
        reap()
        ready, _, _ = select.select([channel], [], [], REAP_EVERY_SECONDS)
        if not ready:
            continue
        message = channel.recv(MESSAGE_BYTES)
        if not message:
            return
        argv = [str(arg) for arg in json.loads(message)["argv"]]
        pid = os.fork()
        if pid == 0:
            run_child(argv, server, channel)
        pidfd = os.pidfd_open(pid)  # before any reap: it is our unreaped child, its pid cannot be reused
        try:
            socket.send_fds(channel, [json.dumps({"pid": pid}).encode()], [pidfd])
        finally:
            os.close(pidfd)


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def run_child(argv: list[str], server: int, channel: socket.socket) -> NoReturn:
    code = 1
    try:
        channel.close()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        die_with_parent()
        if os.getppid() != server:  # the server died before the line above: nobody would stop us
            os._exit(1)
        setproctitle(" ".join(["baton", *argv]))
        from baton.cli import main

        main(argv)
        code = 0
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def exit_code(exc: SystemExit) -> int:
    """What the interpreter would exit with for this SystemExit."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    preload()
    with channel:
        serve(channel)


if __name__ == "__main__":
    main()
