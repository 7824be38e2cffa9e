"""Where a forked scheduler process's unique memory comes from: run as a program of its own, it does
what the process runner's fork server does (`baton.cli.forkserver.preload`), then forks children
that stop at successive steps of a child's life and measures each one's USS once it has reached its
step and waited `SECONDS`:

- forked: nothing run after the fork;
- store opened: its settings read and its store opened (one connection, the schema checked);
- scheduler running: `baton standalone` for the first organisation's boefje scheduler, as the runner
  starts it;
- scheduler running, traced: the same for the second organisation's (each holds its own lease), with
  `tracemalloc` started at the fork, which reports how much of what it allocated after the fork is
  still alive (its own tables inflate its USS: not reported).

What a child writes into pages it shares with the server (reference counts, caches, the bytecode
the interpreter specialises as it runs) becomes its own at the first write: USS minus what it
allocated is that copied share.

    BATON_DATABASE_URL=... python -m bench.fork_probe ORGANISATION OTHER_ORGANISATION SECONDS   # prints JSON
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable

import psutil

from baton.cli import forkserver

STEPS = ("forked", "store opened", "scheduler running", "scheduler running, traced")


def open_store() -> None:
    from baton.core.settings import Settings
    from baton.runtime import current_store

    current_store(Settings())


def run_scheduler(organisation: str) -> None:
    from baton.cli import main

    main(["standalone", "--organisation", organisation, "--scheduler", "boefje"])


def report_traced(path: str, after: float) -> None:
    time.sleep(after)
    with open(path, "w") as out:
        out.write(str(tracemalloc.get_traced_memory()[0]))


def child(step: str, organisations: list[str], seconds: float, traced_to: str) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        work: Callable[[], None] = lambda: time.sleep(3600)  # noqa: E731
        if step == "store opened":
            open_store()
        elif step.startswith("scheduler running"):
            organisation = organisations[0]
            if step.endswith("traced"):
                organisation = organisations[1]
                tracemalloc.start()
                threading.Thread(target=report_traced, args=(traced_to, seconds - 1), daemon=True).start()
            work = lambda: run_scheduler(organisation)  # noqa: E731
        work()
    finally:
        os._exit(0)


def main() -> None:
    organisations, seconds = sys.argv[1:3], float(sys.argv[3])
    forkserver.preload()
    traced_to = f"/tmp/baton-fork-probe-{os.getpid()}"
    pids = {step: child(step, organisations, seconds, traced_to) for step in STEPS}
    time.sleep(seconds)
    result: dict[str, float | None] = {}
    for step, pid in pids.items():
        if not step.endswith("traced"):
            result[step] = psutil.Process(pid).memory_full_info().uss / 2**20
    try:
        with open(traced_to) as found:
            result["allocated after the fork"] = int(found.read()) / 2**20
        os.unlink(traced_to)
    except (OSError, ValueError):
        result["allocated after the fork"] = None
    for pid in pids.values():
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
