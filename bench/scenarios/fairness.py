"""Fair pop across organisations (issue 21): ten organisations, one ("noisy") with a backlog of
100,000 tasks, nine ("quiet-1".."quiet-9") receiving a steady trickle of new tasks at the same
priority through HTTP pushes, while 8 job-runner clients pop through `POST /schedulers/boefje/pop`
on `baton serve`.

Three series: BATON_FAIRNESS=false and =true on one database holding the backlog, and =true on a
second database without the noisy organisation (the baseline for dwell). Three servers run side by
side and the series are measured in short segments, interleaved over rounds (off, on, baseline, off,
...): a machine whose load drifts, or stalls for a moment, hits every series alike, so the ratios
compare like with like (the dwell verdict is the median over rounds of each round's p99 ratio, so
one segment hit by a stall does not decide it). A segment: the feeders push for a few seconds; the runners keep popping
`DRAIN` seconds longer, so the last pushes can be served too; then the quiet tasks are deleted (the
next segment starts with none queued) and the noisy backlog stays.

Dwell = push to hand-out, from the tasks' `created_at` and `modified_at` (both set by the server
when it starts handling the request); a quiet task not handed out by the end of its segment counts
with its age then (a lower bound). Pop throughput, fairness off against on, comes from the same
segments (the runners pop all the time).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any

import psycopg

from baton.storage.urls import libpq_conninfo
from bench.loadgen import Rate, measure
from bench.scenarios.common import (
    Context,
    Server,
    add_organisations,
    connect,
    fill,
    fresh_database,
    http_pop_many,
    percentile,
    ratio,
    serve,
)

NOISY = "noisy"
QUIET = [f"quiet-{n}" for n in range(1, 10)]
PRIORITY = 2
RUNNERS = 8
PUSHES_PER_SECOND_PER_ORGANISATION = 15.0
DRAIN = 0.5
BASELINE_DATABASE = "baton_bench_fairness_baseline"
SERIES = ("off", "on", "no_noisy")


class Feeder(threading.Thread):
    """Pushes to one quiet organisation's boefje queue at a fixed rate, on a fixed schedule (phase:
    offset of its first push, so the nine feeders take turns), until the segment's deadline."""

    def __init__(self, url: str, organisation: str, phase: float) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.organisation = organisation
        self.phase = phase
        self.start_at = 0.0
        self.deadline = 0.0
        self.started = threading.Event()
        self.pushed = 0
        self.failed = 0
        self.late_s = 0.0

    def begin(self, start_at: float, duration: float) -> None:
        self.start_at = start_at + self.phase
        self.deadline = start_at + duration
        self.started.set()

    def run(self) -> None:
        if not self.started.wait(600):
            return
        host, port = self.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        interval = 1 / PUSHES_PER_SECOND_PER_ORGANISATION
        path = f"/queues/boefje-{self.organisation}/push"
        n = 0
        while True:
            due = self.start_at + n * interval
            if due >= self.deadline or time.time() >= self.deadline:
                break  # never push after the segment: a task nobody could pop would count as waiting
            wait = due - time.time()
            if wait > 0:
                time.sleep(wait)
            else:
                self.late_s = max(self.late_s, -wait)
            body = json.dumps({"priority": PRIORITY, "data": {"boefje": {"id": "dns-records"}, "n": n}})
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status == 201:
                self.pushed += 1
            else:
                self.failed += 1
            n += 1
        conn.close()


@dataclasses.dataclass
class Samples:
    """What one series gathered over its segments."""

    rates: list[Rate] = dataclasses.field(default_factory=list)
    segment_p99: list[float] = dataclasses.field(default_factory=list)
    dwell: list[float] = dataclasses.field(default_factory=list)
    served: list[float] = dataclasses.field(default_factory=list)
    per_org: dict[str, list[float]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    handed_out: Counter[str] = dataclasses.field(default_factory=Counter)
    points: list[list[Any]] = dataclasses.field(default_factory=list)
    pushed: int = 0
    push_failures: int = 0
    feeder_late_s: float = 0.0


def segment(url: str, conn: psycopg.Connection[Any], duration: float, samples: Samples) -> None:
    """Runners pop for `duration` + DRAIN seconds while the feeders push for `duration`; then read
    what happened to the quiet tasks and delete them."""
    feeders = [
        Feeder(url, organisation, index / (PUSHES_PER_SECOND_PER_ORGANISATION * len(QUIET)))
        for index, organisation in enumerate(QUIET)
    ]
    for feeder in feeders:
        feeder.start()
    runner = http_pop_many(url, "boefje", 1, stop_when_dry=False)
    started: list[float] = []

    def begin(start_at: float) -> None:
        started.append(start_at)
        for feeder in feeders:
            feeder.begin(start_at, duration)

    samples.rates.append(measure([runner] * RUNNERS, duration + DRAIN, processes=2, on_start=begin))
    for feeder in feeders:
        feeder.join(60)
        samples.pushed += feeder.pushed
        samples.push_failures += feeder.failed
        samples.feeder_late_s = max(samples.feeder_late_s, feeder.late_s)
    ended = datetime.fromtimestamp(started[0] + duration + DRAIN).astimezone()
    begun = datetime.fromtimestamp(started[0]).astimezone()
    quiet_rows = conn.execute(
        "SELECT organisation, status, created_at, modified_at FROM tasks WHERE organisation = ANY(%s)", (QUIET,)
    ).fetchall()
    noisy_pops = conn.execute(
        "SELECT count(*) FROM tasks WHERE organisation = %s AND status = 'dispatched' AND modified_at >= %s",
        (NOISY, begun),
    ).fetchone()
    samples.handed_out[NOISY] += int(noisy_pops[0]) if noisy_pops else 0
    segment_dwell = []
    for organisation, status, created_at, modified_at in quiet_rows:
        was_served = status == "dispatched"
        handed = modified_at if was_served else ended
        seconds = max(0.0, (handed - created_at).total_seconds())
        samples.dwell.append(seconds)
        segment_dwell.append(seconds)
        samples.per_org[organisation].append(seconds)
        if was_served:
            samples.served.append(seconds)
            samples.handed_out[organisation] += 1
        pushed_at = round(created_at.timestamp() - started[0], 3)
        samples.points.append([organisation, pushed_at, round(seconds, 4), was_served])
    samples.segment_p99.append(percentile(segment_dwell, 0.99))
    conn.execute("DELETE FROM tasks WHERE organisation = ANY(%s)", (QUIET,))


def summary(samples: Samples, fairness: bool, backlog: int, duration: float) -> dict[str, Any]:
    total = sum(samples.handed_out.values())
    served_share = {org: count / total for org, count in sorted(samples.handed_out.items())} if total else {}
    return {
        "fairness": fairness,
        "noisy": backlog > 0,
        "backlog": backlog,
        "duration_s": duration,
        "segments": len(samples.rates),
        "pops_per_second": statistics.median(rate.per_second for rate in samples.rates),
        "pops_per_second_runs": [round(rate.per_second, 1) for rate in samples.rates],
        "pop_p50_ms": statistics.median(rate.p50_ms for rate in samples.rates),
        "pop_p99_ms": statistics.median(rate.p99_ms for rate in samples.rates),
        "quiet_pushed": samples.pushed,
        "quiet_push_failures": samples.push_failures,
        "feeder_max_late_s": samples.feeder_late_s,
        "quiet_tasks": len(samples.dwell),
        "quiet_served": len(samples.served),
        "quiet_dwell_p50_s": percentile(samples.dwell, 0.50),
        "quiet_dwell_p90_s": percentile(samples.dwell, 0.90),
        "quiet_dwell_p99_s": percentile(samples.dwell, 0.99),
        "quiet_served_dwell_p50_s": percentile(samples.served, 0.50) if samples.served else None,
        "quiet_served_dwell_p99_s": percentile(samples.served, 0.99) if samples.served else None,
        "quiet_dwell_p99_per_segment_s": samples.segment_p99,
        "worst_quiet_org_p99_s": max((percentile(values, 0.99) for values in samples.per_org.values()), default=None),
        "share_of_pops": served_share,
        "points": samples.points,
    }


def paired_ratio(series: Samples, baseline: Samples) -> float | None:
    """The median over rounds of this round's p99 dwell against the baseline's in the same round:
    one segment that a stall of the machine hit does not decide the verdict."""
    ratios = [ratio(mine, theirs) for mine, theirs in zip(series.segment_p99, baseline.segment_p99, strict=True)]
    known = [value for value in ratios if value is not None]
    return statistics.median(known) if known else None


def baseline_context(ctx: Context) -> Context:
    url = libpq_conninfo(ctx.database_url, dbname=BASELINE_DATABASE)
    return dataclasses.replace(ctx, database_url=url)


@contextmanager
def baseline_database(ctx: Context) -> Iterator[Context]:
    """A second database in the same PostgreSQL, for the series without the noisy organisation."""
    with psycopg.connect(libpq_conninfo(ctx.database_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BASELINE_DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BASELINE_DATABASE}"')
    try:
        yield baseline_context(ctx)
    finally:
        with psycopg.connect(libpq_conninfo(ctx.database_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{BASELINE_DATABASE}" WITH (FORCE)')


def run(ctx: Context) -> dict[str, Any]:
    backlog = ctx.size(100_000, 30_000)
    duration = float(ctx.size(3, 3))
    rounds = ctx.size(3, 1)
    with ExitStack() as stack:
        baseline = stack.enter_context(baseline_database(ctx))
        fresh_database(ctx)
        fresh_database(baseline)
        with connect(ctx) as conn:
            add_organisations(conn, [NOISY, *QUIET])
            fill(conn, [NOISY], backlog, priority=str(PRIORITY))
        with connect(baseline) as conn:
            add_organisations(conn, QUIET)
        servers: dict[str, Server] = {
            "off": stack.enter_context(serve(ctx.database_url, {"BATON_FAIRNESS": "false"}, log_dir=ctx.work_dir)),
            "on": stack.enter_context(serve(ctx.database_url, {"BATON_FAIRNESS": "true"}, log_dir=ctx.work_dir)),
            "no_noisy": stack.enter_context(
                serve(baseline.database_url, {"BATON_FAIRNESS": "true"}, log_dir=ctx.work_dir)
            ),
        }
        connections = {
            "off": stack.enter_context(connect(ctx)),
            "on": stack.enter_context(connect(ctx)),
            "no_noisy": stack.enter_context(connect(baseline)),
        }
        gathered = {name: Samples() for name in SERIES}
        for _ in range(rounds):
            for name in SERIES:
                segment(servers[name].url, connections[name], duration, gathered[name])
        left = connections["on"].execute(
            "SELECT count(*) FROM tasks WHERE organisation = %s AND status = 'queued'", (NOISY,)
        )
        noisy_left = int(left.fetchone()[0])  # type: ignore[index]
    runs = {
        "off": summary(gathered["off"], False, backlog, duration),
        "on": summary(gathered["on"], True, backlog, duration),
        "no_noisy": summary(gathered["no_noisy"], True, 0, duration),
    }
    return {
        "runners": RUNNERS,
        "quiet_organisations": len(QUIET),
        "pushes_per_second_per_quiet_organisation": PUSHES_PER_SECOND_PER_ORGANISATION,
        "priority": PRIORITY,
        "rounds": rounds,
        "drain_s": DRAIN,
        "noisy_left_queued": noisy_left,
        "runs": runs,
        "ratios": {
            "dwell_p99_on_to_no_noisy": paired_ratio(gathered["on"], gathered["no_noisy"]),
            "dwell_p99_on_to_no_noisy_pooled": ratio(
                runs["on"]["quiet_dwell_p99_s"], runs["no_noisy"]["quiet_dwell_p99_s"]
            ),
            "dwell_p99_off_to_no_noisy": ratio(runs["off"]["quiet_dwell_p99_s"], runs["no_noisy"]["quiet_dwell_p99_s"]),
            "throughput_on_to_off": ratio(runs["on"]["pops_per_second"], runs["off"]["pops_per_second"]),
        },
    }
