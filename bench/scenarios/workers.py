"""`baton worker`: 1,000 organisations (3,000 schedulers) shared by 1, 2 and 4 worker processes on
PostgreSQL, against the director's thread runner on the same organisations in the same run.

For each worker count: time from starting the processes until every scheduler row is owned by a
live worker and `running`; how evenly they are shared (max / min per worker once balanced); resident
memory (VmRSS from /proc) per worker and per scheduler; with 2 and 4 workers, the hand-over after
SIGKILL of one worker (its leases must expire: target lease + one worker round) and after SIGTERM
(it releases its rows: target < 2 s). Every write to a scheduler row, task or consumed event is
logged by triggers (harness.writelog) and the log is judged per case: no write from a
superseded term, no scheduler marked stopped or failed by a process that did not own it.
"""

from __future__ import annotations

import math
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baton.core.logging import configure_logging
from baton.core.settings import LeaseSettings, Settings
from bench.scenarios import director
from bench.scenarios.common import Context, add_organisations, connect, fresh_database
from harness.leasechaos import EventFeeder, Member, Pool, pool, wait_for
from harness.writelog import analyse, install

LEASES = LeaseSettings(lease_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2)  # the defaults
# A worker's round (control/workers.py): claims and releases happen once per round.
WORKER_ROUND_SECONDS = min(1.0, LEASES.retry_period_seconds)
# Idle schedulers poll their inputs every 10 s: 3,000 pollers at the default 1 s would be the load
# measured, not the workers. It must stay below the heartbeat timeout (30 s), or a scheduler waiting
# out its poll counts as hung and its lease is no longer renewed.
POLL_INTERVAL_SECONDS = 10.0
WORKER_ENV = {
    "BATON_LEASE_SECONDS": f"{LEASES.lease_seconds:g}",
    "BATON_RENEW_DEADLINE_SECONDS": f"{LEASES.renew_deadline_seconds:g}",
    "BATON_RETRY_PERIOD_SECONDS": f"{LEASES.retry_period_seconds:g}",
    "BATON_RECONCILE_INTERVAL_SECONDS": "2",
    "BATON_POLL_INTERVAL_SECONDS": f"{POLL_INTERVAL_SECONDS:g}",
    "BATON_HEARTBEAT_TIMEOUT_SECONDS": "30",
    "BATON_LOG_LEVEL": "warning",
}
KILL_TARGET_SECONDS = LEASES.lease_seconds + WORKER_ROUND_SECONDS
TERM_TARGET_SECONDS = 2.0
CONVERGE_TIMEOUT = 300.0


def vm_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Schedulers:
    """Who runs what, read over one connection: running rows per owner process (host:pid#)."""

    def __init__(self, ctx: Context) -> None:
        self.conn = connect(ctx)

    def running_by_owner(self) -> tuple[int, dict[str, int]]:
        rows = self.conn.execute(
            "SELECT split_part(s.owner, '#', 1) || '#', count(*) FILTER (WHERE s.state = 'running'), count(*)"
            " FROM schedulers s JOIN organisations o ON o.id = s.organisation GROUP BY 1"
        ).fetchall()
        total = sum(int(row[2]) for row in rows)
        return total, {str(row[0]): int(row[1]) for row in rows if row[0] is not None}

    def all_running_under(self, members: list[Member]) -> bool:
        total, owners = self.running_by_owner()
        return total > 0 and sum(owners.get(member.owner_prefix, 0) for member in members) == total

    def shares(self, members: list[Member]) -> list[int]:
        _total, owners = self.running_by_owner()
        return [owners.get(member.owner_prefix, 0) for member in members]

    def balanced(self, members: list[Member]) -> bool:
        shares = self.shares(members)
        return self.all_running_under(members) and max(shares) - min(shares) <= 1

    def close(self) -> None:
        self.conn.close()


def release_everything(ctx: Context) -> None:
    """Between cases: nobody holds anything, and the audit log starts empty."""
    with connect(ctx) as conn:
        conn.execute("UPDATE schedulers SET owner = NULL, lease_expires_at = NULL, state = 'stopped'")
        conn.execute("TRUNCATE scheduler_writes")
        conn.execute("DELETE FROM workers")


def timed(condition: Callable[[], bool], since: float, timeout: float = CONVERGE_TIMEOUT) -> float | None:
    waited = wait_for(condition, timeout, interval=0.1)
    return None if waited is None else time.monotonic() - since


def registered(ctx: Context, member: Member) -> bool:
    with connect(ctx) as conn:
        row = conn.execute("SELECT count(*) FROM workers WHERE id LIKE %s", (member.owner_prefix + "%",)).fetchone()
    return bool(row and row[0])


def idle_worker(ctx: Context) -> dict[str, Any]:
    """A worker with nothing to run: its start-up time (process start until its row is written) and RSS."""
    with pool(ctx.database_url, WORKER_ENV) as members:
        started = time.monotonic()
        member = members.start("worker")
        startup = timed(lambda: registered(ctx, member), started, 60)
        time.sleep(1)
        rss = vm_rss_mib(member.pid)
    return {"startup_s": startup, "rss_mib": rss}


def stop_gracefully(member: Member) -> int | None:
    member.process.terminate()
    try:
        return member.process.wait(60)
    except subprocess.TimeoutExpired:
        member.process.kill()
        member.process.wait(10)
        return None


def one_case(ctx: Context, workers: int, organisations: list[str], idle_rss_mib: float) -> dict[str, Any]:
    release_everything(ctx)
    schedulers = Schedulers(ctx)
    case: dict[str, Any] = {"workers": workers}
    try:
        # Events for the normalizers all along, so schedulers write (consume events, insert tasks)
        # under their claims while they are handed over: the audit has writes to judge.
        with pool(ctx.database_url, WORKER_ENV) as members, EventFeeder(ctx.database_url, organisations, 0.02):
            started = time.monotonic()
            live = [members.start("worker") for _ in range(workers)]
            case["all_running_s"] = timed(lambda: schedulers.all_running_under(live), started)
            case["balanced_s"] = timed(lambda: schedulers.balanced(live), started)
            shares = schedulers.shares(live)
            case["per_worker"] = shares
            case["balance_max_to_min"] = max(shares) / min(shares) if min(shares) else None
            rss = [vm_rss_mib(member.pid) for member in live]
            case["rss_mib_per_worker"] = rss
            held = sum(shares)
            case["rss_mib_per_scheduler"] = sum(rss) / held if held else None
            case["rss_mib_per_scheduler_above_idle"] = (sum(rss) - workers * idle_rss_mib) / held if held else None
            if workers >= 2:
                case.update(hand_overs(members, live, schedulers))
            exits = [stop_gracefully(member) for member in live]
            case["clean_exits"] = sum(1 for code in exits if code == 0)
    finally:
        schedulers.close()
    case["audit"] = analyse(ctx.database_url).as_dict()
    return case


def hand_overs(members: Pool, live: list[Member], schedulers: Schedulers) -> dict[str, Any]:
    """SIGKILL one worker (its peers wait for its leases to expire), start a replacement as a
    Deployment would, then SIGTERM another (it releases its rows before exiting)."""
    out: dict[str, Any] = {}
    victim = live.pop(0)
    out["sigkill_held"] = schedulers.shares([victim])[0]
    killed_at = time.monotonic()
    victim.signal(signal.SIGKILL)
    victim.process.wait(10)
    out["sigkill_handover_s"] = timed(lambda: schedulers.all_running_under(live), killed_at)
    replacement_at = time.monotonic()
    live.append(members.start("worker"))
    out["replacement_balanced_s"] = timed(lambda: schedulers.balanced(live), replacement_at)
    leaving = live.pop(0)
    out["sigterm_held"] = schedulers.shares([leaving])[0]
    terminated_at = time.monotonic()
    leaving.process.terminate()
    out["sigterm_handover_s"] = timed(lambda: schedulers.all_running_under(live), terminated_at)
    try:
        out["sigterm_exit_code"] = leaving.process.wait(60)
    except subprocess.TimeoutExpired:
        out["sigterm_exit_code"] = None
    out["sigterm_exit_s"] = time.monotonic() - terminated_at
    return out


def worst(cases: list[dict[str, Any]], key: str) -> float | None:
    """The largest value over the cases that measured it; infinite when one of them never got there."""
    values = [case[key] for case in cases if key in case]
    if not values:
        return None
    return math.inf if any(value is None for value in values) else max(values)


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    organisations = ctx.size(1000, 50)
    counts = (1, 2) if ctx.quick else (1, 2, 4)
    # The director's thread runner first, on the same organisations and settings, in this process.
    # With the audit's triggers, which cost both alike: the director is measured with them too.
    overrides = {"poll_interval_seconds": POLL_INTERVAL_SECONDS}
    director_case = director.one_case(ctx, "thread", organisations, overrides, audit=True)
    fresh_database(ctx)
    idle = idle_worker(ctx)
    names = [f"wrk-{n:05d}" for n in range(organisations)]
    with connect(ctx) as conn:
        add_organisations(conn, names)
    install(ctx.database_url)
    cases = [one_case(ctx, workers, names, idle["rss_mib"]) for workers in counts]
    return {
        "organisations": organisations,
        "schedulers": organisations * 3,
        "settings": {
            "lease_s": LEASES.lease_seconds,
            "renew_deadline_s": LEASES.renew_deadline_seconds,
            "retry_period_s": LEASES.retry_period_seconds,
            "worker_round_s": WORKER_ROUND_SECONDS,
            "scheduler_threads": Settings().scheduler_threads,
            "poll_interval_s": POLL_INTERVAL_SECONDS,
        },
        "targets": {"sigkill_handover_s": KILL_TARGET_SECONDS, "sigterm_handover_s": TERM_TARGET_SECONDS},
        "idle_worker": idle,
        "director_thread": director_case,
        "cases": cases,
        "worst": {
            "sigkill_handover_s": worst(cases, "sigkill_handover_s"),
            "sigterm_handover_s": worst(cases, "sigterm_handover_s"),
            "balance_max_to_min": worst(cases, "balance_max_to_min"),
        },
        "audit_totals": {
            "superseded_writes": sum(case["audit"]["superseded_writes"] for case in cases),
            "orphan_marks": sum(case["audit"]["orphan_marks"] for case in cases),
            "scheduler_writes": sum(case["audit"]["scheduler_writes"] for case in cases),
        },
    }
