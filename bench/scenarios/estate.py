"""Ten thousand organisations (issue #33): 30,000 schedulers on PostgreSQL shared by 1, 2 and 4
`baton worker` processes with default settings, as a large OpenKAT estate would run them.

For each worker count: time from starting the processes until every scheduler runs; the idle cost
(CPU seconds per minute of the workers and of every PostgreSQL server process, from psutil, while
no event arrives, with the transactions, scheduler-row updates and WAL the database saw meanwhile);
memory per scheduler (RSS and USS above a worker with no organisation); events spread over every
organisation (ingest per second of a burst, and how late an event in a quiet organisation is handled,
alone and while the others are busy); with 2 and 4 workers the hand-over after SIGKILL and SIGTERM of
one. Besides: an idle PostgreSQL with no Baton process, a worker with no organisation, and the cost of
one lease renewal of every scheduler (`Ownership.renew`, the statement a process sends every retry
period), measured in this process.

The machine is shared: CPU seconds are what our processes used (not wall time), and the load average
of each window is recorded beside them.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil

from baton.core.logging import configure_logging
from baton.core.settings import LeaseSettings, Settings, TimingSettings
from baton.ingest.ownership import Ownership
from baton.storage.engine import Store
from bench.scenarios.common import Context, add_organisations, connect, fresh_database
from bench.scenarios.workers import Schedulers, hand_overs, stop_gracefully, timed
from harness.leasechaos import FEED_MIME_TYPE, Member, pool, wait_for

TARGET_IDLE_CPU_S_PER_MIN = 6.0  # workers and PostgreSQL together, at 10,000 organisations (#33)


def default(model: Any, name: str) -> Any:
    return model.model_fields[name].default


# Every setting at its default, whatever the environment of this process says (the pool passes no
# other BATON_* variable on).
WORKER_ENV = {
    "BATON_LEASE_SECONDS": f"{default(LeaseSettings, 'lease_seconds'):g}",
    "BATON_RENEW_DEADLINE_SECONDS": f"{default(LeaseSettings, 'renew_deadline_seconds'):g}",
    "BATON_RETRY_PERIOD_SECONDS": f"{default(LeaseSettings, 'retry_period_seconds'):g}",
    "BATON_RECONCILE_INTERVAL_SECONDS": f"{default(TimingSettings, 'reconcile_interval_seconds'):g}",
    "BATON_POLL_INTERVAL_SECONDS": f"{default(TimingSettings, 'poll_interval_seconds'):g}",
    "BATON_HEARTBEAT_TIMEOUT_SECONDS": f"{default(TimingSettings, 'heartbeat_timeout_seconds'):g}",
    "BATON_LOG_LEVEL": "warning",
}
RUN_TIMEOUT = 600.0
HUNG_LINE = "scheduler hung; its row is given up"
DRAIN_TIMEOUT = 600.0


# -- CPU, memory and the database's counters ------------------------------------------------------------


def cpu_seconds(process: psutil.Process) -> float:
    """User and system time of a process and of its children, the ones it waited for included."""
    try:
        times = process.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in process.children(recursive=True):
            try:
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
            except psutil.NoSuchProcess:
                continue
        return total
    except psutil.NoSuchProcess:
        return float("nan")


def postmaster(ctx: Context) -> psutil.Process:
    """The PostgreSQL server (the parent of every backend: its children are the whole server)."""
    with connect(ctx) as conn:  # the backend lives as long as this connection
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        parent = psutil.Process(int(row[0])).parent()
    assert parent is not None
    return parent


@dataclass(frozen=True)
class Snapshot:
    at: float
    workers_cpu: float
    postgres_cpu: float
    transactions: int
    scheduler_updates: int
    wal_bytes: int
    vacuums: int  # autovacuum and autoanalyze runs on the schedulers table
    load: float


def snapshot(ctx: Context, server: psutil.Process, workers: Sequence[psutil.Process]) -> Snapshot:
    with connect(ctx) as conn:
        row = conn.execute(
            "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),"
            " (SELECT coalesce(n_tup_upd, 0) FROM pg_stat_user_tables WHERE relname = 'schedulers'),"
            " pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,"
            " (SELECT autovacuum_count + autoanalyze_count FROM pg_stat_user_tables WHERE relname = 'schedulers')"
        ).fetchone()
    assert row is not None
    return Snapshot(
        at=time.monotonic(),
        workers_cpu=sum(cpu_seconds(worker) for worker in workers),
        postgres_cpu=cpu_seconds(server),
        transactions=int(row[0] or 0),
        scheduler_updates=int(row[1] or 0),
        wal_bytes=int(row[2] or 0),
        vacuums=int(row[3] or 0),
        load=os.getloadavg()[0],
    )


def idle_cost(
    ctx: Context, server: psutil.Process, workers: Sequence[psutil.Process], seconds: float
) -> dict[str, Any]:
    """What the processes cost over `seconds` with no event arriving, per minute."""
    before = snapshot(ctx, server, workers)
    time.sleep(seconds)
    after = snapshot(ctx, server, workers)
    minutes = (after.at - before.at) / 60
    workers_cpu = (after.workers_cpu - before.workers_cpu) / minutes
    postgres_cpu = (after.postgres_cpu - before.postgres_cpu) / minutes
    return {
        "window_s": after.at - before.at,
        "workers_cpu_s_per_min": workers_cpu,
        "postgres_cpu_s_per_min": postgres_cpu,
        "cpu_s_per_min": workers_cpu + postgres_cpu,
        "transactions_per_min": (after.transactions - before.transactions) / minutes,
        "scheduler_rows_updated_per_min": (after.scheduler_updates - before.scheduler_updates) / minutes,
        "wal_kib_per_min": (after.wal_bytes - before.wal_bytes) / 1024 / minutes,
        # The claims updated every scheduler row: autovacuum may clean up after them in the window
        # (its CPU is PostgreSQL's, its WAL is most of the window's).
        "schedulers_autovacuums": after.vacuums - before.vacuums,
        "load_1m": (before.load + after.load) / 2,
    }


def memory_mib(process: psutil.Process) -> dict[str, float]:
    info = process.memory_full_info()
    return {"rss_mib": info.rss / 2**20, "uss_mib": info.uss / 2**20, "pss_mib": info.pss / 2**20}


# -- the estate ------------------------------------------------------------------------------------------


def organisation_names(count: int) -> list[str]:
    return [f"est-{n:05d}" for n in range(count)]


def reset(ctx: Context) -> None:
    """Between cases (no worker running): nobody holds anything, no event or task is left."""
    with connect(ctx) as conn:
        conn.execute("UPDATE schedulers SET owner = NULL, lease_expires_at = NULL, state = 'stopped'")
        conn.execute("DELETE FROM workers")
        conn.execute("TRUNCATE tasks, events, boefje_runs, queue_counters CASCADE")  # and what refers to tasks
        conn.execute("VACUUM ANALYZE schedulers")


@contextmanager
def workers_running(ctx: Context, count: int) -> Iterator[tuple[Any, list[Member]]]:
    with pool(ctx.database_url, WORKER_ENV) as members:
        yield members, [members.start("worker") for _ in range(count)]


def baseline(ctx: Context, seconds: float) -> dict[str, Any]:
    """PostgreSQL with no Baton process connected, then one worker with no organisation."""
    server = postmaster(ctx)
    postgres_only = idle_cost(ctx, server, [], seconds)
    with workers_running(ctx, 1) as (_members, (member,)):
        wait_for(lambda: registered(ctx, member), 60)
        time.sleep(3)
        worker = psutil.Process(member.pid)
        cost = idle_cost(ctx, server, [worker], seconds)
        memory = memory_mib(worker)
    return {"postgres_only": postgres_only, "empty_worker": {**cost, **memory}}


def registered(ctx: Context, member: Member) -> bool:
    with connect(ctx) as conn:
        row = conn.execute("SELECT count(*) FROM workers WHERE id LIKE %s", (member.owner_prefix + "%",)).fetchone()
    return bool(row and row[0])


class _Lessee:
    def lease_lost(self, reason: str) -> None:
        raise AssertionError(f"benchmark lease lost: {reason}")

    def set_enabled(self, enabled: bool) -> None:
        return None


def renewal_cost(ctx: Context, rounds: int = 20) -> dict[str, Any]:
    """One renewal of every scheduler's lease by one process, as `Ownership.renew` sends it every
    retry period: CPU of this process and of PostgreSQL per renewal, the mean of `rounds` (psutil
    counts in clock ticks of 10 ms; no worker runs meanwhile)."""
    settings = Settings(database_url=ctx.database_url)
    store = Store(ctx.database_url)
    server = postmaster(ctx)
    ownership = Ownership(store, settings.leases, owner="bench:renewal#000000")
    try:
        claims = ownership.claim_unowned(1_000_000)
        lessee = _Lessee()
        for claim in claims:
            ownership.hold(claim, lessee)
        ownership.renew()  # warm: the statement prepared, the pool connected
        cpu_before, pg_before, at = time.process_time(), cpu_seconds(server), time.monotonic()
        for _ in range(rounds):
            ownership.renew()
        wall = time.monotonic() - at
        client, postgres = time.process_time() - cpu_before, cpu_seconds(server) - pg_before
        ownership.release_all("stopped")
    finally:
        store.dispose()
    retry = settings.leases.retry_period_seconds
    client_ms, postgres_ms = client * 1000 / rounds, postgres * 1000 / rounds
    return {
        "leases": len(claims),
        "rounds": rounds,
        "retry_period_s": retry,
        "client_cpu_ms": client_ms,
        "postgres_cpu_ms": postgres_ms,
        "wall_ms": wall * 1000 / rounds,
        "cpu_s_per_min": (client_ms + postgres_ms) / 1000 * 60 / retry,
    }


# -- events ------------------------------------------------------------------------------------------------

_SEQUENCE = iter(range(1, 10**12))
_SEQUENCE_LOCK = threading.Lock()


def next_ids(count: int) -> list[str]:
    with _SEQUENCE_LOCK:
        return [f"est-raw-{next(_SEQUENCE)}" for _ in range(count)]


def insert_events(conn: Any, organisations: Sequence[str]) -> list[int]:
    """One raw-file event (one normalizer task each) for each organisation named, in one statement;
    their seq numbers."""
    ids = next_ids(len(organisations))
    rows = conn.execute(
        "INSERT INTO events (scheduler_id, kind, payload, created_at)"
        " SELECT 'normalizer-' || o, 'raw_file_received',"
        "  json_build_object('type', 'raw_file_received', 'raw_file',"
        "    json_build_object('id', r, 'mime_types', json_build_array(%s::text))),"
        "  clock_timestamp()"
        " FROM unnest(%s::text[], %s::text[]) AS e(o, r) RETURNING seq",
        (FEED_MIME_TYPE, list(organisations), ids),
    ).fetchall()
    return [int(row[0]) for row in rows]


def pending(conn: Any) -> int:
    row = conn.execute("SELECT count(*) FROM events WHERE consumed_at IS NULL").fetchone()
    return int(row[0]) if row else 0


def lateness_ms(conn: Any, seqs: Sequence[int]) -> list[float]:
    rows = conn.execute(
        "SELECT extract(epoch FROM consumed_at - created_at) * 1000 FROM events"
        " WHERE seq = ANY(%s) AND consumed_at IS NOT NULL",
        (list(seqs),),
    ).fetchall()
    return [float(row[0]) for row in rows]


def ingest(
    ctx: Context, organisations: Sequence[str], per_organisation: int, server: psutil.Process, workers: Sequence[Any]
) -> dict[str, Any]:
    """A burst of events spread over every organisation, inserted at once: events handled per second
    until the inbox is empty again, and the CPU the workers and PostgreSQL spent per event meanwhile
    (which the machine's other load does not change as it changes the rate)."""
    before = snapshot(ctx, server, workers)
    with connect(ctx) as conn:
        started = time.monotonic()
        for _ in range(per_organisation):
            insert_events(conn, organisations)
        events = len(organisations) * per_organisation
        drained = wait_for(lambda: pending(conn) == 0, DRAIN_TIMEOUT, interval=0.2)
    seconds = None if drained is None else time.monotonic() - started
    after = snapshot(ctx, server, workers)
    return {
        "events": events,
        "seconds": seconds,
        "per_second": events / seconds if seconds else None,
        "complete": drained is not None,
        "workers_cpu_ms_per_event": (after.workers_cpu - before.workers_cpu) * 1000 / events,
        "postgres_cpu_ms_per_event": (after.postgres_cpu - before.postgres_cpu) * 1000 / events,
        "load_1m": (before.load + after.load) / 2,
    }


def probe_lateness(ctx: Context, quiet: Sequence[str], probes: int, every: float) -> list[float]:
    """One event at a time into a quiet organisation, each waited for: how late it was handled."""
    late: list[float] = []
    with connect(ctx) as conn:
        for n in range(probes):
            (seq,) = insert_events(conn, [quiet[n % len(quiet)]])
            if wait_for(lambda seq=seq: not pending_one(conn, seq), 30, interval=0.005) is None:
                late.append(float("inf"))
                continue
            late += lateness_ms(conn, [seq])
            time.sleep(every)
    return late


def pending_one(conn: Any, seq: int) -> bool:
    row = conn.execute("SELECT consumed_at IS NULL FROM events WHERE seq = %s", (seq,)).fetchone()
    return bool(row and row[0])


class BusyFeed:
    """Events into the busy organisations at a steady rate, in batches every 100 ms."""

    def __init__(self, ctx: Context, busy: Sequence[str], per_second: float) -> None:
        self.ctx = ctx
        self.busy = list(busy)
        self.per_batch = max(1, round(per_second / 10))
        self.seqs: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="busy-feed", daemon=True)

    def _run(self) -> None:
        with connect(self.ctx) as conn:
            while not self._stop.wait(0.1):
                self.seqs += insert_events(conn, random.sample(self.busy, min(self.per_batch, len(self.busy))))

    def __enter__(self) -> BusyFeed:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def summary_ms(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50_ms": statistics.median(ordered),
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max_ms": ordered[-1],
    }


def lateness(ctx: Context, organisations: Sequence[str], ingest_rate: float | None, quick: bool) -> dict[str, Any]:
    """An event in a quiet organisation: alone (the wake-up), then while 90 % of the organisations get
    events at half the measured ingest rate."""
    quiet = organisations[-max(1, len(organisations) // 10) :]
    busy = organisations[: len(organisations) - len(quiet)]
    alone = probe_lateness(ctx, quiet, 10 if quick else 30, 0.2)
    rate = min(2000.0, (ingest_rate or 200.0) / 2)
    with connect(ctx) as conn:
        with BusyFeed(ctx, busy, rate) as feed:
            time.sleep(2)
            while_busy = probe_lateness(ctx, quiet, 10 if quick else 40, 0.25)
        wait_for(lambda: pending(conn) == 0, DRAIN_TIMEOUT, interval=0.2)
        busy_late = lateness_ms(conn, feed.seqs)
    return {
        "quiet_alone": summary_ms(alone),
        "busy_rate_per_second": rate,
        "quiet_while_busy": summary_ms(while_busy),
        "busy_events": summary_ms(busy_late),
    }


# -- one case: N workers -------------------------------------------------------------------------------------


def one_case(
    ctx: Context, workers: int, organisations: list[str], empty: dict[str, Any], idle_seconds: float
) -> dict[str, Any]:
    reset(ctx)
    server = postmaster(ctx)
    schedulers = Schedulers(ctx)
    case: dict[str, Any] = {"workers": workers}
    try:
        with workers_running(ctx, workers) as (members, live):
            started = time.monotonic()
            case["all_running_s"] = timed(lambda: schedulers.all_running_under(live), started, RUN_TIMEOUT)
            case["balanced_s"] = timed(lambda: schedulers.balanced(live), started, RUN_TIMEOUT)
            case["per_worker"] = schedulers.shares(live)
            time.sleep(10)  # first turns and state writes settle
            processes = [psutil.Process(member.pid) for member in live]
            case["idle"] = idle_cost(ctx, server, processes, idle_seconds)
            memory = [memory_mib(process) for process in processes]
            held = sum(case["per_worker"]) or 1
            case["memory"] = {
                "rss_mib_per_worker": [entry["rss_mib"] for entry in memory],
                "uss_mib_per_worker": [entry["uss_mib"] for entry in memory],
                "rss_kib_per_scheduler": (sum(e["rss_mib"] for e in memory) - workers * empty["rss_mib"]) * 1024 / held,
                "uss_kib_per_scheduler": (sum(e["uss_mib"] for e in memory) - workers * empty["uss_mib"]) * 1024 / held,
            }
            case["ingest"] = ingest(ctx, organisations, 1, server, processes)
            # A scheduler whose turns wait for a thread longer than the hang limit is given up as hung
            # (ingest/ownership.py): how many were, from the workers' logs (they say so one by one).
            case["ingest"]["given_up_as_hung"] = sum(member.log().count(HUNG_LINE) for member in live)
            case["lateness"] = lateness(ctx, organisations, case["ingest"]["per_second"], ctx.quick)
            if workers >= 2:
                case.update(hand_overs(members, live, schedulers))
            exits = [stop_gracefully(member) for member in live]
            case["clean_exits"] = sum(1 for code in exits if code == 0)
    finally:
        schedulers.close()
    return case


def worst(cases: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for case in cases:
        value: Any = case
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            values.append(float(value))
    return max(values) if values else None


def run(ctx: Context) -> dict[str, Any]:
    configure_logging("warning")
    load_start = os.getloadavg()
    count = ctx.size(10_000, 1_000)
    counts = (1, 2) if ctx.quick else (1, 2, 4)
    idle_seconds = 20.0 if ctx.quick else 60.0
    fresh_database(ctx)
    base = baseline(ctx, idle_seconds / 2)
    organisations = organisation_names(count)
    with connect(ctx) as conn:
        add_organisations(conn, organisations)
        conn.execute("VACUUM ANALYZE")
    renewal = renewal_cost(ctx)
    cases = [one_case(ctx, workers, organisations, base["empty_worker"], idle_seconds) for workers in counts]
    alone = base["postgres_only"]["postgres_cpu_s_per_min"]
    for case in cases:  # the machine is shared: the same measure of PostgreSQL alone, same run
        # (a few clock ticks at least: an idle PostgreSQL may measure zero, or a rounding error below it)
        case["idle"]["to_postgres_alone"] = case["idle"]["cpu_s_per_min"] / alone if alone >= 0.05 else None
    return {
        "organisations": count,
        "schedulers": count * 3,
        "settings": {key.removeprefix("BATON_").lower(): value for key, value in WORKER_ENV.items()},
        "scheduler_threads": default(Settings, "scheduler_threads"),
        "targets": {"idle_cpu_s_per_min": TARGET_IDLE_CPU_S_PER_MIN},
        "baseline": base,
        "renewal": renewal,
        "cases": cases,
        "cores": os.cpu_count(),
        "load_start": load_start,  # 1, 5 and 15 minutes: the machine is shared, wall times are inflated
        "load_end": os.getloadavg(),
        "worst": {
            "idle_cpu_s_per_min": worst(cases, "idle", "cpu_s_per_min"),
            "all_running_s": worst(cases, "all_running_s"),
            "sigkill_handover_s": worst(cases, "sigkill_handover_s"),
            "sigterm_handover_s": worst(cases, "sigterm_handover_s"),
        },
    }
