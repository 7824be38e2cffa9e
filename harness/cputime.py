"""CPU time of process trees from /proc (Linux): what an operation costs in CPU-seconds, which a
shared, noisy machine does not distort the way it distorts wall-clock rates.

A tree's CPU time is, over its root and every live descendant, user + system time plus the time of
their children already waited for (cutime + cstime): a backend or a load-generator process that exits
between two samples is then still counted, in its parent's total. Counted in clock ticks
(`SC_CLK_TCK`, usually 100 a second), given in seconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Stat:
    ppid: int
    own: int  # utime + stime, ticks
    reaped: int  # cutime + cstime: children waited for, ticks


def stat(pid: int) -> Stat | None:
    """One process's counters, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after its last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14 to 17.
    return Stat(ppid=int(fields[1]), own=int(fields[11]) + int(fields[12]), reaped=int(fields[13]) + int(fields[14]))


def snapshot() -> dict[int, Stat]:
    """Every process of the machine."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            counters = stat(int(entry.name))
            if counters is not None:
                found[int(entry.name)] = counters
    return found


def tree_seconds(root: int, processes: dict[int, Stat] | None = None) -> float:
    """CPU-seconds used so far by `root`, its live descendants and every child they waited for."""
    processes = processes if processes is not None else snapshot()
    children: dict[int, list[int]] = {}
    for pid, counters in processes.items():
        children.setdefault(counters.ppid, []).append(pid)
    if root not in processes:
        raise ProcessLookupError(f"process {root} is gone")
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += processes[pid].own + processes[pid].reaped
        todo += children.get(pid, [])
    return total / TICKS


def own_seconds() -> float:
    """This process and the children it waited for (the load generator's spawned processes)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def parent_of(pid: int) -> int:
    counters = stat(pid)
    if counters is None:
        raise ProcessLookupError(f"process {pid} is not on this machine")
    return counters.ppid
