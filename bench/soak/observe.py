"""What a soak run records while it runs.

- `Tasks`: every task Baton made, read from the `tasks` table a few seconds after it appeared (by
  `seq`, with a margin for transactions that commit out of order), so that the end of the run can
  account for tasks that retention has removed since;
- `Logs`: every Baton process's JSON log, read as it grows: lines, warnings and errors by kind,
  tracebacks, and each line that says an outage began or ended;
- `Observer`: a sample every `plan.sample_every` seconds (every minute of an hour's run): resident
  and unique memory, file descriptors, sockets, threads and CPU of every Baton process (psutil), the
  PostgreSQL server's CPU, its connections by state (pg_stat_activity), each of Baton's tables' and
  indexes' size, live and dead tuples and vacuums (pg_total_relation_size, pg_stat_user_tables), the
  load average, the latencies and errors the clients saw, and how late events and rescans became
  tasks.

A sample taken while PostgreSQL restarts lacks the database's part; nothing else waits for it.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil
import psycopg

from baton.storage.urls import libpq_conninfo
from bench.soak.load import Load
from bench.soak.stack import Member, Stack
from harness.cputime import snapshot as cpu_snapshot
from harness.cputime import tree_seconds

TRACKED_MARGIN = 2_000  # rows of `seq` read again each time: transactions that commit late
# The tables of Baton's schema whose size a long run must keep flat.
TABLES = (
    "tasks",
    "events",
    "schedules",
    "boefje_runs",
    "schedulers",
    "organisations",
    "plugins",
    "plugin_settings",
    "pop_receipts",
    "pending_settlements",
    "leaders",
    "workers",
    "queue_counters",
    "outside_services",
    "boefje_backfills",
)
# What a process logs when an outage begins and when it ends.
OUTAGE_LINES = {
    "database unavailable": ("database", "start"),
    "database available again": ("database", "end"),
    "outside service failing": ("outside", "start"),
    "outside service answering again": ("outside", "end"),
    "broker unavailable": ("broker", "start"),
    "broker available again": ("broker", "end"),
    # What each consumer said before one process-wide line (ingest/rabbitmq.py BROKER): a regression.
    "broker unavailable; reconnecting": ("broker", "start"),
    "broker available again; consuming": ("broker", "end"),
    "event router lost the broker; retrying": ("broker", "start"),
    "organisation watcher lost the broker; retrying": ("broker", "start"),
}


def percentiles(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


@dataclass
class TaskRow:
    id: str
    type: str
    organisation: str
    status: str
    priority: int
    schedule_id: str | None
    boefje: str | None
    input_ooi: str | None
    raw_id: str | None
    deduplication_key: str | None
    created: float  # epoch seconds
    modified: float
    attempts: int
    reason: str | None
    seen: float  # on the run's clock


TASK_COLUMNS = (
    "seq, id::text, type, organisation, status, priority, schedule_id, data->'boefje'->>'id',"
    " data->>'input_ooi', data->'raw_data'->>'id', data->>'deduplication_key',"
    " extract(epoch FROM created_at)::float8, extract(epoch FROM modified_at)::float8, attempts, reason"
)


def task_row(row: Sequence[Any], seen: float) -> TaskRow:
    """A row of TASK_COLUMNS (its first, `seq`, left out)."""
    names = [name for name in TaskRow.__dataclass_fields__ if name != "seen"]
    return TaskRow(**dict(zip(names, row[1:], strict=True)), seen=seen)


class Tasks:
    """Every task seen, by id; the newest first seen since the last call."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.rows: dict[str, TaskRow] = {}
        self._top = 0

    def read(self, conn: psycopg.Connection[Any]) -> list[TaskRow]:
        fresh: list[TaskRow] = []
        found = conn.execute(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE seq > %s ORDER BY seq", (max(0, self._top - TRACKED_MARGIN),)
        ).fetchall()
        for row in found:
            self._top = max(self._top, int(row[0]))
            if row[1] not in self.rows:
                task = task_row(row, self.clock())
                self.rows[task.id] = task
                fresh.append(task)
        return fresh

    def final(self, conn: psycopg.Connection[Any]) -> dict[str, TaskRow]:
        """Every task as it is now (those never seen before are recorded too)."""
        self._top = 0
        self.read(conn)
        now = self.clock()
        return {
            str(row[1]): task_row(row, now)
            for row in conn.execute(f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY seq").fetchall()
        }


@dataclass
class LogState:
    member: Member
    offset: int = 0
    partial: bytes = b""


@dataclass
class Logs:
    """Every Baton process's log, read as it grows."""

    clock: Callable[[], float]
    states: dict[str, LogState] = field(default_factory=dict)
    outages: list[dict[str, Any]] = field(default_factory=list)  # each outage line: when, who, what
    tracebacks: list[dict[str, Any]] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)  # warnings and errors by (level, event)

    def read(self, members: Sequence[Member]) -> dict[str, dict[str, int]]:
        """Lines per process since the last call: all, warnings, errors, tracebacks."""
        counts: dict[str, dict[str, int]] = {}
        for member in members:
            state = self.states.setdefault(str(member.log), LogState(member))
            counts[member.name] = self._read_one(state)
        return counts

    def _read_one(self, state: LogState) -> dict[str, int]:
        count = Counter[str]()
        try:
            with state.member.log.open("rb") as handle:
                handle.seek(state.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return dict(count)
        state.offset += len(chunk)
        lines = (state.partial + chunk).split(b"\n")
        state.partial = lines.pop()
        for line in lines:
            if line.strip():
                self._line(state.member, line.decode(errors="replace"), count)
        return dict(count)

    def _line(self, member: Member, text: str, count: Counter[str]) -> None:
        count["lines"] += 1
        try:
            entry = json.loads(text)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):  # not Baton's JSON: an interpreter's dying words, say
            count["unparsed"] += 1
            if text.startswith("Traceback"):
                count["tracebacks"] += 1
                self.tracebacks.append({"at": self.clock(), "process": member.name, "line": text[:500]})
            return
        level, event = str(entry.get("level", "")), str(entry.get("event", ""))
        if "exception" in entry:
            count["tracebacks"] += 1
            self.tracebacks.append({"at": self.clock(), "process": member.name, "event": event[:200]})
        if level in ("warning", "error", "critical"):
            count[level if level != "critical" else "error"] += 1
            self.kinds[f"{level}: {event[:120]}"] += 1
        if event in OUTAGE_LINES:
            what, edge = OUTAGE_LINES[event]
            self.outages.append(
                {
                    "at": self.clock(),
                    "process": member.name,
                    "what": what,
                    "edge": edge,
                    "service": entry.get("service") or entry.get("queue"),
                    "timestamp": entry.get("timestamp"),
                }
            )


def process_sample(process: psutil.Process) -> dict[str, Any] | None:
    try:
        with process.oneshot():
            memory = process.memory_full_info()
            times = process.cpu_times()
            return {
                "rss_mib": memory.rss / 2**20,
                "uss_mib": memory.uss / 2**20,
                "fds": process.num_fds(),
                "connections": len(process.net_connections(kind="inet")),
                "threads": process.num_threads(),
                "cpu_s": times.user + times.system,
            }
    except psutil.Error:
        return None


def database_sample(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    activity = dict(
        conn.execute(
            "SELECT coalesce(state, 'background'), count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() GROUP BY 1"
        ).fetchall()
    )
    tables = {}
    for name, total, heap, indexes, live, dead, vacuums in conn.execute(
        "SELECT relname, pg_total_relation_size(relid), pg_relation_size(relid), pg_indexes_size(relid),"
        " n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        (list(TABLES),),
    ).fetchall():
        tables[name] = {
            "total_kib": total / 1024,
            "heap_kib": heap / 1024,
            "indexes_kib": indexes / 1024,
            "live": live,
            "dead": dead,
            "autovacuums": vacuums,
        }
    held: dict[str, dict[str, int]] = {}  # pid of the holder → its schedulers by type
    for owner, kind, count in conn.execute(
        "SELECT owner, type, count(*) FROM schedulers WHERE owner IS NOT NULL GROUP BY 1, 2"
    ).fetchall():
        pid = str(owner).split("#", 1)[0].rsplit(":", 1)[-1]
        held.setdefault(pid, {})[str(kind)] = int(count)
    counts = dict(conn.execute("SELECT status, count(*) FROM tasks GROUP BY status").fetchall())
    unconsumed = conn.execute("SELECT count(*) FROM events WHERE consumed_at IS NULL").fetchone()
    return {
        "connections": {str(state): int(n) for state, n in activity.items()},
        "tables": tables,
        "tasks_by_status": {str(status): int(n) for status, n in counts.items()},
        "schedulers_held": held,
        "events_unconsumed": int(unconsumed[0]) if unconsumed else None,
    }


class Observer(threading.Thread):
    """The samples of the run, and the task records beside them."""

    def __init__(self, stack: Stack, load: Load, clock: Callable[[], float], every: float) -> None:
        super().__init__(name="soak-observer", daemon=True)
        self.stack = stack
        self.load = load
        self.clock = clock
        self.every = every
        self.samples: list[dict[str, Any]] = []
        self.tasks = Tasks(clock)
        self.logs = Logs(clock)
        self.failures: list[str] = []
        self._stop_event = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._postmaster: int | None = None
        self._last = 0.0
        self._pending: list[TaskRow] = []
        self.deadlines: dict[str, float] = {}  # seeded schedule id → its deadline (epoch s)
        self._timed: set[tuple[str, str | None, str]] = set()  # (org, boefje, object) whose first task was timed
        self._timed_schedules: set[str | None] = set()

    # -- the database, through restarts -------------------------------------------------------------

    def connection(self) -> psycopg.Connection[Any] | None:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            self._conn = psycopg.connect(libpq_conninfo(self.stack.database_url), autocommit=True, connect_timeout=3)
            row = self._conn.execute("SELECT pg_backend_pid()").fetchone()
            parent = psutil.Process(int(row[0])).parent() if row else None
            self._postmaster = parent.pid if parent else None
        except (psycopg.Error, psutil.Error):
            self._conn = None
        return self._conn

    def query(self, work: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        conn = self.connection()
        if conn is None:
            return None
        try:
            return work(conn)
        except psycopg.Error:
            conn.close()
            self._conn = None
            return None

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self._stop_event.wait(min(5.0, self.every)):
                self.track()
                if self.clock() - self._last >= self.every:
                    self.sample()
        except BaseException as exc:  # noted: the run's checks fail with it
            self.failures.append(repr(exc))

    def track(self) -> None:
        fresh = self.query(self.tasks.read)
        if fresh:
            self._pending.extend(fresh)

    def sample(self) -> None:
        start, now = self._last, self.clock()
        self._last = now
        latencies, errors = self.load.recorder.between(start, now)
        members = self.stack.live()
        cpu = cpu_snapshot()
        processes = {}
        for member in members:
            found = process_sample(psutil.Process(member.pid)) if member.alive else None
            if found is not None:
                processes[member.name] = {"role": member.role, "slot": member.slot, "pid": member.pid, **found}
        postgres = self.query(database_sample) or {}
        if self._postmaster is not None:
            try:  # a new server after a restart: its own count (the report takes differences)
                postgres["cpu_s"] = tree_seconds(self._postmaster, cpu)
                postgres["postmaster"] = self._postmaster
            except ProcessLookupError:
                pass
        fresh, self._pending = self._pending, []
        self.samples.append(
            {
                "at": now,
                "load_1m": os.getloadavg()[0],
                "processes": processes,
                # Not Baton's, beside it: what the OpenKAT stand-ins and this load generator used.
                "others": self.others(),
                "outside_calls": self.outside_calls(),
                "postgres": postgres,
                "logs": self.logs.read(self.stack.members),
                "latency": {kind: percentiles(values) for kind, values in latencies.items()},
                "client_errors": dict(errors),
                "lateness": self.lateness(fresh),
                "tasks_seen": len(fresh),
            }
        )

    def others(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, pid in (("standins", self.stack.standins_pid), ("load", os.getpid())):
            sample = process_sample(psutil.Process(pid)) if pid is not None and psutil.pid_exists(pid) else None
            if sample is not None:
                found[name] = sample
        return found

    def outside_calls(self) -> int | None:
        """Calls the stand-ins answered so far, all services and endpoints together."""
        if self.stack.outside is None:
            return None
        try:
            return sum(sum(calls.values()) for calls in self.stack.outside.calls().values())
        except Exception:  # the stand-ins are not this run's subject: a missed count is no failure
            return None

    def lateness(self, fresh: Sequence[TaskRow]) -> dict[str, Any]:
        """How late the tasks first seen in this sample were made: after their event was published
        (scan-profile and raw-file messages), and after their schedule came due (rescans). Only an event's
        or a schedule's first task: a (boefje, object) queued again a grace period later is a rescan."""
        published = self.load.published
        events: list[float] = []
        rescans: list[float] = []
        with published.lock:
            for task in fresh:
                if task.type == "boefje" and task.priority != 1 and task.input_ooi is not None:
                    key = (task.organisation, task.boefje, task.input_ooi)
                    sent = published.mutations.get((task.organisation, task.input_ooi))
                    if sent is not None and key not in self._timed:
                        self._timed.add(key)
                        events.append(task.created - sent)
                elif task.type == "normalizer" and task.raw_id in published.raw_files:
                    events.append(task.created - published.raw_files[task.raw_id][2])
        for task in fresh:
            deadline = self.deadlines.get(task.schedule_id or "")
            if deadline is not None and task.schedule_id not in self._timed_schedules and task.created >= deadline:
                self._timed_schedules.add(task.schedule_id)
                rescans.append(task.created - deadline)
        return {"event": percentiles(events), "rescan": percentiles(rescans)}

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)
        self.track()
        self.sample()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
