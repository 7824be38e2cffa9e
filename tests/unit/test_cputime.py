"""harness.cputime: a process tree's CPU time counts live descendants and children already waited for
(the capacity benchmark reads the API's and PostgreSQL's CPU this way)."""

from __future__ import annotations

import os
import subprocess
import sys

from harness.cputime import parent_of, snapshot, tree_seconds

# Burns 0.3 s of its own CPU time (whatever the machine's load), says so, then waits for stdin. The kernel
# accounts CPU time by sampling at clock ticks, so /proc may show a little less: the checks ask for 0.2.
BURN = "import sys, time\nwhile time.process_time() < 0.3:\n    pass\nprint('burnt', flush=True)\nsys.stdin.read()\n"


def burner() -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "burnt"
    return child


def test_a_live_child_counts_in_its_parents_tree() -> None:
    before = tree_seconds(os.getpid())
    child = burner()
    try:
        assert parent_of(child.pid) == os.getpid()
        assert tree_seconds(child.pid) >= 0.2
        assert tree_seconds(os.getpid(), snapshot()) - before >= 0.2
    finally:
        child.communicate("")


def test_a_child_waited_for_still_counts() -> None:
    before = tree_seconds(os.getpid())
    child = burner()
    child.communicate("")  # exits and is waited for: its time moves to this process's cutime
    assert child.returncode == 0
    assert tree_seconds(os.getpid()) - before >= 0.2
