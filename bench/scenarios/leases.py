"""The lease fault harness: `baton director --runner thread` processes on one PostgreSQL database,
20 organisations (60 schedulers), events fed to every normalizer all along, and faults repeated:

- freeze: SIGSTOP of the leader until every scheduler runs from another director (its lease must
  run out), then SIGCONT (it must find itself fenced and act no more);
- cut: pg_terminate_backend of every connection the leader holds (a proxy, a firewall,
  idle_session_timeout);
- kill: SIGKILL of the leader, and a new director started in its place, as Kubernetes would;
- restart: PostgreSQL restarted (`pg_ctl -m fast restart`).

For each: seconds from the fault until every scheduler row is `running`, owned by a director that
is alive and not frozen, with a heartbeat written after the fault (on the database's clock). Every
scheduler write is logged by triggers (harness.writelog) and judged at the end: writes from a
superseded term, stopped/failed marks by a process that did not own the row.

Then, bounded, the Kubernetes Lease elector under the same freeze: two `baton director --runner
kubernetes` against the fake API server of the integration tests (tests/fake_kube.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from baton.core.logging import configure_logging
from baton.core.settings import LeaseSettings
from bench.scenarios.common import Context, add_organisations, connect, fresh_database
from harness.leasechaos import (
    EventFeeder,
    Member,
    Pool,
    leader_pid,
    leader_term,
    pool,
    terminate_connections_of,
    wait_for,
)
from harness.writelog import analyse, install

# Kubernetes' controller defaults (kube-controller-manager): lease 15 s, renew deadline 10 s, retry 2 s.
LEASES = LeaseSettings(lease_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2)
RECONCILE_INTERVAL_SECONDS = 2.0
DIRECTOR_ENV = {
    "BATON_LEASE_SECONDS": f"{LEASES.lease_seconds:g}",
    "BATON_RENEW_DEADLINE_SECONDS": f"{LEASES.renew_deadline_seconds:g}",
    "BATON_RETRY_PERIOD_SECONDS": f"{LEASES.retry_period_seconds:g}",
    "BATON_RECONCILE_INTERVAL_SECONDS": f"{RECONCILE_INTERVAL_SECONDS:g}",
    "BATON_POLL_INTERVAL_SECONDS": "0.5",
    "BATON_HEARTBEAT_TIMEOUT_SECONDS": "30",
    "BATON_LOG_LEVEL": "info",
}
ORGANISATIONS = 20
# Targets of issue #22 (seconds until every scheduler runs again from a live director).
TARGETS = {
    "freeze": LEASES.lease_seconds + 2.0,
    "cut": LEASES.lease_seconds + RECONCILE_INTERVAL_SECONDS,  # the general bound: lease + one round
    "kill": 2.0,
    "restart": 3.0,
}
FAULT_TIMEOUT = 90.0
SETTLE_TIMEOUT = 120.0
PAUSE_BETWEEN_FAULTS = 3.0


class Directors:
    """The directors under test: who is alive and not frozen, and whether they run everything."""

    def __init__(self, ctx: Context, members: Pool, count: int) -> None:
        self.ctx = ctx
        self.members = members
        self.live: list[Member] = [members.start("director") for _ in range(count)]
        self.conn = connect(ctx)

    def db_now(self) -> datetime:
        for _attempt in range(100):
            try:
                row = self.conn.execute("SELECT clock_timestamp()").fetchone()
                assert row is not None
                return row[0]  # type: ignore[no-any-return]
            except Exception:
                self.reconnect()
                time.sleep(0.1)
        raise RuntimeError("database not reachable")

    def reconnect(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        with contextlib.suppress(Exception):  # not back yet: the next query tries again
            self.conn = connect(self.ctx)

    def all_running(self, since: datetime | None = None) -> bool:
        """Every scheduler running, held by a live director, heartbeat after `since`."""
        prefixes = [member.owner_prefix for member in self.live]
        try:
            row = self.conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE s.state = 'running'"
                " AND split_part(s.owner, '#', 1) || '#' = ANY(%s)"
                " AND (%s::timestamptz IS NULL OR s.heartbeat_at > %s::timestamptz))"
                " FROM schedulers s JOIN organisations o ON o.id = s.organisation",
                (prefixes, since, since),
            ).fetchone()
        except Exception:
            self.reconnect()
            return False
        return row is not None and row[0] > 0 and row[0] == row[1]

    def term_began_after(self, since: datetime) -> float | None:
        """Seconds from `since` until the current leadership term began (database clock), if later."""
        try:
            row = self.conn.execute(
                "SELECT extract(epoch FROM acquired_at - %s::timestamptz) FROM leaders WHERE role = 'director'",
                (since,),
            ).fetchone()
        except Exception:
            self.reconnect()
            return None
        return None if row is None or row[0] is None or row[0] < 0 else float(row[0])

    def leader(self) -> Member | None:
        try:
            pid = leader_pid(self.ctx.database_url)
        except Exception:
            return None
        return next((member for member in self.live if member.pid == pid), None)

    def close(self) -> None:
        self.conn.close()


def timed(condition: Callable[[], bool], timeout: float) -> float | None:
    return wait_for(condition, timeout, interval=0.05)


def settle(directors: Directors) -> bool:
    return timed(lambda: directors.leader() is not None and directors.all_running(), SETTLE_TIMEOUT) is not None


# -- the faults --------------------------------------------------------------------------------------------


def freeze(directors: Directors) -> dict[str, Any]:
    leader = directors.leader()
    assert leader is not None
    term = leader_term(directors.ctx.database_url)
    since = directors.db_now()
    leader.signal(signal.SIGSTOP)
    directors.live.remove(leader)
    try:
        recovered = timed(lambda: directors.all_running(since), LEASES.lease_seconds + FAULT_TIMEOUT)
    finally:
        leader.signal(signal.SIGCONT)
        directors.live.append(leader)
    stepped_down = timed(
        lambda: "taken over by another director" in leader.log() or "renewed too late" in leader.log(), 30
    )
    return {
        "at": since.isoformat(),
        "recovered_s": recovered,
        "new_term_after_s": directors.term_began_after(since),
        "term_before": term,
        "term_after": leader_term(directors.ctx.database_url),
        "resumed_leader_stepped_down": stepped_down is not None,
    }


def cut(directors: Directors) -> dict[str, Any]:
    leader = directors.leader()
    assert leader is not None
    since = directors.db_now()
    connections = terminate_connections_of(directors.ctx.database_url, leader.pid)
    recovered = timed(lambda: directors.all_running(since), FAULT_TIMEOUT)
    after = directors.leader()
    return {
        "at": since.isoformat(),
        "recovered_s": recovered,
        "new_term_after_s": directors.term_began_after(since),
        "connections_terminated": connections,
        "same_leader": after is leader,
    }


def kill(directors: Directors) -> dict[str, Any]:
    leader = directors.leader()
    assert leader is not None
    since = directors.db_now()
    leader.signal(signal.SIGKILL)
    directors.live.remove(leader)
    recovered = timed(lambda: directors.all_running(since), FAULT_TIMEOUT)
    leader.process.wait(10)
    new_term_after = directors.term_began_after(since)
    directors.live.append(directors.members.start("director"))  # the replacement pod
    return {"at": since.isoformat(), "recovered_s": recovered, "new_term_after_s": new_term_after}


def restart_postgres(directors: Directors) -> dict[str, Any]:
    data, binaries = os.environ["BATON_TEST_PG_DATA"], os.environ["BATON_TEST_PG_BIN"]
    command = [f"{binaries}/pg_ctl", "-D", data, "-m", "fast", "-w", "-t", "60", "restart"]
    command += ["-l", str(Path(data).parent / "server.log")]
    if os.geteuid() == 0:  # scripts/services.sh runs the server as the postgres user
        command = ["runuser", "-u", "postgres", "--", *command]
    since = directors.db_now()
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    restarted = time.monotonic() - started
    directors.reconnect()
    recovered = timed(lambda: directors.all_running(since), FAULT_TIMEOUT)
    return {
        "at": since.isoformat(),
        "recovered_s": None if recovered is None else restarted + recovered,
        "new_term_after_s": directors.term_began_after(since),
        "postgres_restart_s": restarted,
    }


FAULTS: dict[str, Callable[[Directors], dict[str, Any]]] = {
    "freeze": freeze,
    "cut": cut,
    "kill": kill,
    "restart": restart_postgres,
}


def summary(runs: list[dict[str, Any]], target: float) -> dict[str, Any]:
    times = [run["recovered_s"] for run in runs]
    measured = [value for value in times if value is not None]
    worst = max(measured) if len(measured) == len(times) and measured else math.inf
    return {
        "runs": runs,
        "count": len(runs),
        "recovered": len(measured),
        "min_s": min(measured) if measured else None,
        "median_s": statistics.median(measured) if measured else None,
        "max_s": worst,  # infinite when a run did not recover: the verdict is then a MISS
        "target_s": target,
        "within_target": len(measured) == len(times) and all(value <= target for value in measured),
    }


def director_harness(ctx: Context, directors_count: int, repeats: int, faults: list[str]) -> dict[str, Any]:
    fresh_database(ctx)
    organisations = [f"lease-{n:02d}" for n in range(ORGANISATIONS)]
    with connect(ctx) as conn:
        add_organisations(conn, organisations)
    install(ctx.database_url)
    with connect(ctx) as conn:
        conn.execute("TRUNCATE scheduler_writes")  # scheduler ids repeat across runs: judge this run only
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in faults}
    started = time.monotonic()
    with pool(ctx.database_url, DIRECTOR_ENV) as members, EventFeeder(ctx.database_url, organisations, 0.05) as feed:
        directors = Directors(ctx, members, directors_count)
        try:
            if not settle(directors):
                raise RuntimeError("the directors never ran every scheduler")
            for _round in range(repeats):
                for name in faults:
                    time.sleep(PAUSE_BETWEEN_FAULTS)
                    runs[name].append(FAULTS[name](directors))
                    if not settle(directors):
                        raise RuntimeError(f"no recovery after {name}")
        finally:
            directors.close()
        events = feed.sent
    audit = analyse(ctx.database_url)
    return {
        "directors": directors_count,
        "organisations": ORGANISATIONS,
        "schedulers": ORGANISATIONS * 3,
        "events_sent": events,
        "seconds": time.monotonic() - started,
        "faults": {name: summary(runs[name], TARGETS[name]) for name in faults},
        "audit": audit.as_dict(),
    }


# -- the Kubernetes Lease elector ------------------------------------------------------------------------


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{url}"}}}}]
users: [{{name: fake, user: {{token: bench}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: fake, namespace: baton}}}}]
current-context: fake
"""


def kubernetes_freeze(ctx: Context) -> dict[str, Any]:
    """Two Kubernetes-runner directors on the fake API server; the Lease holder is frozen past its
    lease, then resumed: does the other take the Lease over in bounded time, and does the resumed
    one step down (no second change of holder)?"""
    from tests.fake_kube import FakeKubernetes  # the integration tests' REST server

    fresh_database(ctx)
    with connect(ctx) as conn:
        add_organisations(conn, [f"kube-{n:02d}" for n in range(ORGANISATIONS)])
    kube = FakeKubernetes().start()
    config = Path(tempfile.mkdtemp(prefix="baton-bench-kube-")) / "kubeconfig"
    config.write_text(KUBECONFIG.format(url=kube.url))
    key = ("leases", "baton", "baton-director")

    def lease() -> dict[str, Any]:
        return dict((kube.objects.get(key) or {}).get("spec") or {})

    try:
        env = {**DIRECTOR_ENV, "KUBECONFIG": str(config), "BATON_K8S_NAMESPACE": "baton"}
        with pool(ctx.database_url, env) as members:
            directors = [members.start("director", "--runner", "kubernetes") for _ in range(2)]
            holder_of = {f"{member.owner_prefix[:-1]}": member for member in directors}
            if wait_for(lambda: lease().get("holderIdentity") in holder_of, 60) is None:
                return {"measured": False, "why": "no director took the Lease", "log": directors[0].log()[-1500:]}
            pods = wait_for(lambda: len(kube.pods("baton")) == ORGANISATIONS * 3, 60)
            holder = holder_of[lease()["holderIdentity"]]
            other = next(member for member in directors if member is not holder)
            transitions = int(lease().get("leaseTransitions") or 0)
            holder.signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            successor = other.owner_prefix[:-1]
            taken = wait_for(lambda: lease().get("holderIdentity") == successor, LEASES.lease_seconds + 60)
            frozen_for = time.monotonic() - frozen_at
            holder.signal(signal.SIGCONT)
            stepped_down = wait_for(lambda: "lost leadership" in holder.log(), 30)
            time.sleep(3 * LEASES.retry_period_seconds)  # would it take the Lease back?
            final = lease()
            return {
                "measured": True,
                "lease_s": LEASES.lease_seconds,
                "pods_created": pods is not None,
                "frozen_s": frozen_for,
                "taken_over_s": math.inf if taken is None else taken,
                "target_s": TARGETS["freeze"],
                "resumed_leader_stepped_down": stepped_down is not None,
                "holder_after_resume_is_the_new_one": final.get("holderIdentity") == successor,
                "transitions": int(final.get("leaseTransitions") or 0) - transitions,
            }
    finally:
        kube.stop()


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    faults = list(FAULTS)
    if not (os.environ.get("BATON_TEST_PG_DATA") and os.environ.get("BATON_TEST_PG_BIN")):
        faults.remove("restart")  # not our own server: we cannot restart it
    harness = director_harness(ctx, directors_count=2 if ctx.quick else 3, repeats=1 if ctx.quick else 3, faults=faults)
    return {
        "settings": {
            "lease_s": LEASES.lease_seconds,
            "renew_deadline_s": LEASES.renew_deadline_seconds,
            "retry_period_s": LEASES.retry_period_seconds,
            "reconcile_interval_s": RECONCILE_INTERVAL_SECONDS,
        },
        "harness": harness,
        "kubernetes": kubernetes_freeze(ctx),
    }
